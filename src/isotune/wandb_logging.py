"""Weights & Biases as the dashboard: one run per job, grouped over seeds, offline without a key.

Group = model, task, norm, regularizer with its weight and every other override except the seed,
so W&B aggregates seeds into one line per configuration. Without credentials runs are written
offline under ``<output_dir>/wandb/offline-run-*`` (upload later with ``wandb sync``); a job always
finishes its run, so jobs that share a process (sweep workers) never log into one run.
"""

from __future__ import annotations

import netrc
import os
from collections.abc import Iterable, Sequence
from urllib.parse import urlparse

from lightning.pytorch.loggers import Logger, WandbLogger

from isotune.regularization import reg_label

# Overrides that do not change what is computed, that name a run folder, or whose effect results
# record otherwise (an intervention is its norm and reg): not part of a group or a configuration.
NOT_IN_GROUP = (
    "seed",
    "ckpt_path",
    "hydra.",
    "paths.",
    "trainer.enable_progress_bar",
    "logger",
    "intervention",
)


def wandb_online() -> tuple[bool, str]:
    """Whether a W&B upload can happen without an interactive login prompt, and why not."""
    mode = os.environ.get("WANDB_MODE", "online")
    if mode in ("offline", "disabled", "dryrun"):
        return False, f"WANDB_MODE={mode}"
    if os.environ.get("WANDB_API_KEY"):
        return True, ""
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        if netrc.netrc().authenticators(host):
            return True, ""
    except (OSError, netrc.NetrcParseError):
        pass
    return False, "no WANDB_API_KEY and no `wandb login` credentials"


def run_group(
    model: str, task: str, norm: str, overrides: Sequence[str] = (), reg: str = "none"
) -> str:
    """``model-task-norm[-reg]`` (``reg`` as :func:`reg_label` names it, left out when ``none``)
    plus the other overrides that change the run, seed excluded."""
    named = ("model=", "task=", "norm=", "reg=", "reg.weight=")
    extra = sorted(
        override
        for override in overrides
        if not override.startswith(named) and not override.lstrip("+~").startswith(NOT_IN_GROUP)
    )
    return "-".join([model, task, norm, *([reg] if reg != "none" else []), *extra])


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
) -> WandbLogger:
    """A WandbLogger named and grouped for seed aggregation; offline when no key is available."""
    online, _ = wandb_online()
    regularizer = reg_label(reg, reg_weight)
    group = run_group(model, task, norm, overrides, regularizer)
    return WandbLogger(
        project=project,
        entity=entity,
        group=group,
        name=f"{group}-seed{seed}",
        tags=sorted({*tags, model, task, norm, regularizer}),
        job_type=job_type,
        save_dir=save_dir,
        offline=not online,
        log_model=log_model and online,  # W&B cannot upload artifacts offline
    )


def finish_wandb_runs(loggers: Sequence[Logger], results: dict) -> None:
    """Put the run's outcome into the W&B summary and close the run (also after a failure)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            run = logger.experiment
            run.summary.update(
                {
                    "status": results["status"],
                    "best_epoch": results.get("best_epoch"),
                    **{f"best/{name}": value for name, value in results.get("best", {}).items()},
                }
            )
            run.finish(exit_code=0 if results["status"] == "completed" else 1)
            # finish() can return before the service has written the run's file; teardown waits
            # for it, so a sweep's next job (or `wandb sync`) never sees a half-written run.
            import wandb  # only where a W&B logger exists: the import is slow

            wandb.teardown()
