"""Data files of one's own (task=files) as users write them, and the task they decide, without
Hydra: for the tests of the readers and of the task's completion."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from isotune.data.own_data import own_task
from isotune.data.tasks import TaskSpec


def write_delimited(path: Path, header: list[str], rows: list[list], delimiter: str) -> Path:
    """A CSV as a spreadsheet or pandas' to_csv writes it, fields quoted only where needed; a
    TSV as GLUE's, unquoted (its texts hold no tab)."""
    with path.open("w", encoding="utf-8", newline="") as file:
        if delimiter == "\t":
            file.writelines("\t".join(map(str, row)) + "\n" for row in [header, *rows])
        else:
            writer = csv.writer(file, delimiter=delimiter)
            writer.writerow(header)
            writer.writerows(rows)
    return path


def write_json_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_lines(path: Path, lines: list[str]) -> Path:
    """A file of ``lines`` as typed, each ending in a newline: rows no CSV writer would write."""
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def files_task(train_file: Path, dev_file: Path, **settings) -> TaskSpec:
    """The task ``task=files`` completes from ``train_file`` and ``dev_file``, ``settings``
    (task.* keys) added."""
    config = {
        "name": "files",
        "source": "files",
        "files": {"train": str(train_file), "validation": str(dev_file)},
        "eval_splits": ["validation"],
        "test_split": "test",
        **settings,
    }
    return TaskSpec.from_config(own_task(config).task)
