"""What a run tells its loggers as its fit starts: its dashboard (W&B: the axes and summaries of
:func:`isotune.tracking.wandb_logging.define_axes`; TensorBoard: the custom-scalars layout of its
task, :mod:`isotune.dashboard.tensorboard`), the whole config with the attempt's provenance as
hyper-parameters, the parameter counts, and after a resume no metrics.csv rows of the steps it
trains again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightning.pytorch.loggers import Logger, WandbLogger

from isotune.dashboard.layout import dashboard_sections
from isotune.dashboard.tensorboard import EpochAxesTensorBoardLogger
from isotune.data.tasks import TaskSpec
from isotune.record.csv_logging import RunCSVLogger
from isotune.tracking.metric_keys import params_key
from isotune.tracking.wandb_logging import define_axes


def start_loggers(
    loggers: Sequence[Logger],
    task: TaskSpec,
    hyperparameters: Mapping[str, Any],
    parameters: Mapping[str, int | float],
    earlier_attempts: bool,
    resumed_at_step: int | None,
) -> None:
    """``hyperparameters``: the resolved config and the provenance; ``earlier_attempts``: the
    run's folder holds an attempt before this one; ``resumed_at_step``: the step this attempt
    continues from in that folder (None: it starts from the beginning, and logs its parameter
    counts; a continuation's first attempt logged them)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):  # iso/* against its epoch
            prefixes = [task.log_prefix(split) for split in task.eval_splits]
            define_axes(logger.experiment, prefixes, task.primary_metric)
        elif isinstance(logger, EpochAxesTensorBoardLogger):
            logger.write_layout(dashboard_sections({task.name: task.primary_metric}))
        logger.log_hyperparams(dict(hyperparameters))
        if isinstance(logger, RunCSVLogger) and earlier_attempts:
            logger.drop_rows_after(resumed_at_step)  # all rows when it starts from the beginning
        if resumed_at_step is None:
            logger.log_metrics({params_key(name): n for name, n in parameters.items()}, step=0)
