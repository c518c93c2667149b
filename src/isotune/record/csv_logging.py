"""``csv/metrics.csv`` that spans every attempt of a run, appended to at every save.

Lightning's CSVLogger deletes metrics.csv when a run starts in a folder that has one (a resumed
run would lose its earlier attempts) and rewrites it in place when a column appears (a kill there
loses every row). Here a save appends its rows whole or not at all
(:func:`~isotune.atomic_files.append_bytes`), costing the same at any length; only a new column
rewrites the file, atomically, as does :meth:`RunCSVLogger.drop_rows_after`, which removes the
rows logged after the checkpoint a run continues from, so every step appears once.
``hparams.yaml`` is written atomically too.
"""

from __future__ import annotations

import csv
import io
import os
from typing import Any

import yaml
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from isotune.atomic_files import append_bytes, complete_lines, write_text


class _KeepingWriter(ExperimentWriter):
    """Keeps the rows already in metrics.csv, appends new ones and rewrites the file whole only
    when its header changes."""

    def _check_log_dir_exists(self) -> None:
        """Read the header of an earlier attempt's file; one a kill cut mid-row is written again
        without that row, so that the next rows start on a line of their own."""
        self.metrics_keys: list[str] = []
        if not os.path.isfile(self.metrics_file_path):
            return
        with open(self.metrics_file_path, newline="") as file:
            self.metrics_keys = sorted(csv.DictReader(file).fieldnames or [])
        with open(self.metrics_file_path, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - 1))
            cut_short = file.read(1) not in (b"", b"\n")
        if cut_short:
            self.write(self.read_rows())

    def save(self) -> None:
        """Append the new rows (on an error they stay pending, the file as it was)."""
        if not self.metrics:
            return
        keys = sorted(set(self.metrics_keys).union(*self.metrics))
        if keys != self.metrics_keys or not os.path.isfile(self.metrics_file_path):
            self.write([*self.read_rows(), *self.metrics], keys)
        else:
            append_bytes(self.metrics_file_path, _csv(self.metrics, keys, header=False))
        self.metrics_keys, self.metrics = keys, []

    def log_hparams(self, params: dict[str, Any]) -> None:
        """``hparams.yaml`` beside metrics.csv, written atomically too (plain values only)."""
        self.hparams.update(params)
        text = yaml.safe_dump(self.hparams, sort_keys=False, allow_unicode=True)
        write_text(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), text)

    def read_rows(self) -> list[dict[str, str]]:
        """The rows in metrics.csv; a last line a kill cut short is not one."""
        if not os.path.isfile(self.metrics_file_path):
            return []
        with open(self.metrics_file_path, "rb") as file:
            text = complete_lines(file.read()).decode("utf-8")
        return list(csv.DictReader(io.StringIO(text, newline="")))

    def write(self, rows: list[dict], keys: list[str] | None = None) -> None:
        """The whole file, with a header of ``keys`` (default: every key so far), atomically."""
        text = _csv(rows, keys or self.metrics_keys, header=True)
        write_text(self.metrics_file_path, text.decode("utf-8"))


def _csv(rows: list[dict], keys: list[str], header: bool) -> bytes:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=keys)
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return text.getvalue().encode("utf-8")


class RunCSVLogger(CSVLogger):
    """Lightning's CSVLogger, keeping the rows of the run's earlier attempts (module docstring)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _KeepingWriter(log_dir=self.log_dir)
        return self._experiment

    def drop_rows_after(self, step: int | None) -> None:
        """Remove the rows an earlier attempt logged after the checkpoint at ``step``: rows of
        training epochs (they carry ``epoch``) from ``step`` on, which are trained again, and
        the isotropy rows (no ``epoch``; logged at the step that ends their epoch) after it.
        ``None``: the run starts again from the beginning, and every earlier row goes."""
        writer = self.experiment
        if not isinstance(writer, _KeepingWriter):  # not rank 0
            return
        rows = writer.read_rows()
        if rows:
            writer.write([row for row in rows if step is not None and not _redone(row, step)])


def _redone(row: dict[str, str], step: int) -> bool:
    logged_at = float(row.get("step") or 0)
    return logged_at >= step if row.get("epoch") else logged_at > step
