"""Weights & Biases as the dashboard: one run per job, grouped over seeds (every override but the
seed), offline when W&B cannot be reached (decided once, before W&B starts:
:mod:`isotune.tracking.wandb_status`). A job always finishes its run, so jobs sharing a process
(sweep workers) never log into one run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence

from lightning.pytorch.loggers import Logger, WandbLogger

from isotune.tracking.metric_keys import LOSS, axis_of, best_key, summary_of, val_key
from isotune.tracking.run_names import reg_label, run_group
from isotune.tracking.wandb_status import offline_reason

log = logging.getLogger(__name__)


def wandb_logger(
    save_dir: str,
    model: str,
    task: str,
    norm: str,
    seed: int,
    overrides: Sequence[str] = (),
    reg: str = "none",
    reg_weight: float = 0.0,
    project: str = "isotune",
    entity: str | None = None,
    tags: Iterable[str] = (),
    job_type: str = "train",
    log_model: bool = False,
    group: str | None = None,
) -> WandbLogger:
    """A WandbLogger named and grouped for seed aggregation; offline, with one log line saying why,
    when :func:`offline_reason` gives a reason. ``group`` replaces the configuration's group
    where runs of several configurations belong together (a study's arm on a task)."""
    offline = offline_reason()
    regularizer = reg_label(reg, reg_weight)
    configuration = run_group(model, task, norm, overrides, regularizer)
    mode = "disabled" if os.environ.get("WANDB_MODE") == "disabled" else "offline"
    if offline is not None and mode == "offline":
        runs = os.path.join(save_dir, "wandb", "offline-run-*")
        log.log(
            offline[0],
            "W&B offline: %s. The run is written to %s; upload it later with `wandb sync %s`.",
            offline[1],
            runs,
            runs,
        )
    logger = WandbLogger(
        project=project,
        entity=entity,
        group=group or configuration,
        name=f"{configuration}-seed{seed}",
        tags=sorted({*tags, model, task, norm, regularizer}),
        job_type=job_type,
        save_dir=save_dir,
        log_model=log_model and offline is None,  # W&B cannot upload artifacts offline
        # The mode goes to wandb.init itself: Lightning's offline=True would instead set
        # WANDB_MODE=dryrun in os.environ, for every later job in the same process too. Offline,
        # wandb's own advice (`wandb online`, "set WANDB_MODE=online") is silenced: the line above
        # gives the reason and the fix.
        **({"mode": mode, "settings": {"silent": True}} if offline else {}),
    )
    # Lightning passes anonymous=None, which wandb 0.31 answers with a deprecation warning per run.
    logger._wandb_init.pop("anonymous", None)
    return logger


def define_axes(run, val_prefixes: Sequence[str], primary_metric: str) -> None:
    """Draw each key against its axis (:func:`isotune.tracking.metric_keys.axis_of`), not the
    global step Lightning gives every key; each split's primary metric and loss summarised by
    their best value, as the run's ``best/*`` are."""
    for prefix in ("iso", *val_prefixes):
        axis = axis_of(f"{prefix}/")
        run.define_metric(axis)
        run.define_metric(f"{prefix}/*", step_metric=axis)
    for prefix in val_prefixes:
        for metric in (primary_metric, LOSS):
            run.define_metric(val_key(prefix, metric), summary=summary_of(metric))


def finish_wandb_runs(loggers: Sequence[Logger], results: dict) -> None:
    """Put the run's outcome into the W&B summary and close the run (also after a failure). Only a
    run that started is finished (reading ``logger.experiment`` would start one); a run that cannot
    be finished is one warning, not a second error over the first."""
    for logger in loggers:
        run = logger._experiment if isinstance(logger, WandbLogger) else None
        if run is None:
            continue
        import wandb  # only where a W&B run exists: the import is slow

        try:
            try:
                run.summary.update(
                    {
                        "status": results["status"],
                        "best_epoch": results.get("best_epoch"),
                        # whether the best epoch beat a constant predictor
                        # (isotune.training.trivial)
                        "learned": results.get("learned"),
                        "trivial_score": (results.get("trivial") or {}).get("score"),
                        **{best_key(name): v for name, v in results.get("best", {}).items()},
                        **{best_key(key): v for key, v in _best_isotropy(results).items()},
                    }
                )
                run.finish(exit_code=0 if results["status"] == "completed" else 1)
            finally:
                # finish() can return before the service has written the run's file; teardown
                # waits for it, so a sweep's next job (or `wandb sync`) never sees a half-written
                # run, and a next job never inherits a run that failed to finish.
                wandb.teardown()
        except Exception as error:
            log.warning(
                "W&B: could not finish the run in %s (%s: %s); what it logged so far stays there.",
                logger.save_dir,
                type(error).__name__,
                error,
            )


def _best_isotropy(results: dict) -> dict[str, float]:
    """The isotropy at the best epoch (``iso/<view>/<measure>``), for the isotropy-score
    scatter of the dashboard."""
    return (results.get("isotropy") or {}).get("best") or {}
