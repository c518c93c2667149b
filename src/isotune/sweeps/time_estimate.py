"""How long a sweep's jobs take, estimated from something measured: a preview's time
(docs/sweeps.md#preview).

A job's time comes from the wall times of the runs completed in the sweep's folder, else from
one job's parts timed on this machine (:class:`JobParts`, timed by the preview's
:mod:`hydra_plugins.isotune_launcher._step_timing`); never from a constant. A sweep's time is
its jobs in waves of the launcher's slots, ranging from every job at the shortest to every job
at the longest. Stdlib only.
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
    first_wave_only: float = 0.0  # seconds of it only the first wave pays (a shared probe)


@dataclass(frozen=True)
class JobParts:
    """What one job does, each part timed here (seconds) and counted as often as the job does
    it. Training batches alone were 2.9x short for short jobs: an 8-job debug sweep previewed
    at 14 s a job took 39 s, its model's loading, epoch-0 isotropy probe and validation most of
    it. ``load``: the model, data and trainer made and the sanity validation run, once;
    ``probe``: the epoch-0 isotropy probe, once (0 without the callback); ``train``: the timed
    training batches, the job trains ``train_count``; ``val``: the timed validation batches, a
    pass validates ``val_count``, then ``val_end`` (its metrics and isotropy measures), and the
    job runs ``validations`` passes; ``timed_on``: where (the device, its threads);
    ``probe_shared``: the sweep's jobs share the epoch-0 measures (``callbacks.isotropy.
    shared_dir``), so the jobs of the first wave make the probe and the later ones read it;
    ``save``: one checkpoint written, the job writes ``saves`` (last.ckpt every epoch, best.ckpt
    once: 0.7 s of a 6 s debug job)."""

    load: float
    probe: float
    train: tuple[float, ...]
    train_count: int
    val: tuple[float, ...]
    val_count: int
    val_end: float
    validations: int
    timed_on: str
    probe_shared: bool = False
    save: float = 0.0
    saves: int = 0

    def seconds(self, train_batch: float, val_batch: float) -> float:
        """The job's time with each training batch ``train_batch`` s and each validation batch
        ``val_batch`` s long."""
        one_pass = val_batch * self.val_count + self.val_end
        once = self.load + self.probe + self.save * self.saves
        return once + train_batch * self.train_count + one_pass * self.validations

    def job_time(self, what: str) -> JobTime:
        """The time of the job (named ``what``) at the median batch, from the fastest to the
        slowest batch, and how it was counted."""
        val = self.val or (0.0,)
        train, validation = statistics.median(self.train), statistics.median(val)
        return JobTime(
            self.seconds(train, validation),
            self.seconds(min(self.train), min(val)),
            self.seconds(max(self.train), max(val)),
            f"{what} timed here on {self.timed_on}: model and data loaded in "
            f"{duration(self.load)}, the epoch-0 isotropy probe {duration(self.probe)}, "
            f"{counted(len(self.train), 'training batch', 'training batches')} "
            f"{duration(train)} each (the median) x {self.train_count}, "
            f"{counted(len(self.val), 'validation batch', 'validation batches')} "
            f"{duration(validation)} each x {self.val_count} a pass and "
            f"{duration(self.val_end)} at its end (metrics, isotropy) x "
            f"{counted(self.validations, 'pass', 'passes')}, a checkpoint written in "
            f"{duration(self.save)} x {self.saves}; the range from the fastest to the slowest "
            "batch"
            + (
                "; the probe in the first wave only (later jobs read its measures)"
                if self.probe_shared
                else ""
            ),
            self.probe if self.probe_shared else 0.0,
        )


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
    """The time of ``jobs`` such jobs, ``at_once`` at a time, as the preview says it: each wave
    as long as one job, but for what only the first wave pays."""
    waves = math.ceil(jobs / max(1, at_once))
    saved = (waves - 1) * job.first_wave_only
    return (
        f"about {duration(waves * job.typical - saved)} (from {duration(waves * job.low - saved)} "
        f"to {duration(waves * job.high - saved)}) for {counted(jobs, 'job')}, {at_once} at once, "
        f"each about {duration(job.typical)}; measured from {job.measured_from}"
    )


def duration(seconds: float) -> str:
    """``seconds`` in the unit that reads best: 42 s, 3.5 min, 36 h, 3 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size * (2 if unit == "days" else 1):  # 36 h, not 1.5 days
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"
