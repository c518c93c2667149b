"""How long a sweep's jobs take, estimated from something measured: a preview's time
(docs/sweeps.md#preview).

A job's time comes from the wall times of the runs that completed in the sweep's folder (a sweep,
search or study typed again), else from a few training steps of one job timed on this machine
(:mod:`isotune.training.step_timing`); never from a constant. A sweep's time is its jobs in waves
of the launcher's slots, each wave as long as one job: the jobs of a wave are taken alike, so
the range runs from every job at the shortest to every job at the longest. Stdlib only.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from isotune.sweeps.runs import load_runs
from isotune.tracking.reporting import counted


@dataclass(frozen=True)
class JobTime:
    """One job's wall time in seconds: its typical value, the range it may fall in, and what it
    was measured on (``measured_from``, said with the estimate)."""

    typical: float
    low: float
    high: float
    measured_from: str


def completed_runs_time(folder: Path) -> JobTime | None:
    """The median wall time of the runs that completed in ``folder`` (every attempt of each,
    ``wall_time_s`` of results.json), from the shortest to the longest; None where none has."""
    times = [
        float(run.result["wall_time_s"])
        for run in (load_runs(folder) if folder.is_dir() else [])
        if run.completed and isinstance(run.result.get("wall_time_s"), int | float)
    ]
    times = [time for time in times if time > 0]
    if not times:
        return None
    return JobTime(
        statistics.median(times),
        min(times),
        max(times),
        f"the wall times of the {counted(len(times), 'run')} completed in {folder} (median; "
        "the range from the shortest to the longest)",
    )


def sweep_time(job: JobTime, jobs: int, at_once: int) -> str:
    """The time of ``jobs`` such jobs, ``at_once`` at a time, as the preview says it."""
    waves = math.ceil(jobs / max(1, at_once))
    return (
        f"about {duration(waves * job.typical)} (from {duration(waves * job.low)} to "
        f"{duration(waves * job.high)}) for {counted(jobs, 'job')}, {at_once} at once, each about "
        f"{duration(job.typical)}; measured from {job.measured_from}"
    )


def duration(seconds: float) -> str:
    """``seconds`` in the unit that reads best: 42 s, 3.5 min, 36 h, 3 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size * (2 if unit == "days" else 1):  # 36 h, not 1.5 days
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"
