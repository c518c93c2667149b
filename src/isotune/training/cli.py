"""What the Hydra entry points (train.py, analyze.py) share: the settings of the current folder's
``.env``, train.py's command line checked where Hydra would stop without a fix, user errors
without a traceback, after Ctrl-C the run folder and the command that resumes (or restarts) the
run, and at the start of that run's command typed again (a new folder) the interrupted run's
folder and that command."""

from __future__ import annotations

import logging
import shlex
import signal
import sys
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dotenv import load_dotenv
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig

from isotune.errors import IsotuneError
from isotune.record.resume import LAST_CHECKPOINT, interrupted_runs_like
from isotune.training.hydra_callbacks import stop

log = logging.getLogger("isotune")

INTERRUPTED_EXIT_CODE = 128 + signal.SIGINT  # the shell's 130 for Ctrl-C; SIGTERM: 143
ENV_FILE = ".env"  # GLUE_DIR, HF_HUB_OFFLINE, WANDB_*: see .env.example
# Where list settings of the sweepers and the launcher are typed (:func:`list_settings`).
LIST_SETTING_GROUPS = ("hydra.sweeper.", "hydra.launcher.")


def load_env_file() -> None:
    """Set the variables of the ``.env`` in the folder the command runs in, and of no other;
    variables already in the environment win.

    python-dotenv's ``load_dotenv()`` without a path searches the script's folder and then every
    parent folder: a ``.env`` left higher up (a shared project or home folder) would set
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``, ``WANDB_BASE_URL`` or ``HF_ENDPOINT`` for every run.
    """
    load_dotenv(Path.cwd() / ENV_FILE)


def check_command_line(arguments: Sequence[str]) -> None:
    """Stop with one message and exit status 1, before Hydra reads ``arguments`` (train.py's
    command line), where Hydra would stop without the fix (:func:`check_list_settings`)."""
    try:
        check_list_settings(arguments)
    except IsotuneError as error:
        stop(str(error))


def check_list_settings(arguments: Sequence[str]) -> None:
    """Refuse a list setting of the sweepers or the launcher typed as a sweep
    (``hydra.sweeper.arms=none,isobn``, ``hydra.sweeper.seeds=range(1,4)``): Hydra sweeps none
    of its own settings, and says only "Sweeping over Hydra's configuration is not supported".
    The message gives each as the list it meant, bracketed and quoted for the shell."""
    candidates = [a for a in arguments if a.lstrip("+~").startswith(LIST_SETTING_GROUPS)]
    if not candidates:  # the plugins' schemas are read only where one of theirs is typed
        return
    parser = OverridesParser.create()
    lists = list_settings()
    typed, fixes = [], []
    for argument in candidates:
        try:
            (override,) = parser.parse_overrides([argument])
            items = list(override.sweep_string_iterator())
        except HydraException:  # not a sweep (a list already), or one Hydra reports itself
            continue
        key = override.key_or_group
        if key in lists:
            prefix = argument[: argument.index(key)]  # + or ++, kept
            typed.append(argument)
            fixes.append(shlex.quote(f"{prefix}{key}=[{','.join(items)}]"))
    if fixes:
        raise IsotuneError(
            f"{', '.join(typed)}: a list setting typed without brackets is a sweep to Hydra, "
            "which sweeps none of its own settings (it would stop with \"Sweeping over Hydra's "
            'configuration is not supported"). Fix: type the list in brackets, quoted for the '
            f"shell: {' '.join(fixes)}."
        )


def list_settings() -> set[str]:
    """The settings of this project's sweepers and launcher that hold a list
    (``hydra.sweeper.arms``, ``hydra.sweeper.seeds``, ``hydra.launcher.gpus``, ...), read from
    their config dataclasses; a config node's Hydra ``defaults`` list is no setting."""
    from hydra_plugins.isotune_launcher.gpus_launcher import GpusLauncherConf
    from hydra_plugins.isotune_launcher.optuna_sweeper import OptunaSweeperConf
    from hydra_plugins.isotune_launcher.study_sweeper import StudySweeperConf
    from hydra_plugins.isotune_launcher.summarizing_sweeper import SummarizingSweeperConf

    schemas = {
        "hydra.sweeper": (SummarizingSweeperConf, OptunaSweeperConf, StudySweeperConf),
        "hydra.launcher": (GpusLauncherConf,),
    }
    return {
        f"{group}.{name}"
        for group, confs in schemas.items()
        for conf in confs
        for name, hint in typing.get_type_hints(conf).items()
        if name != "defaults" and _holds_a_list(hint)
    }


def _holds_a_list(hint: Any) -> bool:
    """``list[...]``, or a union with one (``list[str] | None``)."""
    if typing.get_origin(hint) is list:
        return True
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and any(
        _holds_a_list(arg) for arg in typing.get_args(hint)
    )


@contextmanager
def user_errors_reported(cfg: DictConfig) -> Iterator[None]:
    """Turn an :class:`IsotuneError` into one log message, and print the output directory.

    A single run then exits with status 1; in a sweep the error is re-raised so that the job is
    marked failed while the other jobs go on (any other error's traceback goes to the job's log
    first: the sweep reports only its message). Ctrl-C, SIGTERM or SIGUSR2 stops the run (and a
    sweep) after printing how to continue it: through the signal's earlier handler where it had
    one (in a SLURM job, submitit's, which requeues the job), else with the shell's status for
    the signal (130, 143, 140).
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
