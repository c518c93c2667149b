"""The Lightning data module of a run: train, dev and test loaders of one GLUE task with dynamic
padding, and where training is in its batch order, for checkpoints."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerBase

from isotune.data.batches import LengthGroupedBatchSampler
from isotune.data.own_data import FILE_KEYS
from isotune.data.padding import batch_collate
from isotune.data.reading import Example, TaskSplits
from isotune.data.tasks import TaskSpec
from isotune.data.tokenized import TokenizedDataset, check_max_length
from isotune.data.tuning_split import TuningSplit, tuning_split_of

log = logging.getLogger(__name__)

# Lightning warns that a checkpoint written mid-epoch resumes unreliably unless the loader is
# stateful; here the data module's state carries the batch sampler's position instead.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")


def module_options(data: Mapping[str, Any]) -> dict[str, Any]:
    """The data module's options from the config's ``data`` section: all but the file names."""
    return {key: value for key, value in data.items() if key not in FILE_KEYS}


class GLUEDataModule(L.LightningDataModule):
    """Train, dev and test loaders for one task (GLUE's, or ``task=files``), with dynamic
    padding; ``examples``: splits read already (a ``task=files`` task's, read as its task was
    completed), handed on so that no file is read twice."""

    def __init__(
        self,
        task: TaskSpec,
        tokenizer: PreTrainedTokenizerBase,
        glue_dir: str | Path | None = None,
        max_length: int = 128,
        batch_size: int = 16,
        eval_batch_size: int = 64,
        drop_last: bool = True,
        group_by_length: bool = True,
        num_workers: int = 0,
        seed: int = 0,
        pad_buckets: list[int] | None = None,
        tuning_split: bool = False,
        tuning_split_size: int | float | None = None,
        tuning_split_seed: int = 0,
        examples: Mapping[str, Sequence[Example]] | None = None,
    ):
        super().__init__()
        check_max_length(max_length, task, tokenizer)
        self.task = task
        self.tokenizer = tokenizer
        self.glue_dir = glue_dir
        self.splits = TaskSplits(task, glue_dir, examples)  # each split read once
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.drop_last = drop_last
        self.group_by_length = group_by_length
        self.num_workers = num_workers
        self.seed = seed
        self.collate = batch_collate(tokenizer, pad_buckets, max_length)  # data/padding.py
        # data.tuning_split: train on train minus a split of it, evaluate (choose) on that split
        self.tuning = (tuning_split_size, tuning_split_seed) if tuning_split else None
        self.split: TuningSplit | None = None  # the tuning split, once train is read
        self.datasets: dict[str, TokenizedDataset] = {}
        self.train_sampler: LengthGroupedBatchSampler | None = None
        self._continue_at: tuple[int, int] | None = None  # (epoch, position) from a checkpoint

    def dataset(self, split: str) -> TokenizedDataset:
        """The tokenized split, loaded on first use."""
        if split not in self.datasets:
            examples = self._examples(split)
            self.datasets[split] = TokenizedDataset(
                examples, self.task, self.tokenizer, self.max_length
            )
            log.info("%s %s: %d examples", self.task.name, split, len(examples))
        return self.datasets[split]

    def _examples(self, split: str) -> list:
        """The examples of ``split``; with a tuning split, train's held out stand in for the dev
        split that chooses (the primary one), and train is what remains."""
        if self.tuning is None or split not in ("train", self.task.primary_split):
            return self.splits[split]
        if self.split is None:
            self.split = tuning_split_of(self.splits, *self.tuning)
        train = self.splits["train"]
        chosen = self.split.kept if split == "train" else self.split.held
        return [train[i] for i in chosen]

    def data_record(self) -> dict[str, Any]:
        """What the run trains on and evaluates (chooses its best epoch) on, for results.json;
        and a classification's classes, in class-id order (``classes``) and by label
        (``label_ids``: what a class id in the run's logits and predictions names), logged once
        too: a ``task=files`` run's classes are its files', so the record says which they were."""
        if self.tuning is None:
            record: dict[str, Any] = {"trained_on": "train", "evaluated_on": "dev"}
        else:
            self.dataset(self.task.primary_split)  # draws the split
            assert self.split is not None
            record = {
                "trained_on": f"train without its tuning split (n={len(self.split.kept)})",
                "evaluated_on": self.split.describe(),
            }
        if not self.task.is_regression:
            record["classes"] = list(self.task.labels)
            record["label_ids"] = {label: i for i, label in enumerate(self.task.labels)}
            log.info(
                "%s: %d classes (id: label) %s",
                self.task.name,
                len(self.task.labels),
                ", ".join(f"{i}: {label!r}" for i, label in enumerate(self.task.labels)),
            )
        return record

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit"):
            self.dataset("train")
        if stage in (None, "fit", "validate"):
            for split in self.task.eval_splits:
                self.dataset(split)

    def eval_batches(
        self, split: str, num_replicas: int = 1, rank: int = 0
    ) -> LengthGroupedBatchSampler:
        """Evaluation's batches of ``split``: sorted by length, ``eval_batch_size`` examples each,
        dealt to ``num_replicas`` processes. With the defaults, all of them: the isotropy callback
        encodes what validation skipped in these same batches, so its vectors get validation's
        padding."""
        return LengthGroupedBatchSampler(
            self.dataset(split).lengths,
            batch_size=self.eval_batch_size,
            shuffle=False,
            drop_last=False,
            seed=self.seed,
            num_replicas=num_replicas,
            rank=rank,
        )

    def _loader(self, split: str, train: bool) -> DataLoader:
        dataset = self.dataset(split)
        trainer = self.trainer
        replicas = {
            "num_replicas": trainer.world_size if trainer else 1,
            "rank": trainer.global_rank if trainer else 0,
        }
        if not train:
            sampler = self.eval_batches(split, **replicas)
        else:
            sampler = LengthGroupedBatchSampler(
                # Without length grouping every example counts as equally long: random batches.
                dataset.lengths if self.group_by_length else [0] * len(dataset),
                batch_size=self.batch_size,
                shuffle=True,
                drop_last=self.drop_last,
                seed=self.seed,
                **replicas,
            )
            if self._continue_at is not None:  # before Lightning draws the first batches
                sampler.continue_at(*self._continue_at)
                self._continue_at = None
            self.train_sampler = sampler
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def state_dict(self) -> dict[str, int]:
        """Where training is in the batch order: the epoch to train next and how many of its
        batches are done (saved in checkpoints, so a run stopped mid-epoch continues there)."""
        sampler, trainer = self.train_sampler, self.trainer
        if sampler is None or trainer is None:
            return {}
        if sampler.position >= trainer.num_training_batches:  # the epoch is done
            return {"epoch": sampler.epoch + 1, "position": 0}
        return {"epoch": sampler.epoch, "position": sampler.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        # Lightning restores the data module before it asks for the training loader, and makes
        # that epoch's first iterator before it sets the sampler's epoch: the sampler must start
        # from here when it is created.
        if state:
            self._continue_at = (int(state["epoch"]), int(state["position"]))

    def on_before_batch_transfer(self, batch: dict, dataloader_idx: int) -> dict:
        """Count a training batch as it goes to training (after Lightning's prefetching), so the
        sampler's position says how many batches a checkpoint written now has trained."""
        if self.trainer is not None and self.trainer.training and self.train_sampler is not None:
            self.train_sampler.position += 1
        return batch

    def val_dataloader(self) -> list[DataLoader]:
        return [self._loader(split, train=False) for split in self.task.eval_splits]

    def predict_dataloader(self) -> DataLoader:
        # A plain loader: Lightning re-wraps the sampler of prediction loaders to track indices.
        return DataLoader(
            self.dataset(self.task.test_split),
            batch_size=self.eval_batch_size,
            collate_fn=self.collate,
            num_workers=self.num_workers,
        )
