"""Build what a config group names: the loggers and callbacks of training and analysis alike."""

from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import DictConfig


def instantiate_all(group: DictConfig | None) -> list:
    """Instantiate every non-null entry of a ``{name: {_target_: ...}}`` config group."""
    if not group:
        return []
    return [instantiate(entry) for entry in group.values() if entry is not None]
