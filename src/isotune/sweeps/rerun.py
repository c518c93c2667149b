"""Rerun only the unfinished or missing jobs of a Hydra sweep, since a multirun cannot be resumed.

A failed or interrupted job runs again in its own job directory with the overrides Hydra
recorded for it, and so continues from the ``checkpoints/last.ckpt`` it saved at its last epoch
end (a run started in its folder resumes, ``resume=auto``); one without a checkpoint starts from
the beginning, and the plan says which does which. A missing job (no results.json) runs in a new
``<sweep_dir>/rerun-<n>``, which from then on counts as that job (a failed rerun reruns there). A
job whose results.json still says ``running`` may be alive, so it reruns only with
``--include-running`` (its age in ``python -m isotune.aggregate`` tells a dead one), and a job
whose process is alive (it holds its folder's lock, :mod:`isotune.folder_lock`) never reruns. Each
job is one ``python <script> <overrides> hydra.run.dir=<dir>``, run from the sweep's original
working directory, one after another. It refuses while the sweep itself or another rerun of it is
alive (they hold the sweep folder's lock; a rerun holds it while it runs), and while the workers
of a ``gpus``-launcher sweep still hold their GPU slots.

    python -m isotune.rerun <sweep_dir> [--dry-run] [--include-running] [--script train.py]
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

from isotune import folder_lock
from isotune.errors import IsotuneError
from isotune.resume import LAST_CHECKPOINT
from isotune.sweeps import gpu_slots
from isotune.sweeps.runs import Run, Sweep, job_id, load_runs, missing_jobs, unfinished_runs

RERUN_DIR_PREFIX = "rerun-"
DEFAULT_SCRIPT = "train.py"


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
    or next to its config folder (a sweep started from elsewhere); else ``./train.py``."""
    if script is not None:
        if not script.is_file():
            raise IsotuneError(f"--script {script} is not a file; pass the training script.")
        return script.resolve()
    hydra = sweep.config["hydra"]
    app = f"{hydra['job']['name']}.py"
    config_dirs = [
        Path(source["path"])
        for source in hydra["runtime"].get("config_sources", [])
        if source["provider"] == "main" and source["schema"] == "file"
    ]
    candidates = [
        Path(hydra["runtime"]["cwd"]) / app,
        *(config_dir.parent / app for config_dir in config_dirs),
        Path.cwd() / DEFAULT_SCRIPT,
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    tried = " or ".join(map(str, candidates))
    raise IsotuneError(f"No training script at {tried}; pass its path with --script.")


def plan_reruns(
    sweep_dir: Path, script: Path | None = None, include_running: bool = False
) -> tuple[list[Rerun], list[Run]]:
    """The commands that rerun the sweep's unfinished jobs in place and its missing ones anew,
    and the runs left alone: alive, or marked running (unless ``include_running``)."""
    sweep = Sweep.load(sweep_dir)
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
    script = training_script(sweep, script)
    cwd = Path(sweep.config["hydra"]["runtime"]["cwd"])
    cwd = cwd if cwd.is_dir() else Path.cwd()
    runs = load_runs(sweep.dir)

    def command(overrides: Sequence[str], job_dir: Path) -> list[str]:
        if not overrides:
            raise IsotuneError(
                f"{job_dir} records no overrides (no .hydra/overrides.yaml, none in results.json), "
                "so its job is unknown; rerun it by hand or delete the directory."
            )
        return [sys.executable, str(script), *overrides, f"hydra.run.dir={job_dir.resolve()}"]

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
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument(
        "--include-running",
        action="store_true",
        help="also rerun jobs whose results.json still says running (they may be alive)",
    )
    parser.add_argument(
        "--script",
        type=Path,
        help="training script (default: the sweep's app in its original working directory, "
        f"else ./{DEFAULT_SCRIPT})",
    )
    args = parser.parse_args(argv)
    try:
        reruns, left_alone = plan_reruns(args.sweep_dir, args.script, args.include_running)
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
        print(f"Reran {len(reruns)} jobs, {failures} failed again.")
    return int(failures > 0)
