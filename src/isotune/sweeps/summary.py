"""The few lines a sweep ends with: how many of its jobs completed, how many of those failed to
learn (:mod:`isotune.sweeps.failures`), and each one that did not complete, with its folder and
message, read from the jobs' results.json (so it says the same whichever launcher ran them, and
whether they ran here or on a cluster); each job its sweeper refused to start in a folder not its
own (which holds no record of it); and the disk the sweep folder uses."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from isotune.sweeps.failures import learned_of
from isotune.sweeps.footprint import disk_used, readable
from isotune.sweeps.runs import Sweep, load_runs, missing_jobs, unfinished_runs
from isotune.tracking.reporting import counted

MESSAGE_WIDTH = 300  # characters of a failed job's message; the whole one is in its results.json


@dataclass(frozen=True)
class SweepSummary:
    text: str
    all_completed: bool


def summarize_sweep(
    sweep_dir: Path, refused: Mapping[tuple[str, ...], str] | None = None
) -> SweepSummary:
    """How the jobs of the sweep in ``sweep_dir`` ended, as lines for the console; ``refused``:
    the jobs (their overrides) the sweeper refused to start in a folder not their own, and why
    (nothing of them is in the folder to read)."""
    sweep = Sweep.load(sweep_dir)
    runs = load_runs(sweep.dir)
    unfinished = unfinished_runs(runs, [sweep])
    missing = missing_jobs([sweep], runs)
    why_refused = {frozenset(job): why for job, why in (refused or {}).items()}
    turned_away = [job for job in missing if frozenset(job.overrides) in why_refused]
    missing = [job for job in missing if frozenset(job.overrides) not in why_refused]
    if sweep.enumerable:  # its jobs' runs: not those of other sweeps typed before in its folder
        total = len(sweep.expected_jobs)
        completed = len({sweep.job_number(run.overrides) for run in runs if run.completed} - {None})
    else:
        total, completed = len(runs), sum(run.completed for run in runs)
    now = datetime.now().astimezone()
    if total == 0:  # a search whose jobs have not started: it cannot know how many will run
        lines = [f"Sweep {sweep.dir.resolve()}: no job has started yet."]
    else:
        ended = [f"{completed} of {counted(total, 'job')} completed"]
        if unfinished or missing:
            ended.append(f"{len(unfinished) + len(missing)} did not")
        if turned_away:
            ended.append(f"{len(turned_away)} refused")
        lines = [f"Sweep {sweep.dir.resolve()}: {', '.join(ended)}{':' if ended[1:] else '.'}"]
    lines += [
        f"  {_label(run.job_dir, sweep.dir)} {_short(run.describe(now))}  ({run.job_dir})"
        for run in unfinished
    ]
    lines += [
        f"  #{job.number} missing (no results.json): {shlex.join(job.overrides)}" for job in missing
    ]
    lines += [
        f"  #{job.number} refused: {shlex.join(job.overrides)}: "
        + _short(why_refused[frozenset(job.overrides)])
        for job in turned_away
    ]
    failed = sum(run.completed and learned_of(run) is False for run in runs)
    if failed:
        lines.append(
            f"{failed} of the {completed} completed runs failed to learn (not above their dev "
            f"set's trivial predictor); the aggregate sets them apart: python -m isotune.aggregate "
            f"{sweep.dir}"
        )
    # A search's or a study's runs are not rerun one by one: the same command continues them.
    if (unfinished or missing) and not (sweep.is_search or sweep.is_study):
        lines.append(f"Rerun them with: python -m isotune.rerun {sweep.dir}")
    lines.append(f"The sweep folder uses {readable(disk_used(sweep.dir))} of disk.")
    done = not (unfinished or missing or turned_away)
    return SweepSummary("\n".join(lines), all_completed=done)


def _label(job_dir: Path, sweep_dir: Path) -> str:
    """``#3`` for a sweep's job folder ``3``; a search's job by its path, ``report/baseline/seed-5``
    (its folder's name alone, ``seed-5``, would read as a job number)."""
    if job_dir.name.isdigit():
        return f"#{job_dir.name}"
    try:
        return str(job_dir.relative_to(sweep_dir))
    except ValueError:
        return str(job_dir)


def _short(message: str) -> str:
    first = " ".join(message.split())
    return first if len(first) <= MESSAGE_WIDTH else first[: MESSAGE_WIDTH - 3] + "..."
