"""Reading a task's split (GLUE's official TSVs under ``GLUE_DIR``, the Hugging Face Hub, or a
``task=files`` task's own files) as ``{text fields..., "label", "idx"}`` examples, every label
checked against the task; and the checks that a continued run reads the files it read before and
that a search's GLUE tasks can be read offline."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from isotune.data.hub import load_hub_split, offline_settings
from isotune.data.own_data import read_own_split
from isotune.data.tables import delimited_rows
from isotune.data.tasks import TaskSpec, task_kind
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256

HUB_DATASET = "nyu-mll/glue"
Example = dict[str, object]


def read_glue_tsv(path: Path, task: TaskSpec, split: str) -> list[Example]:
    """Rows of an official GLUE TSV as examples; a test file's ``label`` is -1 as on the Hub, the
    other splits' labels checked here, where file and line are still known."""
    is_test = split == task.test_split
    columns = task.test_columns if is_test else task.columns
    examples = []
    rows = delimited_rows(path, "\t")
    if is_test or task.tsv_header:
        next(rows, None)  # the header row
    for line, row in rows:
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
        example["idx"] = _test_index(row[columns["idx"]], where) if is_test else len(examples)
        examples.append(example)
    if not examples:
        header = "a header row, then " if is_test or task.tsv_header else "no header row: "
        raise IsotuneError(
            f"{path} has no examples (the {split} split of task {task.name}). Fix: use the "
            f"official GLUE file, which has {header}one tab-separated example per line, with "
            f"columns (counted from 0) {dict(columns)} as conf/task/{task.name}.yaml reads them."
        )
    return examples


def _test_index(value: str, where: str) -> int:
    """A test example's ``idx``: the leaderboard's predictions file names each example by it."""
    try:
        return int(value)
    except ValueError:
        raise IsotuneError(
            f"{where}: index {value[:40]!r} is not an integer (the test file's idx column, which "
            "the predictions file names each example by). Is this the official GLUE test file?"
        ) from None


def split_file(task: TaskSpec, split: str, glue_dir: str | Path | None) -> Path | None:
    """The file of one split of ``task`` (which the run reads, and records): a ``task=files``
    task's own, a GLUE task's under ``glue_dir``; None for a split read from the Hub."""
    if task.own_data:
        return Path(task.files[split]) if task.files.get(split) else None  # None: the Hub's
    if glue_dir is None:
        return None
    return Path(glue_dir).expanduser() / task.glue_dir / task.files[split]


def changed_splits(
    recorded: Mapping[str, Mapping[str, str]], task: TaskSpec, glue_dir: str | Path | None
) -> list[tuple[str, Path, str, str]]:
    """``(split, path, sha256 then, sha256 now)`` of each split file of ``task`` that reads
    otherwise now than a run's provenance ``data`` recorded it (Hub splits not compared)."""
    changed = []
    for split, identity in recorded.items():
        path = split_file(task, split, glue_dir) if split in task.files else None
        if path is None or "sha256" not in identity or not path.is_file():
            continue
        now = file_sha256(path)
        if now != identity["sha256"]:
            changed.append((split, path, identity["sha256"], now))
    return changed


def check_data_unchanged(
    recorded: Mapping[str, Mapping[str, str]],
    task: TaskSpec,
    glue_dir: str | Path | None,
    ckpt: Path,
) -> None:
    """Refuse to continue from ``ckpt`` when a split file it was trained on reads otherwise now:
    the continued run would have learned from two data sets under one name."""
    changed = changed_splits(recorded, task, glue_dir)
    if changed:
        split, path, then, now = changed[0]
        raise IsotuneError(
            f"{path} (the {split} split) changed since the run of {ckpt} read it: its "
            f"sha256 was {then}, it is {now} now. Continuing would train one "
            "run on two data sets. Fix: restore the file as that run read it, or train "
            "afresh on the new file in a new folder (without ckpt_path; in the run's own "
            "folder, resume=never)."
        )


def load_split(task: TaskSpec, split: str, glue_dir: str | Path | None) -> list[Example]:
    """One split of ``task``: its own file (``task=files``); a GLUE task's from
    ``<glue_dir>/<TASK>/<file>`` if given, else from the Hub."""
    if task.own_data:
        return read_own_split(task, split)
    if glue_dir is not None:
        path = split_file(task, split, glue_dir)
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


class TaskSplits:
    """The examples of a task's splits, each read once, when first asked for; those read already
    (:class:`~isotune.data.own_data.OwnData`) are handed on here, not read again."""

    def __init__(
        self,
        task: TaskSpec,
        glue_dir: str | Path | None,
        read: Mapping[str, Sequence[Example]] | None = None,
    ) -> None:
        self.task = task
        self.glue_dir = glue_dir
        self._examples = {split: list(examples) for split, examples in (read or {}).items()}

    def __getitem__(self, split: str) -> list[Example]:
        if split not in self._examples:
            self._examples[split] = load_split(self.task, split, self.glue_dir)
        return self._examples[split]


def _load_split_from_hub(task: TaskSpec, split: str) -> list[Example]:
    """One split of ``task`` from the Hub, its labels checked as a TSV's (by row number)."""
    source = f"{HUB_DATASET}/{task.hub_config} ({split})"
    rows = load_hub_split(
        HUB_DATASET,
        task.hub_config,
        split,
        fix="set GLUE_DIR to a folder with the official GLUE files "
        f"(<GLUE_DIR>/{task.glue_dir}/{task.files[split]})",
    )
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


def check_task_offline(
    task: str, config: Mapping[str, Any] | None, glue_dir: str | Path | None
) -> None:
    """Refuse a task without a config (``config`` None) or whose files cannot be read offline,
    before a search or study launches its jobs (a ``task=files`` task's are checked by its runs)."""
    if config is None:
        raise IsotuneError(
            f"Task {task!r} has no conf/task/{task}.yaml. Fix: one of the tasks in conf/task/, "
            "e.g. task=rte,mrpc."
        )
    if task_kind(config).own_data:
        return
    if glue_dir is None:
        offline = offline_settings()
        if offline:
            raise IsotuneError(
                f"Task {task} cannot be read offline: GLUE_DIR is not set, and "
                f"{'='.join((offline[0], os.environ[offline[0]]))} keeps the Hub away. Fix: "
                "export GLUE_DIR=<a folder in the official GLUE layout>, e.g. "
                "GLUE_DIR=../shared/data/glue."
            )
        return
    # What a study's runs read: the training split and the task's own dev splits (mnli's are
    # validation_matched and validation_mismatched), no test predictions.
    files = [
        Path(glue_dir) / str(config["glue_dir"]) / str(config["files"][split])
        for split in ("train", *config["eval_splits"])
    ]
    missing = [path for path in files if not path.is_file()]
    if missing:
        raise IsotuneError(
            f"Task {task} is not available offline: {', '.join(map(str, missing))} missing "
            f"under GLUE_DIR={glue_dir}. Fix: put the official GLUE files of {task} there "
            f"({', '.join(path.name for path in files)} in <GLUE_DIR>/{config['glue_dir']}/), or "
            f"leave {task} out of task=."
        )
