"""A sweep that cannot fit on its disk is refused before any job starts (docs/sweeps.md#disk-space):
a cluster's quota fills silently mid-sweep, and a 160-run study of BERT-base with whole
checkpoints needs about 400 GB. A sweep typed again is sized by the jobs it has left: its
completed runs take their disk already, counted in the free space.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from omegaconf import DictConfig

from isotune.errors import IsotuneError
from isotune.model.encoders import parameter_count
from isotune.sweeps.footprint import RunFootprint, readable, sweep_footprint
from isotune.sweeps.gpu_slots import plan_slots
from isotune.sweeps.runs import load_runs
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)


def check_sweep_fits(
    sweep_dir: Path, jobs: Sequence[DictConfig], at_once: int, completed: int = 0
) -> None:
    """Refuse a sweep of ``jobs`` (the composed configs of those left to run; ``completed``: how
    many completed before) that cannot fit under ``sweep_dir`` with ``at_once`` running."""
    if not jobs or not jobs[0].get("check_free_space", True):
        return
    at_once = max(1, min(at_once, len(jobs)))
    need = _need(jobs, at_once, keep=None)
    made = next(path for path in [sweep_dir, *sweep_dir.parents] if path.exists())  # made later
    free = shutil.disk_usage(made).free
    keeps = sorted({str(job.checkpoint.keep) for job in jobs})
    left = counted(len(jobs), "job")
    if completed:
        left += f" left ({completed} completed before)"
    log.info(
        "The sweep needs about %s for its %s; checkpoint.keep=%s, %d at once; %s free in %s",
        readable(need),
        left,
        ",".join(keeps),
        at_once,
        readable(free),
        sweep_dir,
    )
    if need <= free:
        return
    runs = [_footprint(job, None) for job in jobs]
    raise IsotuneError(
        f"This sweep needs about {readable(need)} in {sweep_dir}, but its file system has "
        f"{readable(free)} free: {left} with "
        f"checkpoint.keep={','.join(keeps)}, "
        f"up to {readable(max(run.completed for run in runs))} each once completed and "
        f"{readable(max(run.peak for run in runs))} while one runs, {at_once} at once. Ways out: "
        f"checkpoint.keep=slim (about {readable(_need(jobs, at_once, 'slim'))}) or "
        f"checkpoint.keep=none (about {readable(_need(jobs, at_once, 'none'))}, no model kept); "
        "another hydra.sweep.dir on a file system with room; fewer jobs at once "
        "(hydra.launcher.array_parallelism or hydra.launcher.n_jobs), or fewer jobs; or, "
        "knowing the estimate is too high, check_free_space=false."
    )


def completed_runs(folder: Path) -> int:
    """How many runs below ``folder`` completed: a study or search typed again runs them no more."""
    return sum(run.completed for run in load_runs(folder)) if folder.is_dir() else 0


def _need(jobs: Sequence[DictConfig], at_once: int, keep: str | None) -> int:
    return sweep_footprint([_footprint(job, keep) for job in jobs], at_once)


def _footprint(job: DictConfig, keep: str | None) -> RunFootprint:
    """One job's footprint, with its own ``checkpoint.keep`` or ``keep``."""
    return RunFootprint.of(
        _parameters(str(job.model.name_or_path)), str(job.adapt.name), keep or job.checkpoint.keep
    )


@cache
def _parameters(name_or_path: str) -> int:
    """The encoder's parameters; 0 for one that cannot be read now (its jobs report it)."""
    try:
        return parameter_count(name_or_path)
    except IsotuneError as error:
        log.warning(
            "Not counting the checkpoints of %s in the sweep's size: %s", name_or_path, error
        )
        return 0


def jobs_at_once(launcher: DictConfig, jobs: int) -> int:
    """How many of ``jobs`` the launcher runs at once (docs/sweeps.md#disk-space)."""
    target = str(launcher.get("_target_", ""))
    if target.endswith("BasicLauncher"):
        return 1
    if target.endswith("GpusLauncher") and not launcher.get("n_jobs"):  # one job a slot
        return min(jobs, len(plan_slots(launcher.get("gpus"), launcher.jobs_per_gpu, 1)))
    if "array_parallelism" in launcher and launcher.get("jobs_per_gpu", 1) > 1:
        slots = max(launcher.get("gpus_per_node") or 1, 1) * launcher.jobs_per_gpu
        allocations = min(launcher.get("allocations") or jobs, launcher.array_parallelism)
        return min(jobs, (launcher.get("jobs_per_allocation") or slots) * allocations)
    for key in ("array_parallelism", "n_jobs"):
        value = launcher.get(key)
        if isinstance(value, int) and value > 0:
            return min(value, jobs)
    return jobs
