"""A split tokenized once and kept in memory, and the check that ``data.max_length`` can be
honoured by the tokenizer before anything is read."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from isotune.data.reading import Example
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError


def check_max_length(max_length: int, task: TaskSpec, tokenizer: PreTrainedTokenizerBase) -> None:
    """Reject a ``data.max_length`` that tokenization cannot honour, before any data is read: too
    short for the special tokens, transformers only warns and leaves the inputs untruncated; longer
    than the position embeddings, the model fails later with an index error."""
    pair = len(task.text_fields) == 2
    special = tokenizer.num_special_tokens_to_add(pair=pair)
    shortest = special + len(task.text_fields)
    if max_length < shortest:
        raise IsotuneError(
            f"data.max_length={max_length} is too short for task {task.name}: the tokenizer adds "
            f"{special} special tokens to each {'sentence pair' if pair else 'sentence'}, so "
            f"keeping one token of each text takes at least {shortest} (below that, transformers "
            "skips truncation or keeps only the special tokens). Fix: data.max_length=128 (the "
            f"default) or another value >= {shortest}."
        )
    longest = tokenizer.model_max_length  # VERY_LARGE_INTEGER when the tokenizer does not know
    if longest < VERY_LARGE_INTEGER and max_length > longest:
        raise IsotuneError(
            f"data.max_length={max_length} is longer than the {longest} tokens that "
            f"{tokenizer.name_or_path} accepts (the model has no position embeddings beyond). "
            f"Fix: data.max_length={longest} or less."
        )


class TokenizedDataset(torch.utils.data.Dataset):
    """Tokenized examples, each ``{"input_ids", ..., "labels", "idx"}``, kept in memory."""

    def __init__(
        self,
        examples: Sequence[Example],
        task: TaskSpec,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int,
    ):
        texts = [[example[name] for example in examples] for name in task.text_fields]
        encoded = tokenizer(*texts, truncation=True, max_length=max_length)
        self.features = [
            {
                **{key: values[i] for key, values in encoded.items()},
                "labels": ex["label"],
                "idx": ex["idx"],
            }
            for i, ex in enumerate(examples)
        ]
        self.lengths = [len(feature["input_ids"]) for feature in self.features]

    def __len__(self) -> int:
        return len(self.features)

    @property
    def labels(self) -> list[int | float]:
        """Every example's label (-1: a test split's, none), for the trivial predictor."""
        return [feature["labels"] for feature in self.features]

    def __getitem__(self, index: int) -> dict:
        return self.features[index]
