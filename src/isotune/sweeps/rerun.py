"""Rerun only the unfinished or missing jobs of a Hydra sweep, since a multirun cannot be resumed.

A failed or interrupted job reruns in its own folder with its recorded overrides (and so resumes
from its ``last.ckpt``); a missing one in ``<sweep_dir>/rerun-<n>``; a ``running`` one only with
``--include-running``, and never one whose process holds its folder's lock. It refuses while the
sweep, another rerun, a ``gpus`` sweep's workers or its queued SLURM jobs are alive (a queued
job holds no lock yet, and would run twice). The overrides read from the folder are data: one
that names code to run (a ``_target_``, a ``hydra`` setting but the project's own plugins) or a
script other than this project's ``train.py`` is refused before anything runs. Rules in full:
docs/sweeps.md#reruns.

    python -m isotune.rerun <sweep_dir> [overrides ...] [--dry-run] [--include-running]
        [--script train.py]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import isotune
from isotune.errors import IsotuneError
from isotune.record import folder_lock
from isotune.record.checkpoint_reading import LAST_CHECKPOINT
from isotune.sweeps import gpu_slots, slurm_jobs
from isotune.sweeps.runs import Run, Sweep, job_id, load_runs, missing_jobs, unfinished_runs
from isotune.tracking.reporting import counted

RERUN_DIR_PREFIX = "rerun-"
DEFAULT_SCRIPT = "train.py"
# The Hydra options the project ships (conf/hydra/launcher/, the isotune sweeper plugin): the
# only hydra overrides a folder may name, since any other launcher, sweeper or hydra setting
# (callbacks, env_set, searchpath) can name code to run.
SHIPPED_HYDRA_OPTIONS = {"hydra/launcher": ("gpus", "slurm"), "hydra/sweeper": ("isotune",)}


@dataclass(frozen=True)
class Rerun:
    """One job to run again: the command, where to run it from, and why."""

    argv: list[str]
    cwd: Path
    reason: str

    def shell(self) -> str:
        return f"cd {shlex.quote(str(self.cwd))} && {shlex.join(self.argv)}"


def training_script(sweep: Sweep, script: Path | None = None) -> Path:
    """``script`` if given; else the sweep's app, ``hydra.job.name``.py, in ``hydra.runtime.cwd``
    or next to its config folder (a sweep started from elsewhere), if it is this project's
    script; else ``./train.py``. A folder from elsewhere can name any file as its app, so rerun
    runs one only when it is :func:`project_scripts`' or typed with ``--script``."""
    if script is not None:
        if not script.is_file():
            raise IsotuneError(f"--script {script} is not a file; pass the training script.")
        return script.resolve()
    ours = project_scripts()
    for recorded in _recorded_scripts(sweep):
        if not recorded.is_file():
            continue
        if recorded.resolve() in ours:
            return recorded.resolve()
        known = " or ".join(map(str, ours)) or f"none: no ./{DEFAULT_SCRIPT} here"
        raise IsotuneError(
            f"The sweep {sweep.dir} names {recorded} as its training script, which is not this "
            f"project's {DEFAULT_SCRIPT} ({known}); rerun runs no code a folder names. Fix: run "
            f"it from the project's folder, or pass --script <path> if you trust that script."
        )
    if ours:
        return ours[0]
    raise IsotuneError(
        f"No training script: no ./{DEFAULT_SCRIPT} here and none recorded by {sweep.dir}; "
        "run it from the project's folder or pass --script <path>."
    )


def project_scripts() -> list[Path]:
    """The training scripts rerun runs untold: ``./train.py`` where it is run, and the
    ``train.py`` of the checkout isotune is installed from (an editable install)."""
    checkout = Path(isotune.__file__).resolve().parents[2]
    found = (path.resolve() for path in (Path.cwd(), checkout) if (path / DEFAULT_SCRIPT).is_file())
    return list(dict.fromkeys(path / DEFAULT_SCRIPT for path in found))


def _recorded_scripts(sweep: Sweep) -> list[Path]:
    hydra = sweep.config["hydra"]
    app = f"{hydra['job']['name']}.py"
    config_dirs = [
        Path(source["path"])
        for source in hydra["runtime"].get("config_sources", [])
        if source["provider"] == "main" and source["schema"] == "file"
    ]
    return [
        Path(hydra["runtime"]["cwd"]) / app,
        *(config_dir.parent / app for config_dir in config_dirs),
    ]


def working_directory(sweep: Sweep, script: Path) -> Path:
    """Where the jobs run: the sweep's own working directory (its relative paths mean what they
    meant) when it is this one or the script's folder; else this one, since a folder from
    elsewhere may name a directory holding a ``.env`` of someone else's."""
    recorded = Path(sweep.config["hydra"]["runtime"]["cwd"])
    here = Path.cwd().resolve()
    if recorded.is_dir() and recorded.resolve() in (here, script.parent):
        return recorded.resolve()
    return here


def names_code(override: str) -> bool:
    """Whether an override read from a folder would make Hydra run code of its choosing: a
    ``_target_`` anywhere in it, or a ``hydra`` key other than a shipped launcher or sweeper."""
    key, _, value = override.lstrip("+~").partition("=")
    if "_target_" in override:
        return True
    if key in SHIPPED_HYDRA_OPTIONS:
        return value not in SHIPPED_HYDRA_OPTIONS[key]
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def plan_reruns(
    sweep_dir: Path,
    script: Path | None = None,
    include_running: bool = False,
    extra: Sequence[str] = (),
) -> tuple[list[Rerun], list[Run]]:
    """The commands that rerun the sweep's unfinished jobs in place and its missing ones anew,
    and the runs left alone: alive, or marked running (unless ``include_running``).
    ``extra``: the user's own overrides, added to every job after the folder's."""
    sweep = Sweep.load(sweep_dir)
    if sweep.is_study:
        raise IsotuneError(
            f"{sweep.dir} is a study (study=...): its runs are its searches', each trial chosen "
            "from the scores of the earlier ones, so rerunning its jobs would not continue it. "
            "Fix: type the study's command again (python train.py -m study=...); it resumes each "
            "interrupted job from its last.ckpt and goes on (docs/study.md)."
        )
    if sweep.is_search:
        raise IsotuneError(
            f"{sweep.dir} is a search (hydra/sweeper=optuna): its trials are chosen from the "
            "scores of the earlier ones, so rerunning its jobs would not continue it. Fix: type "
            "the search's command again (python train.py -m hparams_search=...); it finishes its "
            "interrupted trial, resuming each job from its last.ckpt, and goes on (docs/search.md)."
        )
    pid = folder_lock.holder(sweep.dir)
    if pid not in (None, os.getpid()):
        raise IsotuneError(
            f"The sweep {sweep.dir} is still running, or being rerun (pid {pid} holds its "
            "folder); rerun its failed or missing jobs once that has ended."
        )
    running = gpu_slots.held_slots(sweep.dir / gpu_slots.SWEEP_SLOT_DIR)
    if running:
        raise IsotuneError(
            f"The sweep {sweep.dir} is still running (its workers hold GPU slots {running}); "
            "rerun its failed or missing jobs once it has ended."
        )
    slurm_jobs.check_no_live_jobs(sweep.dir, "Rerunning its jobs")
    script = training_script(sweep, script)
    cwd = working_directory(sweep, script)
    runs = load_runs(sweep.dir)

    def command(overrides: Sequence[str], job_dir: Path) -> list[str]:
        if not overrides:
            raise IsotuneError(
                f"{job_dir} records no overrides (no .hydra/overrides.yaml, none in results.json), "
                "so its job is unknown; rerun it by hand or delete the directory."
            )
        refused = next((override for override in overrides if names_code(override)), None)
        if refused is not None:
            raise IsotuneError(
                f"{job_dir}: its recorded override {refused!r} names code to run, and rerun "
                "runs no code a folder names. Fix: if you trust it, type it yourself after the "
                "sweep folder (python -m isotune.rerun <sweep_dir> <override>), or rerun the "
                "job by hand."
            )
        return [
            sys.executable,
            str(script),
            *overrides,
            *extra,
            f"hydra.run.dir={job_dir.resolve()}",
        ]

    jobs: dict[tuple, list[Run]] = {}  # a job rerun once, in its first folder, however many
    for run in unfinished_runs(runs, [sweep]):
        jobs.setdefault(job_id(run, [sweep]), []).append(run)
    now = datetime.now().astimezone()
    reruns: list[Rerun] = []
    left_alone: list[Run] = []
    for job_runs in jobs.values():
        alive = any(folder_lock.holder(run.job_dir) is not None for run in job_runs)
        if alive or (not include_running and any(run.status == "running" for run in job_runs)):
            left_alone += job_runs
            continue
        first = job_runs[0]
        reason = f"{first.describe(now)}; {_continues(first.job_dir)}"
        reruns.append(Rerun(command(first.overrides, first.job_dir), cwd, reason))
    first_free = next_rerun_index(sweep.dir)
    reruns += [
        Rerun(
            command(job.overrides, sweep.dir / f"{RERUN_DIR_PREFIX}{first_free + i}"),
            cwd,
            "missing",
        )
        for i, job in enumerate(missing_jobs([sweep], runs))
    ]
    return reruns, left_alone


def _continues(job_dir: Path) -> str:
    if (job_dir / LAST_CHECKPOINT).is_file():
        return f"resumes from {LAST_CHECKPOINT}"
    return "starts again from the beginning (no checkpoint saved)"


def next_rerun_index(sweep_dir: Path) -> int:
    """One past the highest ``rerun-<n>`` already there, so reruns never share a directory."""
    pattern = re.compile(rf"{RERUN_DIR_PREFIX}(\d+)")
    taken = [int(m[1]) for p in sweep_dir.iterdir() if (m := pattern.fullmatch(p.name))]
    return max(taken, default=-1) + 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m isotune.rerun",
        description="Rerun the failed or missing jobs of a Hydra sweep, one after another.",
    )
    parser.add_argument("sweep_dir", type=Path, help="the sweep directory (holds multirun.yaml)")
    parser.add_argument(
        "overrides", nargs="*", help="your own overrides, added to every job (e.g. trainer=cpu)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument(
        "--include-running",
        action="store_true",
        help="also rerun jobs whose results.json still says running (they may be alive)",
    )
    parser.add_argument(
        "--script",
        type=Path,
        help="training script (default: the sweep's app if it is this project's "
        f"{DEFAULT_SCRIPT}, else ./{DEFAULT_SCRIPT})",
    )
    args = parser.parse_args(argv)
    try:
        reruns, left_alone = plan_reruns(
            args.sweep_dir, args.script, args.include_running, args.overrides
        )
        # one rerun of a sweep at a time, never beside the sweep itself
        locked = not args.dry_run and folder_lock.hold(args.sweep_dir, "sweep")
    except IsotuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        return run_reruns(reruns, left_alone, args.sweep_dir, args.dry_run)
    finally:
        if locked:
            folder_lock.release(args.sweep_dir)


def run_reruns(reruns: list[Rerun], left_alone: list[Run], sweep_dir: Path, dry_run: bool) -> int:
    """Print the plan and run it, one job after another; 1 if any job failed again."""
    now = datetime.now().astimezone()
    for run in left_alone:
        pid = folder_lock.holder(run.job_dir)
        why = "--include-running reruns it" if pid is None else f"alive, pid {pid}"
        print(f"# left alone ({why}): {run.job_dir}: {run.describe(now)}")
    if not reruns:
        print(f"Nothing to rerun in {sweep_dir}: no failed, interrupted or missing jobs.")
        return 0
    failures = 0
    for rerun in reruns:
        print(f"# {' '.join(rerun.reason.split())}\n{rerun.shell()}", flush=True)
        if not dry_run:
            failures += subprocess.run(rerun.argv, cwd=rerun.cwd).returncode != 0
    if not dry_run:
        print(f"Reran {counted(len(reruns), 'job')}, {failures} failed again.")
    return int(failures > 0)
