"""The GLUE task table: what each task reads, predicts and is scored by.

The table itself lives in ``conf/task/*.yaml`` so that every run's saved config says exactly which
columns, labels and metrics it used; :class:`TaskSpec` validates one entry and answers questions
about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from isotune.errors import IsotuneError
from isotune.metrics import METRICS


@dataclass(frozen=True)
class TaskSpec:
    """One GLUE task, as configured in ``conf/task/<name>.yaml``."""

    name: str
    glue_dir: str
    hub_config: str
    text_fields: tuple[str, ...]
    labels: (
        tuple[str, ...] | None
    )  # label strings of the TSV files in class-id order; None: regression
    num_labels: int
    metrics: tuple[str, ...]
    primary_metric: str
    eval_splits: tuple[str, ...]
    test_split: str
    files: Mapping[str, str] = field(default_factory=dict)
    tsv_header: bool = True
    columns: Mapping[str, int] = field(default_factory=dict)
    test_columns: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Mapping) -> TaskSpec:
        """Build and check a spec from a task config (a dict or an OmegaConf node)."""
        known = {f.name for f in fields(cls)}
        unknown = set(config) - known
        if unknown:
            raise IsotuneError(
                f"Task config has unknown keys {sorted(unknown)}; known: {sorted(known)}."
            )
        values = dict(config)
        for key in ("text_fields", "metrics", "eval_splits"):
            values[key] = tuple(values[key])
        if values.get("labels") is not None:
            values["labels"] = tuple(str(label) for label in values["labels"])
        for key in ("files", "columns", "test_columns"):
            values[key] = dict(values.get(key) or {})
        spec = cls(**values)
        spec._check()
        return spec

    def _check(self) -> None:
        expected_labels = 1 if self.labels is None else len(self.labels)
        if self.num_labels != expected_labels:
            raise IsotuneError(
                f"Task {self.name}: num_labels={self.num_labels} but labels={self.labels} "
                f"implies {expected_labels}; make them agree in conf/task/{self.name}.yaml."
            )
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown:
            raise IsotuneError(
                f"Task {self.name}: unknown metrics {unknown}; available: {sorted(METRICS)}."
            )
        if self.primary_metric not in self.metrics:
            raise IsotuneError(
                f"Task {self.name}: primary_metric {self.primary_metric!r} is not among its "
                f"metrics {list(self.metrics)}."
            )

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def primary_split(self) -> str:
        """The dev split that selects the best epoch (MNLI: matched)."""
        return self.eval_splits[0]

    def log_prefix(self, split: str) -> str:
        """``val`` for the primary dev split, ``val_<rest>`` for others (``val_mismatched``)."""
        if split == self.primary_split:
            return "val"
        return "val_" + split.removeprefix("validation_")

    def encode_label(self, value: str, where: str) -> int | float:
        """The class id (or regression target) of a label string read from ``where``."""
        if self.is_regression:
            try:
                return float(value)
            except ValueError:
                raise IsotuneError(
                    f"{where}: label {value!r} is not a number, but task {self.name} is a "
                    "regression task. Check the file's columns against conf/task."
                ) from None
        try:
            return self.labels.index(value)
        except ValueError:
            raise IsotuneError(
                f"{where}: label {value!r} is not a label of task {self.name}; expected one of "
                f"{list(self.labels)}. Check that the file belongs to {self.name} and that "
                f"`columns` in conf/task/{self.name}.yaml match it."
            ) from None

    def decode_label(self, class_id: int | float) -> str:
        """The label string a GLUE leaderboard submission expects for a prediction."""
        if self.is_regression:
            return f"{float(class_id):.3f}"
        return self.labels[int(class_id)]
