"""The task table: what each task reads, predicts and is scored by.

The table lives in ``conf/task/*.yaml`` so that every run's saved config says which columns,
labels and metrics it used; :class:`TaskSpec` validates one entry (one of one's own files,
:mod:`isotune.data.own_data`, is completed before). Each kind of task is a subclass answering
what differs between kinds (:class:`GlueTask`, :class:`OwnFilesTask`, :class:`HubDatasetTask`,
chosen by :func:`task_kind`); the config's ``source`` is read here only, so a new kind is one
subclass here (``docs/extending.md``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar

from isotune.data.metrics import METRICS
from isotune.errors import IsotuneError
from isotune.norms.values import finite_number, integer

SOURCES = ("glue", "files")  # GLUE's official files (or its Hub copy); files named by path


def task_kind(config: Mapping) -> type[TaskSpec]:
    """The kind of task ``config`` describes (a whole task, or a ``task=files`` one before its
    files complete it): by its ``source``, and for ``task=files`` by whether it names a Hugging
    Face data set (``dataset``) in place of files."""
    source = config.get("source", "glue")
    if source not in SOURCES:
        raise IsotuneError(
            f"Task {config.get('name')}: source={source!r} is not one of {list(SOURCES)}. Fix: "
            "glue for a GLUE task (conf/task/<name>.yaml), files for task=files."
        )
    if source == "glue":
        return GlueTask
    return HubDatasetTask if config.get("dataset") else OwnFilesTask


@dataclass(frozen=True, kw_only=True)
class TaskSpec(ABC):
    """One task, as configured in ``conf/task/<name>.yaml`` (``task=files``: as completed from
    its files by :func:`isotune.data.own_data.own_task`); built by :meth:`from_config` as the
    subclass of its kind, which answers the questions whose answers differ by kind."""

    # completed from its own data before a run (task=files: isotune.data.own_data.own_task), and
    # read by isotune.data.own_data; else GLUE's files, read by isotune.data.reading
    own_data: ClassVar[bool]
    # its splits are files of its own, named by path (a file to predict is read as they are)
    reads_own_files: ClassVar[bool]
    # its test predictions are GLUE's submission files (isotune.data.glue_format), labelled as
    # GLUE's server reads them; else one file of its own, in its data's label names
    scored_by_glue_server: ClassVar[bool]

    name: str
    source: str = "glue"
    glue_dir: str | None = None  # GLUE: the folder under GLUE_DIR
    hub_config: str | None = None  # GLUE: the config of nyu-mll/glue
    text_fields: tuple[str, ...]
    labels: (
        tuple[str, ...] | None
    )  # label strings of the TSV files in class-id order; None: regression
    num_labels: int
    metrics: tuple[str, ...]
    primary_metric: str
    eval_splits: tuple[str, ...]
    test_split: str
    # GLUE: each split's file name under <GLUE_DIR>/<glue_dir>; files: each split's path
    files: Mapping[str, str | None] = field(default_factory=dict)
    label_column: str = "label"  # files: the column holding the label (or score)
    dataset: str | None = None  # files: a Hugging Face data set by name, read in place of files
    dataset_config: str | None = None  # its config (SuperGLUE's boolq)
    regression: bool | None = None  # files: null decides from the train file's labels
    # files: labels that differ only in case or surrounding whitespace are distinct classes
    # (else refused: own_data._one_spelling_each)
    distinct_label_spellings: bool = False
    id_column: str | None = None  # files: the test file's ids; null: first of id, idx, index
    keeps_ids: bool = False  # files: predictions keep its ids (false: a checkpoint from before)
    tsv_header: bool = True
    columns: Mapping[str, int] = field(default_factory=dict)
    test_columns: Mapping[str, int] = field(default_factory=dict)
    # regression only: (low, high), the scores a data set may hold (STS-B: [0, 5]); None: any
    label_range: tuple[float, float] | None = None

    @classmethod
    def from_config(cls, config: Mapping) -> TaskSpec:
        """Build and check a spec from a task config (a dict or an OmegaConf node), as the
        subclass of its kind (:func:`task_kind`)."""
        known = {f.name for f in fields(cls)}
        unknown = set(config) - known
        if unknown:
            raise IsotuneError(
                f"Task config has unknown keys {sorted(unknown)}; known: {sorted(known)}."
            )
        values = dict(config)
        kind = task_kind(values)
        if kind.own_data and values.get("num_labels") is None:
            raise IsotuneError(
                f"Task {values.get('name')} (task=files) has no labels, metrics or text columns "
                "of its own yet: they are read from its files. Fix: complete it with "
                "isotune.data.own_data.own_task(config) first (a run does it before it starts)."
            )
        for key in ("text_fields", "metrics", "eval_splits"):
            values[key] = tuple(values[key])
        if values.get("labels") is not None:
            values["labels"] = tuple(str(label) for label in values["labels"])
        bounds = values.get("label_range")
        if isinstance(bounds, Sequence) and not isinstance(bounds, str):
            values["label_range"] = tuple(bounds)  # anything else stays as given: _check says
        for key in ("files", "columns", "test_columns"):
            values[key] = dict(values.get(key) or {})
        spec = kind(**values)
        spec._check()
        return spec

    @property
    @abstractmethod
    def has_test_split(self) -> bool:
        """Whether the task names a test split to predict (GLUE's test files, a ``task=files``
        task's ``data.test_file`` or its data set's test split)."""

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
        if self.label_range is not None:
            self._check_label_range()

    def _check_label_range(self) -> None:
        bounds = self.label_range
        shown = list(bounds) if isinstance(bounds, tuple) else bounds  # as written in YAML
        if not self.is_regression:
            raise IsotuneError(
                f"Task {self.name}: label_range={shown!r} bounds regression scores, but "
                f"{self.name} has class labels {list(self.labels)}. Fix: remove label_range from "
                f"conf/task/{self.name}.yaml."
            )
        pair = isinstance(bounds, tuple) and len(bounds) == 2 and all(map(finite_number, bounds))
        if not pair or bounds[0] >= bounds[1]:
            raise IsotuneError(
                f"Task {self.name}: label_range={shown!r} must be two finite numbers, low < high "
                f"(STS-B: [0, 5]). Fix: set it in conf/task/{self.name}.yaml or with "
                "'task.label_range=[low,high]', or null to accept any finite score."
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
                score = float(value)
            except ValueError:
                raise IsotuneError(
                    f"{where}: label {value!r} is not a number, but task {self.name} is a "
                    "regression task. Check the file's columns against conf/task."
                ) from None
            return self.check_label(score, where)
        try:
            return self.labels.index(value)
        except ValueError:
            raise IsotuneError(
                f"{where}: label {value!r} is not a label of task {self.name}; expected one of "
                f"{list(self.labels)}. Check that the file belongs to {self.name} and that "
                f"`columns` in conf/task/{self.name}.yaml match it."
            ) from None

    def check_label(self, label: int | float, where: str) -> int | float:
        """``label``, read from ``where``, if it is a target this task can train on: a class id,
        or a finite score within ``label_range``. Checked as the data is read, because a bad
        label otherwise trains unnoticed (a score of 7.5) or surfaces steps later as a NaN loss
        that blames the learning rate (a score of nan)."""
        if not self.is_regression:
            if integer(label) and 0 <= label < self.num_labels:
                return label
            raise IsotuneError(
                f"{where}: label {label!r} is not a class id of task {self.name}; expected 0 to "
                f"{self.num_labels - 1} ({', '.join(self.labels)}). Check that the data belong to "
                f"{self.name}; only a test split may hold -1 (no label)."
            )
        if not finite_number(label):
            raise IsotuneError(
                f"{where}: score {label!r} is not a finite number, so the training loss of task "
                f"{self.name} would become {label!r} too. Fix: correct or remove the row."
            )
        if self.label_range is None:
            return label
        low, high = self.label_range
        if not low <= label <= high:
            raise IsotuneError(
                f"{where}: score {label!r} is outside [{low:g}, {high:g}], the range of task "
                f"{self.name}'s scores (label_range in conf/task/{self.name}.yaml). Fix: correct "
                "or remove the row; for data on another scale, set 'task.label_range=[low,high]'."
            )
        return label

    def decode_label(self, class_id: int | float) -> str:
        """A prediction as the data names it: its label string, or its score with three
        decimals (a ``task=files`` task's test predictions; GLUE's:
        :mod:`isotune.data.glue_format`)."""
        if self.is_regression:
            return f"{float(class_id):.3f}"
        return self.labels[int(class_id)]


@dataclass(frozen=True, kw_only=True)
class GlueTask(TaskSpec):
    """A task of GLUE's (``conf/task/<name>.yaml``): its official TSVs under ``GLUE_DIR``, or
    ``nyu-mll/glue`` on the Hub; its test predictions are for GLUE's server."""

    own_data: ClassVar[bool] = False
    reads_own_files: ClassVar[bool] = False
    scored_by_glue_server: ClassVar[bool] = True

    @property
    def has_test_split(self) -> bool:
        return True  # every GLUE task has a test set (the server scores it)


@dataclass(frozen=True, kw_only=True)
class OwnFilesTask(TaskSpec):
    """``task=files`` with files of one's own (``data.train_file=...``): a test split only where
    ``data.test_file`` names one."""

    own_data: ClassVar[bool] = True
    reads_own_files: ClassVar[bool] = True
    scored_by_glue_server: ClassVar[bool] = False

    @property
    def has_test_split(self) -> bool:
        return bool(self.files.get(self.test_split))


@dataclass(frozen=True, kw_only=True)
class HubDatasetTask(TaskSpec):
    """``task=files`` with a Hugging Face data set by name (``data.dataset_name=...``) in place
    of files: its splits are the data set's, the test split included."""

    own_data: ClassVar[bool] = True
    reads_own_files: ClassVar[bool] = False
    scored_by_glue_server: ClassVar[bool] = False

    @property
    def has_test_split(self) -> bool:
        return True  # the data set's test split, read when predicted
