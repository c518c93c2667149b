"""The padded length of a batch: its longest example (the default), or the next of a few fixed
lengths (``data.pad_buckets``), so that a run meets a handful of (batch, length) shapes.

On a GPU every new input shape costs once (cuDNN's attention plans one kernel per shape, about
0.3 s each on an H200: RTE's 128 shapes took 41 s before the first epoch was warm; compiled
graphs likewise), so a few shapes pay back their extra padding there. On the CPU the padding is
the cost itself (compute grows with the padded tokens) and nothing is planned per shape: the
default keeps each batch at its own longest example (docs/performance.md measures both).
Padding is masked, so the scores do not change beyond float rounding.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from isotune.errors import IsotuneError


def check_buckets(buckets: Sequence[int], max_length: int) -> tuple[int, ...]:
    """``data.pad_buckets`` as a tuple, or one error naming the value and the fix: lengths must
    be positive integers, strictly increasing and at most ``data.max_length`` (the longest batch
    pads to ``max_length`` when it exceeds the last bucket)."""
    values = list(buckets)
    fix = (
        f"Fix: increasing lengths from 1 to data.max_length={max_length}, e.g. "
        "data.pad_buckets=[32,64,96,128] (null: each batch at its longest example)."
    )
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise IsotuneError(f"data.pad_buckets={values} is not a list of whole lengths. {fix}")
    if any(a >= b for a, b in itertools.pairwise(values)) or values[0] < 1:
        raise IsotuneError(f"data.pad_buckets={values} is not increasing from 1 on. {fix}")
    if values[-1] > max_length:
        raise IsotuneError(
            f"data.pad_buckets={values} exceeds data.max_length={max_length}: no example is "
            f"longer, so a bucket of {values[-1]} would be padding alone. {fix}"
        )
    return tuple(values)


def padded_length(longest: int, buckets: Sequence[int], max_length: int) -> int:
    """The first bucket that holds ``longest`` tokens; ``max_length`` beyond the last."""
    return next((bucket for bucket in buckets if bucket >= longest), max_length)


class BucketPadding:
    """A collate function: the tokenizer's padding (its side, its pad token, the labels' key as
    ``DataCollatorWithPadding`` makes it) to :func:`padded_length` of the batch's longest."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, buckets: Sequence[int], max_length: int
    ) -> None:
        self.tokenizer = tokenizer
        self.buckets = check_buckets(buckets, max_length)
        self.max_length = max_length

    def __call__(self, features: list[Mapping[str, Any]]) -> dict[str, Any]:
        longest = max(len(feature["input_ids"]) for feature in features)
        length = padded_length(longest, self.buckets, self.max_length)
        return DataCollatorWithPadding(self.tokenizer, padding="max_length", max_length=length)(
            features
        )


def batch_collate(
    tokenizer: PreTrainedTokenizerBase, buckets: Sequence[int] | None, max_length: int
) -> DataCollatorWithPadding | BucketPadding:
    """Each batch padded to its longest example (``buckets`` None), or to its bucket."""
    if buckets is None:
        return DataCollatorWithPadding(tokenizer)
    return BucketPadding(tokenizer, buckets, max_length)
