"""GLUE's submission format: which files the server takes, what each holds, how a prediction is
written in them (``docs/prediction.md``; the facts from XLNet's ``submit_name_mapping`` and T5's
``prepare_glue_submission.py``).

The label strings are the server's, kept apart from the task table: a task config whose labels
were changed would otherwise write a file the server scores as wrong without a word. A task of
one's own files is written in the same layout as ``<task.name>.tsv`` with its own label names
(:func:`prediction_files`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError

HEADER = "index\tprediction"
# The server's file name of each task's (matched) test predictions, in the order of its table.
FILE_NAMES = {
    "cola": "CoLA",
    "sst2": "SST-2",
    "mrpc": "MRPC",
    "stsb": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI-m",
    "qnli": "QNLI",
    "rte": "RTE",
    "wnli": "WNLI",
}
MISMATCHED, DIAGNOSTIC = "MNLI-mm", "AX"  # the other two files MNLI's model writes
ALL_FILES = (
    "CoLA",
    "SST-2",
    "MRPC",
    "STS-B",
    "QQP",
    "MNLI-m",
    "MNLI-mm",
    "QNLI",
    "RTE",
    "WNLI",
    "AX",
)
BINARY = ("0", "1")
TWO_WAY = ("entailment", "not_entailment")
THREE_WAY = ("entailment", "neutral", "contradiction")
# What the server reads in each file; None: a float score (STS-B).
LABELS = {
    "CoLA": BINARY,
    "SST-2": BINARY,
    "MRPC": BINARY,
    "QQP": BINARY,
    "WNLI": BINARY,
    "RTE": TWO_WAY,
    "QNLI": TWO_WAY,
    "MNLI-m": THREE_WAY,
    "MNLI-mm": THREE_WAY,
    "AX": THREE_WAY,
    "STS-B": None,
}
SCORE_RANGE = (0.0, 5.0)  # STS-B's scale: a regression head's score is clipped to it
DECIMALS = 3  # STS-B scores as run_glue writes them


@dataclass(frozen=True)
class SubmissionFile:
    """One file of a submission: its server name and the task as its test file is read (the
    test split names the file under ``GLUE_DIR`` and the Hub's config and split); ``examples``:
    its test examples where they were read already (a test file checked as it is read, a run's
    own test split), handed on to be predicted rather than read again."""

    name: str
    spec: TaskSpec
    examples: tuple[dict[str, Any], ...] | None = field(default=None, compare=False, repr=False)

    @property
    def file_name(self) -> str:
        return f"{self.name}.tsv"

    @property
    def test_file(self) -> str:
        """Its test file under ``GLUE_DIR``: ``MNLI/test_mismatched.tsv``."""
        return f"{self.spec.glue_dir}/{self.spec.files[self.spec.test_split]}"


def submission_files(task: TaskSpec) -> list[SubmissionFile]:
    """The files a model of ``task`` writes: its own; MNLI's also MNLI-mm and AX (the diagnostic,
    ``diagnostic/diagnostic.tsv``: index, premise, hypothesis). Raises for a task the server does
    not score."""
    if task.name not in FILE_NAMES:
        raise IsotuneError(
            f"Task {task.name!r} is not one of GLUE's, so it has no submission file (GLUE's "
            f"server takes {', '.join(ALL_FILES)}). Fix: predict with the checkpoint of a run "
            f"on one of the tasks {', '.join(FILE_NAMES)}, or add test=false to score the dev "
            "set only."
        )
    own = SubmissionFile(FILE_NAMES[task.name], task)
    if task.name != "mnli":
        return [own]
    mismatched = replace(
        task,
        test_split="test_mismatched",
        files={**task.files, "test_mismatched": "test_mismatched.tsv"},
    )
    diagnostic = replace(
        task,
        glue_dir="diagnostic",
        hub_config="ax",
        test_split="test",
        files={"test": "diagnostic.tsv"},
        test_columns={"idx": 0, "premise": 1, "hypothesis": 2},
    )
    return [own, SubmissionFile(MISMATCHED, mismatched), SubmissionFile(DIAGNOSTIC, diagnostic)]


def prediction_files(task: TaskSpec) -> list[SubmissionFile]:
    """The files a model of ``task`` writes for its test set: GLUE's (:func:`submission_files`),
    or for a ``task=files`` task its own ``<task.name>.tsv``."""
    if not task.scored_by_glue_server:
        return [SubmissionFile(task.name, task)]
    return submission_files(task)


def prediction_cell(file: SubmissionFile, predicted: float) -> str:
    """What the server reads for one prediction (a class id, or a score): the task's label
    string, checked against the server's, or a score clipped to [0, 5] with three decimals; for
    a ``task=files`` task, its data's label name or its score with three decimals."""
    if not file.spec.scored_by_glue_server:
        return file.spec.decode_label(predicted)
    labels = LABELS[file.name]
    if labels is None:
        low, high = SCORE_RANGE
        return f"{min(max(float(predicted), low), high):.{DECIMALS}f}"
    label = file.spec.labels[int(predicted)]
    if label not in labels:
        raise IsotuneError(
            f"Task {file.spec.name} labels class {int(predicted)} {label!r}, which GLUE's server "
            f"does not read in {file.file_name} (it reads {', '.join(labels)}). Fix: restore "
            f"labels in conf/task/{file.spec.name}.yaml to GLUE's and train the run again."
        )
    return label


def submission_text(
    file: SubmissionFile,
    rows: Iterable[tuple[int, float]],
    ids: tuple[str, Sequence[str]] | None = None,
) -> str:
    """The whole file: the header, then ``index<TAB>prediction`` in index order. Raises if an
    index comes twice (the server scores one row per example). ``ids``: a ``task=files`` test
    file's id column and its examples' ids, by position (:mod:`isotune.data.example_ids`): each
    row then names its example by its id, in file order, under the column's name."""
    ordered = sorted(rows)
    indices = [index for index, _ in ordered]
    if len(set(indices)) != len(indices):
        raise IsotuneError(
            f"{file.test_file} names some test examples twice in its index column, so "
            f"{file.file_name} would hold two predictions for them. Fix: use the official GLUE "
            "test file."
        )
    header, names = HEADER, {index: str(index) for index in indices}
    if ids is not None:
        header, names = f"{ids[0]}\tprediction", dict(enumerate(ids[1]))
    lines = [f"{names[index]}\t{prediction_cell(file, value)}" for index, value in ordered]
    return "\n".join([header, *lines]) + "\n"
