"""The kinds of task (a GLUE task, one's own files, a Hugging Face data set by name) each answer
the questions whose answers differ by kind, and only ``isotune.data.tasks`` reads a config's
``source`` to tell them apart: every other module asks the task."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

import isotune
from isotune.data.glue_format import prediction_files
from isotune.data.own_data import FILE_KEYS
from isotune.data.tasks import GlueTask, HubDatasetTask, OwnFilesTask, TaskSpec, task_kind
from isotune.errors import IsotuneError
from tests.helpers.tasks import TASK_DIR, load_task

PACKAGE = Path(isotune.__file__).parent
KIND_MODULE = PACKAGE / "data" / "tasks.py"


def own_task_config(**settings) -> dict:
    """A ``task=files`` config as ``own_task`` completes it from its files."""
    return {
        "name": "reviews",
        "source": "files",
        "files": {**OWN_FILES, "test": None},
        "text_fields": ["text"],
        "labels": ["neg", "pos"],
        "num_labels": 2,
        "metrics": ["accuracy", "macro_f1"],
        "primary_metric": "accuracy",
        "eval_splits": ["validation"],
        "test_split": "test",
        **settings,
    }


def typed_task(name: str, **data) -> DictConfig:
    """``conf/task/<name>.yaml`` as a run composes it, beside ``data.*`` (unset but ``data``)."""
    unset = dict.fromkeys(FILE_KEYS)
    root = OmegaConf.create(
        {"data": {**unset, **data}, "task": OmegaConf.load(TASK_DIR / f"{name}.yaml")}
    )
    return root.task


QUESTIONS = ("own_data", "reads_own_files", "scored_by_glue_server", "has_test_split")
OWN_FILES = {"train": "/data/train.csv", "validation": "/data/dev.csv"}
HUB = {"dataset": "aps/super_glue", "dataset_config": "boolq"}


@pytest.mark.parametrize(
    ("task", "kind", "expected"),
    [
        (load_task("rte"), GlueTask, (False, False, True, True)),
        (own_task_config(), OwnFilesTask, (True, True, False, False)),  # no data.test_file
        (
            own_task_config(files={**OWN_FILES, "test": "/x.csv"}),
            OwnFilesTask,
            (True, True, False, True),
        ),
        (own_task_config(files={"train": None}, **HUB), HubDatasetTask, (True, False, False, True)),
    ],
    ids=["glue", "own-files", "own-files-with-a-test-file", "hub-data-set"],
)
def test_each_kind_answers_each_question(task, kind, expected):
    spec = task if isinstance(task, TaskSpec) else TaskSpec.from_config(task)
    assert type(spec) is kind
    assert {q: getattr(spec, q) for q in QUESTIONS} == dict(zip(QUESTIONS, expected, strict=True))


def test_a_config_as_composed_names_its_kind_before_its_files_complete_it():
    """``task=files`` as typed (no labels yet): the kind the run completes, refuses GLUE's
    ``data.*_file`` for, and a study leaves to its runs."""
    composed = {
        "rte": typed_task("rte"),
        "files": typed_task("files"),
        "hub": typed_task("files", dataset_name="aps/super_glue"),
    }
    kinds = {name: task_kind(task) for name, task in composed.items()}
    assert kinds == {"rte": GlueTask, "files": OwnFilesTask, "hub": HubDatasetTask}
    with pytest.raises(IsotuneError, match=r"no labels, metrics or text columns of its own yet"):
        TaskSpec.from_config(OmegaConf.to_container(composed["files"], resolve=True))


def test_an_unknown_source_is_refused_naming_the_kinds():
    with pytest.raises(IsotuneError, match=r"source='tfds' is not one of \['glue', 'files'\]"):
        TaskSpec.from_config(own_task_config(source="tfds"))


def test_a_task_changed_by_replace_keeps_its_kind():
    """MNLI's other submission files and predict.py's ``test_file=`` are the task replaced."""
    assert {type(file.spec) for file in prediction_files(load_task("mnli"))} == {GlueTask}
    task = TaskSpec.from_config(own_task_config())
    assert type(dataclasses.replace(task, files={"test": "/new.csv"})) is OwnFilesTask


def reads_of_source(path: Path) -> list[int]:
    """The lines of ``path`` that read a task's ``source``: ``x.source`` (not a method
    ``x.source()``), ``x["source"]`` or ``x.get("source")``."""
    text = path.read_text(encoding="utf-8")
    if "source" not in text:
        return []
    tree = ast.parse(text)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return sorted(node.lineno for node in ast.walk(tree) if _reads_source(node, called))


def _reads_source(node: ast.AST, called: set[int]) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "source" and id(node) not in called
    if isinstance(node, ast.Subscript):
        return _is_source(node.slice)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "get" and bool(node.args) and _is_source(node.args[0])
    return False


def _is_source(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "source"


def test_only_the_task_module_reads_a_tasks_source():
    assert reads_of_source(KIND_MODULE), "the check finds no read even where the kinds are chosen"
    modules = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "hydra_plugins").rglob("*.py")]
    found = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in modules
        if path != KIND_MODULE and (lines := reads_of_source(path))
    }
    assert not found, f"ask the task (isotune.data.tasks), not its source: {found}"
