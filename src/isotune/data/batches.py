"""Which examples go into which batch: groups of similar length, so that batches padded to their
own longest example waste little compute, in a random order that changes every epoch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Batches of examples of similar length, in a random order that changes every epoch. With
    ``shuffle``, as Hugging Face's ``group_by_length``: shuffled, sorted by length within windows of
    ``window_batches`` batches, batched, the batches shuffled; without it, the split sorted by
    length (fastest evaluation). Batches are dealt round-robin to ``num_replicas`` processes."""

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        seed: int = 0,
        window_batches: int = 50,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.lengths = torch.as_tensor(lengths)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.window = batch_size * window_batches
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.position = 0  # batches of this epoch trained so far (counted by the data module)

    @property
    def sampler(self) -> LengthGroupedBatchSampler:
        """Itself: Lightning sets the epoch of a loader's ``batch_sampler.sampler``, never of the
        batch sampler itself, so without this every epoch would repeat the first one's order."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning each epoch: a new, reproducible order (also after resuming). The
        same epoch again keeps the position (a run resumed mid-epoch)."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def continue_at(self, epoch: int, position: int) -> None:
        """Iterate ``epoch``'s batches from ``position`` on: none repeated, none skipped."""
        self.epoch, self.position = epoch, position

    def _batches(self) -> list[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        n = len(self.lengths)
        if self.shuffle:
            order = torch.randperm(n, generator=generator)
            windows = order.split(self.window)
        else:
            windows = (torch.arange(n),)
        batches = []
        for window in windows:
            window = window[self.lengths[window].argsort(descending=True, stable=True)]
            batches.extend(window.split(self.batch_size))
        if self.drop_last:
            batches = [batch for batch in batches if len(batch) == self.batch_size]
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
        if self.num_replicas > 1 and self.shuffle:
            # Every process must run the same number of training steps.
            batches = batches[: len(batches) - len(batches) % self.num_replicas]
        return [batch.tolist() for batch in batches[self.rank :: self.num_replicas]]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches()[self.position :])  # position > 0 only when resuming

    def __len__(self) -> int:
        return len(self._batches())
