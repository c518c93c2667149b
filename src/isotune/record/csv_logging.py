"""``csv/metrics.csv`` that spans every attempt of a run, written whole at every save.

Lightning's CSVLogger deletes metrics.csv when a run starts in a folder that already has one, so a
run resumed in its own folder would lose the metrics of its earlier attempts; it also appends to
the file in place and rewrites it in place when a new column appears, so a kill or a full disk
there loses every earlier row. This logger keeps the earlier attempts' rows and writes the whole
file (and ``hparams.yaml``) atomically (:mod:`isotune.atomic_files`) at each save.
:meth:`RunCSVLogger.drop_rows_after` removes the rows an earlier attempt logged after the
checkpoint the run continues from (those steps are trained again), or all of them when the run
starts again from the beginning, so every step appears once.
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

from isotune.atomic_files import write_text


class _KeepingWriter(ExperimentWriter):
    """Keeps the rows already in metrics.csv and rewrites the file whole at each save."""

    def _check_log_dir_exists(self) -> None:
        self.rows: list[dict[str, str]] = []
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as file:
                reader = csv.DictReader(file)
                self.metrics_keys = sorted(reader.fieldnames or [])
                self.rows = list(reader)

    def save(self) -> None:
        """Write the earlier rows and the new ones; on an error the new ones stay pending."""
        if not self.metrics:
            return
        self._record_new_keys()
        rows = [*self.rows, *self.metrics]
        self.write(rows)
        self.rows, self.metrics = rows, []

    def log_hparams(self, params: dict[str, Any]) -> None:
        """``hparams.yaml`` beside metrics.csv, written atomically too (plain values only)."""
        self.hparams.update(params)
        text = yaml.safe_dump(self.hparams, sort_keys=False, allow_unicode=True)
        write_text(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), text)

    def write(self, rows: list[dict]) -> None:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.metrics_keys)
        writer.writeheader()
        writer.writerows(rows)
        write_text(self.metrics_file_path, text.getvalue())


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
        if not isinstance(writer, _KeepingWriter) or not writer.rows:  # not rank 0; no rows
            return
        kept = [row for row in writer.rows if step is not None and not _redone(row, step)]
        writer.write(kept)
        writer.rows = kept


def _redone(row: dict[str, str], step: int) -> bool:
    logged_at = float(row.get("step") or 0)
    return logged_at >= step if row.get("epoch") else logged_at > step
