"""A kept model without training: a random tiny-BERT model of a task saved as train.py saves
one (the sections that build it, the run's data settings), for the prediction tests that check
formats and choices rather than scores."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
import yaml

from isotune.data.tasks import TaskSpec
from isotune.model.classifier import GLUEClassifier
from isotune.record.checkpoint_reading import CONFIG_KEY
from tests.conftest import CONF_DIR


def task_config(task: str) -> dict:
    return yaml.safe_load((CONF_DIR / "task" / f"{task}.yaml").read_text())


def task_spec(task: str) -> TaskSpec:
    return TaskSpec.from_config(task_config(task))


def tiny_checkpoint(task: str | Mapping, folder: Path, tiny_bert: Path) -> Path:
    """A random tiny-BERT model of ``task`` (a name under conf/task/, or a task's config: a
    ``task=files`` run's, completed from its files) saved as train.py saves one (the sections
    that build it, the run's data settings): what the format tests need, without training."""
    hyperparameters = {
        "task": task_config(task) if isinstance(task, str) else dict(task),
        "model": {"name": "bert", "name_or_path": str(tiny_bert), "pooling": "cls"},
        "norm": {"name": "none"},
        "optim": {"lr": 1e-3},
    }
    torch.manual_seed(0)
    model = GLUEClassifier(**hyperparameters)
    path = folder / "checkpoints" / "best.ckpt"
    path.parent.mkdir(parents=True)
    config = {
        "data": {"max_length": 64, "eval_batch_size": 256},
        "trainer": {"precision": "32-true"},
    }
    torch.save(
        {"state_dict": model.state_dict(), "hyper_parameters": hyperparameters, CONFIG_KEY: config},
        path,
    )
    return path
