"""``csv/metrics.csv`` that spans every attempt of a run.

Lightning's CSVLogger deletes metrics.csv when a run starts in a folder that already has one, so a
run resumed in its own folder would lose the metrics of its earlier attempts. This logger keeps
them; :meth:`RunCSVLogger.drop_rows_after` removes the rows an interrupted attempt logged after
the checkpoint the run resumes from (those steps are trained again), so every step appears once.
"""

from __future__ import annotations

import csv
import os

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment


class _KeepingWriter(ExperimentWriter):
    """Appends to an existing metrics.csv under its header instead of deleting it."""

    def _check_log_dir_exists(self) -> None:
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as file:
                self.metrics_keys = sorted(next(csv.reader(file), []))


class RunCSVLogger(CSVLogger):
    """Lightning's CSVLogger, keeping the rows of the run's earlier attempts (module docstring)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _KeepingWriter(log_dir=self.log_dir)
        return self._experiment

    def drop_rows_after(self, step: int) -> None:
        """Remove the rows an interrupted attempt logged after the checkpoint at ``step``: rows
        of training epochs (they carry ``epoch``) from ``step`` on, which are trained again, and
        the isotropy rows (no ``epoch``; logged at the step that ends their epoch) after it."""
        path = os.path.join(self.log_dir, ExperimentWriter.NAME_METRICS_FILE)
        if not os.path.isfile(path):
            return
        with open(path, newline="") as file:
            reader = csv.DictReader(file)
            header = list(reader.fieldnames or [])
            rows = [row for row in reader if not _redone(row, step)]
        with open(path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)


def _redone(row: dict[str, str], step: int) -> bool:
    logged_at = float(row.get("step") or 0)
    return logged_at >= step if row.get("epoch") else logged_at > step
