"""GLUE data: read a task's split (official TSVs under ``GLUE_DIR`` or the Hub), tokenize, batch.

Batches are padded only to their own longest example, and training batches are drawn from groups
of similar length, so little compute goes to padding; the order is still random every epoch.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, Sampler
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from isotune.errors import IsotuneError
from isotune.tasks import TaskSpec

log = logging.getLogger(__name__)

HUB_DATASET = "nyu-mll/glue"
Example = dict[str, object]


def read_glue_tsv(path: Path, task: TaskSpec, split: str) -> list[Example]:
    """Rows of an official GLUE TSV as ``{text fields..., "label", "idx"}`` dicts.

    Test files carry no labels; their ``label`` is -1 as on the Hub.
    """
    is_test = split == task.test_split
    columns = task.test_columns if is_test else task.columns
    examples = []
    for line, row in _tsv_rows(path, has_header=is_test or task.tsv_header):
        where = f"{path}, line {line}"
        try:
            example = {name: row[columns[name]] for name in task.text_fields}
            label = row[columns["label"]] if not is_test else None
        except IndexError:
            raise IsotuneError(
                f"{where}: {len(row)} columns, but conf/task/{task.name}.yaml reads columns "
                f"{dict(columns)}. Is this the official GLUE file for {task.name}?"
            ) from None
        example["label"] = -1 if label is None else task.encode_label(label, where)
        example["idx"] = int(row[columns["idx"]]) if is_test else len(examples)
        examples.append(example)
    return examples


def _tsv_rows(path: Path, has_header: bool) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of each non-empty data row of a TSV.

    Read with no quoting (SST-2 and MRPC contain bare quote characters) and ``utf-8-sig`` (MRPC
    starts with a byte-order mark). A byte that is not UTF-8 is reported with its file and line:
    the decoder's own error knows only its offset in one buffered chunk of the file.
    """
    try:
        with path.open(encoding="utf-8-sig", newline="") as file:
            rows = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
            if has_header:
                next(rows, None)
            for line, row in enumerate(rows, start=2 if has_header else 1):
                if row:
                    yield line, row
    except UnicodeDecodeError:
        raw = path.read_bytes()
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as error:
            line = raw.count(b"\n", 0, error.start) + 1
            raise IsotuneError(
                f"{path}, line {line}: byte {raw[error.start : error.end]!r} is not UTF-8 text "
                "(the file was probably saved in another encoding, such as Latin-1 or "
                "Windows-1252). Fix: re-save the file as UTF-8; the official GLUE files are UTF-8."
            ) from None
        raise  # decodes as a whole now: the file changed while it was read


def load_split(task: TaskSpec, split: str, glue_dir: str | Path | None) -> list[Example]:
    """One split of ``task``: from ``<glue_dir>/<TASK>/<file>`` if given, else from the Hub."""
    if glue_dir is not None:
        path = Path(glue_dir).expanduser() / task.glue_dir / task.files[split]
        if not path.is_file():
            raise IsotuneError(
                f"GLUE_DIR={glue_dir} has no {task.glue_dir}/{task.files[split]} (needed for the "
                f"{split} split of task {task.name}). Fix: point GLUE_DIR (or paths.glue_dir) at a "
                "folder in the layout of the official GLUE download script "
                f"(<GLUE_DIR>/{task.glue_dir}/{{train,dev,test}}.tsv), or unset it to load "
                f"{HUB_DATASET} from the Hugging Face Hub."
            )
        return read_glue_tsv(path, task, split)
    return _load_split_from_hub(task, split)


def _load_split_from_hub(task: TaskSpec, split: str) -> list[Example]:
    import datasets  # heavy import, only needed without GLUE_DIR

    try:
        rows = datasets.load_dataset(HUB_DATASET, task.hub_config, split=split)
    except Exception as error:
        raise IsotuneError(
            f"Could not load {HUB_DATASET}/{task.hub_config} ({split}) from the Hugging Face Hub: "
            f"{type(error).__name__}: {error}. Fix: set GLUE_DIR to a folder with the official "
            f"GLUE files (<GLUE_DIR>/{task.glue_dir}/{task.files[split]}), or run with network "
            "access once to cache the data set."
        ) from error
    return [dict(row) for row in rows]  # text fields, "label" (-1 on test) and "idx", as in TSVs


def check_max_length(max_length: int, task: TaskSpec, tokenizer: PreTrainedTokenizerBase) -> None:
    """Reject a ``data.max_length`` that tokenization cannot honour, before any data is read.

    Too short for the special tokens, transformers only logs a warning and leaves the inputs
    untruncated (or keeps nothing but special tokens); longer than the model's position
    embeddings, the model fails later with an index error.
    """
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

    def __getitem__(self, index: int) -> dict:
        return self.features[index]


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Batches of examples of similar length, in a random order that changes every epoch.

    With ``shuffle``, examples are shuffled, cut into windows of ``window_batches`` batches, sorted
    by length inside each window, batched, and the batches shuffled (as Hugging Face's
    ``group_by_length``); without it, the whole split is sorted by length (fastest evaluation).
    Batches are dealt round-robin to ``num_replicas`` processes under DDP.
    """

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

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning each epoch: a new, reproducible order (also after resuming)."""
        self.epoch = epoch

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
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


class GLUEDataModule(L.LightningDataModule):
    """Train, dev and test loaders for one GLUE task, with dynamic padding."""

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
    ):
        super().__init__()
        check_max_length(max_length, task, tokenizer)
        self.task = task
        self.tokenizer = tokenizer
        self.glue_dir = glue_dir
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.drop_last = drop_last
        self.group_by_length = group_by_length
        self.num_workers = num_workers
        self.seed = seed
        self.collate = DataCollatorWithPadding(tokenizer)
        self.datasets: dict[str, TokenizedDataset] = {}

    def dataset(self, split: str) -> TokenizedDataset:
        """The tokenized split, loaded on first use."""
        if split not in self.datasets:
            examples = load_split(self.task, split, self.glue_dir)
            if not examples:
                raise IsotuneError(f"The {split} split of task {self.task.name} is empty.")
            self.datasets[split] = TokenizedDataset(
                examples, self.task, self.tokenizer, self.max_length
            )
            log.info("%s %s: %d examples", self.task.name, split, len(examples))
        return self.datasets[split]

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit"):
            self.dataset("train")
        if stage in (None, "fit", "validate"):
            for split in self.task.eval_splits:
                self.dataset(split)

    def _loader(self, split: str, train: bool) -> DataLoader:
        dataset = self.dataset(split)
        trainer = self.trainer
        sampler = LengthGroupedBatchSampler(
            # Without length grouping every example counts as equally long: plain random batches.
            dataset.lengths if self.group_by_length or not train else [0] * len(dataset),
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            drop_last=self.drop_last and train,
            seed=self.seed,
            num_replicas=trainer.world_size if trainer else 1,
            rank=trainer.global_rank if trainer else 0,
        )
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

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
