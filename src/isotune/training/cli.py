"""What the Hydra entry points (train.py, analyze.py, predict.py) share: the settings of the
current folder's ``.env``, one message and exit status 1 where Hydra would not stop, user errors
without a traceback, after Ctrl-C the run folder and the command that resumes (or restarts) the
run, and at the start of that run's command typed again (a new folder) the interrupted run's
folder and that command."""

from __future__ import annotations

import logging
import shlex
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dotenv import load_dotenv
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from isotune.errors import IsotuneError
from isotune.record.checkpoint_reading import LAST_CHECKPOINT
from isotune.record.resume import interrupted_runs_like

log = logging.getLogger("isotune")

INTERRUPTED_EXIT_CODE = 128 + signal.SIGINT  # the shell's 130 for Ctrl-C; SIGTERM: 143
ENV_FILE = ".env"  # GLUE_DIR, HF_HUB_OFFLINE, WANDB_*: see .env.example


def load_env_file() -> None:
    """Set the variables of the ``.env`` in the folder the command runs in, and of no other;
    variables already in the environment win. python-dotenv's own search of every parent folder
    would let a ``.env`` left higher up set ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``, ``WANDB_BASE_URL``
    or ``HF_ENDPOINT`` for every run.
    """
    load_dotenv(Path.cwd() / ENV_FILE)


def stop(message: str) -> None:
    """``message`` and exit 1, where Hydra would make an exception a traceback or a warning."""
    print(f"Error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


@contextmanager
def user_errors_reported(cfg: DictConfig) -> Iterator[None]:
    """Turn an :class:`IsotuneError` into one log message (exit status 1; in a sweep, re-raised so
    the job is marked failed while the others go on), and print the output directory. Another
    error's traceback goes to a sweep job's log first. Ctrl-C, SIGTERM or SIGUSR2 stops the run
    after printing how to continue it, through the signal's earlier handler where it had one
    (submitit's, which requeues the job), else with the shell's status for the signal.
    """
    try:
        yield
    except IsotuneError as error:
        log.error("%s", error)
        if HydraConfig.get().mode == RunMode.RUN:
            sys.exit(1)
        raise
    except Exception:
        if HydraConfig.get().mode == RunMode.MULTIRUN:  # into the job's log: the sweep goes on
            log.exception("The job failed; its traceback:")
        raise
    except KeyboardInterrupt as stop:
        stopped_by = getattr(stop, "signal", signal.SIGINT)
        if getattr(stop, "completed", False):
            log.warning(
                "Stopped (%s) as the run recorded its end: it completed, its results.json says "
                "so, and started again it stands as it is. Output directory: %s",
                stopped_by.name,
                cfg.paths.output_dir,
            )
        else:
            log.warning(
                "Interrupted (%s). Output directory: %s\n%s",
                stopped_by.name,
                cfg.paths.output_dir,
                resume_hint(cfg),
            )
        hand_over = getattr(stop, "hand_over", None)
        if hand_over is not None:  # the handler there before the run: submitit's requeue
            hand_over()
        sys.exit(128 + stopped_by)
    log.info("Output directory: %s", cfg.paths.output_dir)


def resume_hint(cfg: DictConfig) -> str:
    """The command that continues the run in its own folder (:func:`continue_hint`); a job of a
    sweep alone (``hydra.mode=RUN``)."""
    hydra = HydraConfig.get()
    overrides = list(hydra.overrides.task)
    if hydra.mode == RunMode.MULTIRUN:
        overrides.append("hydra.mode=RUN")  # this job alone, even from a preset that sweeps
    return continue_hint(overrides, Path(cfg.paths.output_dir))


def continue_hint(overrides: list[str], folder: Path) -> str:
    """The command that continues the run of ``overrides`` in its own ``folder``: started there
    again, a run resumes from the ``checkpoints/last.ckpt`` it saved at its last epoch end
    (``resume=auto``); without one it starts again from the beginning, in the same folder."""
    overrides = [o for o in overrides if not o.startswith("hydra.run.dir=")]
    if not (folder / LAST_CHECKPOINT).is_file():
        return (
            "No checkpoint was saved yet; start it again in its folder: "
            f"{_command([*overrides, f'hydra.run.dir={folder}'])}"
        )
    overrides = [o for o in overrides if not o.startswith("ckpt_path=")]
    return (
        f"Resume it in its folder, from its {LAST_CHECKPOINT}: "
        f"{_command([*overrides, f'hydra.run.dir={folder}'])}"
    )


def warn_of_interrupted_runs(cfg: DictConfig, settings: Mapping[str, Any]) -> None:
    """At the start of a new run whose command chose no folder (``python train.py <overrides>``,
    no ``hydra.run.dir=``, not a sweep), say so when the same command was interrupted before:
    typed again it starts over in a new folder, so the warning names the interrupted run's folder
    and the command that continues it there. It continues nothing itself: which one to keep is
    the researcher's call (``settings``: what this run records in its results.json)."""
    if not HydraConfig.initialized():
        return
    hydra = HydraConfig.get()
    if hydra.mode != RunMode.RUN or any(
        o.startswith("hydra.run.dir=") for o in hydra.overrides.hydra
    ):
        return
    output_dir = Path(cfg.paths.output_dir)
    interrupted = interrupted_runs_like(output_dir, settings)
    if not interrupted:
        return
    latest, earlier = interrupted[-1], interrupted[:-1]
    others = (
        f" ({len(earlier)} earlier ones too: {', '.join(map(str, earlier))})" if earlier else ""
    )
    log.warning(
        "A run with these settings was interrupted in %s%s; this one starts over in a new folder, "
        "%s, and continues nothing. To continue that run instead, stop this one (Ctrl-C). %s",
        latest,
        others,
        output_dir,
        continue_hint(list(settings["overrides"]), latest),
    )


def _command(overrides: list[str]) -> str:
    return shlex.join(["python", _script(), *overrides])


def _script() -> str:
    """The entry point as typed; inside a launcher's own process (a SLURM job runs submitit's
    ``_submit.py``), the Hydra app's ``<job name>.py``."""
    app = f"{HydraConfig.get().job.name}.py"
    return sys.argv[0] if Path(sys.argv[0]).name == app else app


def run_overrides() -> list[str]:
    """The command-line overrides of this job (empty outside a Hydra app)."""
    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)
