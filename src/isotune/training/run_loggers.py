"""What a run tells its loggers as its fit starts: the dashboard's axes and layout, the whole
config with the attempt's provenance as hyper-parameters, the parameter counts, and after a resume
no metrics.csv rows of the steps it trains again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightning.pytorch.loggers import Logger

from isotune.dashboard.loggers import declare_dashboard
from isotune.data.tasks import TaskSpec
from isotune.record.csv_logging import RunCSVLogger
from isotune.tracking.metric_keys import params_key


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
    declare_dashboard(loggers, task)  # iso/* against its epoch; the layout
    for logger in loggers:
        logger.log_hyperparams(dict(hyperparameters))
        if isinstance(logger, RunCSVLogger) and earlier_attempts:
            logger.drop_rows_after(resumed_at_step)  # all rows when it starts from the beginning
        if resumed_at_step is None:
            logger.log_metrics({params_key(name): n for name, n in parameters.items()}, step=0)
