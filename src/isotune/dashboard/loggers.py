"""A training run declares its dashboard to its loggers once, as it starts: W&B gets the axes
and summaries of :func:`isotune.tracking.wandb_logging.define_axes`, TensorBoard the custom-scalars
layout of the run's task (:mod:`isotune.dashboard.tensorboard`); other loggers need nothing."""

from __future__ import annotations

from collections.abc import Sequence

from lightning.pytorch.loggers import Logger, WandbLogger

from isotune.dashboard.layout import dashboard_sections
from isotune.dashboard.tensorboard import EpochAxesTensorBoardLogger
from isotune.data.tasks import TaskSpec
from isotune.tracking.wandb_logging import define_axes


def declare_dashboard(loggers: Sequence[Logger], task: TaskSpec) -> None:
    """The axes (W&B) or the layout (TensorBoard) of a run of ``task``, for each logger."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            prefixes = [task.log_prefix(split) for split in task.eval_splits]
            define_axes(logger.experiment, prefixes, task.primary_metric)
        elif isinstance(logger, EpochAxesTensorBoardLogger):
            logger.write_layout(dashboard_sections({task.name: task.primary_metric}))
