"""A task's spec straight from its config file (conf/task/<name>.yaml), without Hydra."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from isotune.data.tasks import TaskSpec

TASK_DIR = Path(__file__).resolve().parents[2] / "conf" / "task"


def load_task(name: str) -> TaskSpec:
    return TaskSpec.from_config(OmegaConf.to_container(OmegaConf.load(TASK_DIR / f"{name}.yaml")))
