"""``hydra.sweeper.preview=true``: what a plain multirun, a search or a study would run, then exit
0 having launched and written nothing (docs/sweeps.md#preview); each sweeper runs every check it
runs before its first job, then :func:`say_preview`.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from hydra_plugins.isotune_launcher.stopping import only_locked, remove_if_only_locked
from isotune.sweeps.time_estimate import completed_runs_time, sweep_time

log = logging.getLogger(__name__)

PREVIEW_KEY = "hydra.sweeper.preview"


@dataclass
class PreviewConf:
    """The setting every sweeper of the project takes (its schema extends this one)."""

    preview: bool = False  # say what would run, its disk and its time, and exit: nothing launched


def folder_line(what: str, folder: Path, preview: bool) -> str:
    """The line a sweep starts with, ``what`` (``Sweep``, ``Search``) naming its ``folder``. A
    preview's says it makes none where the folder is not there but for the lock its start took
    (removed as the preview ends), not naming as made a folder it leaves no trace of."""
    if preview and (only_locked(folder) or not folder.exists()):
        return f"{what} folder: {folder} (not made: a preview makes none; the {what.lower()} would)"
    return f"{what} folder: {folder}"


def say_preview(
    folder: Path,
    plan: list[str],
    jobs_left: int,
    at_once: int,
    job: DictConfig,
    what: str,
    launcher: DictConfig,
) -> None:
    """Say the ``plan``'s lines and the time of the ``jobs_left``, ``at_once`` at a time, each as
    long as ``job`` (named ``what``) or as the runs completed in ``folder``; then remove the
    folder the preview's lock made, where it holds only that lock."""
    from hydra_plugins.isotune_launcher._step_timing import (  # torch
        bound_elsewhere,
        job_threads,
        time_job,
    )

    if not jobs_left:
        time = "nothing left to run: every job completed in the folder"
    elif (measured := completed_runs_time(folder)) is not None:
        time = sweep_time(measured, jobs_left, at_once)
    elif (elsewhere := bound_elsewhere(job, launcher)) is not None:
        time = f"no estimate: {elsewhere}"
    else:
        threads = job_threads(launcher, at_once)
        time = sweep_time(time_job(job, threads).job_time(what), jobs_left, at_once)
    log.info(
        "\n".join(
            [
                f"Preview ({PREVIEW_KEY}=true): nothing launched, nothing written.",
                *plan,
                f"Time: {time}.",
                f"To run it: the same command without {PREVIEW_KEY}=true.",
            ]
        )
    )
    remove_if_only_locked(folder)
