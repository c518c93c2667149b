"""Weights & Biases as the dashboard: one run per job, grouped over seeds, offline when W&B cannot
be reached.

Group = model, task, norm, regularizer with its weight and every other override except the seed,
so W&B aggregates seeds into one line per configuration. Whether a job uploads is decided once,
before W&B starts, and never waits on the network: without credentials, with a malformed key, or
with a server that does not answer within seconds, the run is written offline under
``<output_dir>/wandb/offline-run-*`` (upload later with ``wandb sync``) and one log line says why.
A job always finishes its run, so jobs that share a process (sweep workers) never log into one run.
"""

from __future__ import annotations

import logging
import netrc
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from lightning.pytorch.loggers import Logger, WandbLogger

from isotune.metric_keys import LOSS, axis_of, best_key, summary_of, val_key
from isotune.network import reachable
from isotune.regularization import reg_label

log = logging.getLogger(__name__)

WANDB_URL = "https://api.wandb.ai"  # wandb's default server; WANDB_BASE_URL names another
JWT = re.compile(r"[\w-]+\.[\w-]+\.[\w-]+")  # header.payload.signature, base64url

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


def api_key_problem(key: str) -> str | None:
    """Why W&B would reject ``key``'s format, or None: wandb 0.31's own rule
    (``wandb/sdk/lib/wbauth/validation.py: check_api_key``) restated. A JWT (three dot-separated
    base64url parts) passes; otherwise the secret, after an optional ``prefix-`` of on-prem keys,
    holds 40 or more letters, digits, underscores or dashes."""
    if not key:
        return "it is empty"
    if JWT.fullmatch(key):
        return None
    secret = key.split("-", 1)[-1]
    if not re.fullmatch(r"[\w-]+", secret):
        return "it may only hold letters, digits, underscores and dashes"
    if len(secret) < 40:
        return f"it must have 40 or more characters, has {len(secret)}"
    return None


def _api_key(base_url: str) -> tuple[str, str] | None:
    """The API key wandb would use and where it comes from: WANDB_API_KEY, else the netrc entry
    ``wandb login`` writes for the server."""
    if key := os.environ.get("WANDB_API_KEY"):
        return key, "WANDB_API_KEY"
    path = Path(os.environ.get("NETRC") or "~/.netrc").expanduser()
    server = urlsplit(base_url)
    try:
        found = netrc.netrc(path)
    except (OSError, netrc.NetrcParseError):
        return None
    entry = found.authenticators(server.netloc) or found.authenticators(server.hostname or "")
    return (entry[2], f"the `wandb login` key in {path}") if entry and entry[2] else None


def offline_reason() -> tuple[int, str] | None:
    """None when W&B can upload now, decided within seconds; else a log level and why not.

    INFO where offline is what the user chose (WANDB_MODE) or the documented default (no key at
    all); WARNING where they meant to upload, with the fix.
    """
    mode = os.environ.get("WANDB_MODE", "")
    if mode in ("offline", "disabled", "dryrun"):
        return logging.INFO, f"WANDB_MODE={mode}"
    base_url = os.environ.get("WANDB_BASE_URL", WANDB_URL)
    key = _api_key(base_url)
    if key is None and not os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        if mode != "online":
            return logging.INFO, "no WANDB_API_KEY and no `wandb login` credentials"
        return logging.WARNING, (
            "WANDB_MODE=online is set, but there is no WANDB_API_KEY and no `wandb login` "
            "credentials; run `wandb login` or set WANDB_API_KEY to upload"
        )
    if key is not None and (problem := api_key_problem(key[0])):
        return logging.WARNING, (
            f"{key[1]} is not a W&B API key ({problem}); fix it with `wandb login --relogin` "
            "or a correct WANDB_API_KEY"
        )
    if not reachable(base_url):
        return logging.WARNING, f"the W&B server {base_url} cannot be reached (no network?)"
    return None


def wandb_online() -> tuple[bool, str]:
    """Whether W&B can upload now, and if not, why (:func:`offline_reason`)."""
    offline = offline_reason()
    return offline is None, offline[1] if offline else ""


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
    """A WandbLogger named and grouped for seed aggregation; offline, quiet and with one log line
    saying why and how to upload later, when :func:`offline_reason` gives a reason."""
    offline = offline_reason()
    regularizer = reg_label(reg, reg_weight)
    group = run_group(model, task, norm, overrides, regularizer)
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
        group=group,
        name=f"{group}-seed{seed}",
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
    """Draw ``iso/*`` against ``iso/epoch`` and each dev split's scores (``val/*``,
    ``val_<split>/*``) against ``epoch`` (:func:`isotune.metric_keys.axis_of`), instead of the
    global step Lightning gives every key; each split's primary metric and loss summarised by
    their best value (max; min for the loss), as the run's ``best/*`` are."""
    for prefix in ("iso", *val_prefixes):
        axis = axis_of(f"{prefix}/")
        run.define_metric(axis)
        run.define_metric(f"{prefix}/*", step_metric=axis)
    for prefix in val_prefixes:
        for metric in (primary_metric, LOSS):
            run.define_metric(val_key(prefix, metric), summary=summary_of(metric))


def finish_wandb_runs(loggers: Sequence[Logger], results: dict) -> None:
    """Put the run's outcome into the W&B summary and close the run (also after a failure).

    Only a run that started is finished: reading ``logger.experiment`` would start one, also
    where starting is what failed. This runs in the failure handler too, so a run that cannot be
    finished is one warning, not a second error over the first.
    """
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
