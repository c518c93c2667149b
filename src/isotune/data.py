"""GLUE data: read a task's split (official TSVs under ``GLUE_DIR`` or the Hub), tokenize, batch.

Batches are padded only to their own longest example, and training batches are drawn from groups
of similar length, so little compute goes to padding; the order is still random every epoch.
"""

from __future__ import annotations

import csv
import logging
import warnings
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
# Lightning warns that a checkpoint written mid-epoch resumes unreliably unless the loader is
# stateful; here the data module's state carries the batch sampler's position instead.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")
Example = dict[str, object]


def read_glue_tsv(path: Path, task: TaskSpec, split: str) -> list[Example]:
    """Rows of an official GLUE TSV as ``{text fields..., "label", "idx"}`` dicts.

    Test files carry no labels; their ``label`` is -1 as on the Hub. Labels of the other splits
    are checked here (:meth:`TaskSpec.encode_label`), where file and line are still known.
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
    if not examples:
        header = "a header row, then " if is_test or task.tsv_header else "no header row: "
        raise IsotuneError(
            f"{path} has no examples (the {split} split of task {task.name}). Fix: use the "
            f"official GLUE file, which has {header}one tab-separated example per line, with "
            f"columns (counted from 0) {dict(columns)} as conf/task/{task.name}.yaml reads them."
        )
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
    """One split of ``task`` from the Hub, its labels checked as a TSV's (by row number)."""
    import datasets  # heavy import, only needed without GLUE_DIR

    source = f"{HUB_DATASET}/{task.hub_config} ({split})"
    try:
        rows = datasets.load_dataset(HUB_DATASET, task.hub_config, split=split)
    except Exception as error:
        raise IsotuneError(
            f"Could not load {source} from the Hugging Face Hub: {type(error).__name__}: "
            f"{error}. Fix: set GLUE_DIR to a folder with the official GLUE files "
            f"(<GLUE_DIR>/{task.glue_dir}/{task.files[split]}), or run with network access once "
            "to cache the data set."
        ) from error
    examples = [dict(row) for row in rows]  # text fields, "label" (-1 on test) and "idx"
    if not examples:
        raise IsotuneError(
            f"{source} has no rows. Fix: delete its folder in the Hugging Face datasets cache "
            "(HF_DATASETS_CACHE, by default ~/.cache/huggingface/datasets) to download it again, "
            "or set GLUE_DIR to a folder with the official GLUE files "
            f"(<GLUE_DIR>/{task.glue_dir}/{task.files[split]})."
        )
    if split != task.test_split:
        for number, example in enumerate(examples):
            task.check_label(example["label"], f"row {number} of {source}")
    return examples


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
        self.train_sampler: LengthGroupedBatchSampler | None = None
        self._continue_at: tuple[int, int] | None = None  # (epoch, position) from a checkpoint

    def dataset(self, split: str) -> TokenizedDataset:
        """The tokenized split, loaded on first use."""
        if split not in self.datasets:
            examples = load_split(self.task, split, self.glue_dir)
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
        if train:
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
