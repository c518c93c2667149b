"""How much disk a sweep takes: measured (a folder's blocks) and expected before it starts.

A run's folder is mostly its checkpoints (docs/training.md#what-a-run-keeps): float32 weights,
times 3 with AdamW's moments in a whole checkpoint, at most :data:`ADAPTED_SHARE` of the model
for ``lora`` or ``frozen``; while it runs it peaks as last.ckpt is replaced (old and new whole,
beside best.ckpt). A sweep holds its completed folders and its running jobs' peaks. Stdlib only:
the aggregate and the sweep's summary read sizes without torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BYTES_PER_PARAMETER = 4  # float32 weights and moments
ADAPTED_SHARE = 0.02  # what a lora or frozen checkpoint holds of the model, at most
RECORDS = 8 * 2**20  # results.json, metrics.csv, the logs and figures of one run, generously


def disk_used(folder: Path) -> int:
    """Bytes of disk the files below ``folder`` take (their blocks; links not followed)."""
    used = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                used += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:  # removed while walking (a running job's temporary file)
                continue
    return used


def readable(size: float) -> str:
    """``size`` bytes as a short decimal figure: 519 MB, 1.3 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.3g} {unit}"
        size /= 1000
    return f"{size:.3g} TB"


@dataclass(frozen=True)
class RunFootprint:
    """One run's folder while it goes (at its peak) and once it has completed, in bytes."""

    peak: int
    completed: int

    @classmethod
    def of(cls, parameters: int, adapt: str, keep: str) -> RunFootprint:
        """For an encoder of ``parameters`` trained with ``adapt`` and ``checkpoint.keep``."""
        model = parameters * BYTES_PER_PARAMETER * (1 if adapt == "full" else ADAPTED_SHARE)
        whole = 3 * model  # the weights and AdamW's two moments
        best = whole if keep == "full" else model
        completed = {"slim": model, "none": 0}.get(keep, 2 * whole)  # full, or a bad value
        return cls(peak=int(2 * whole + best) + RECORDS, completed=int(completed) + RECORDS)


def sweep_footprint(runs: list[RunFootprint], at_once: int) -> int:
    """Bytes a sweep of ``runs`` takes at its fullest: every run completed but the ``at_once``
    largest, which are at their peak."""
    ranked = sorted(runs, key=lambda run: run.peak - run.completed, reverse=True)
    running, completed = ranked[:at_once], ranked[at_once:]
    return sum(run.peak for run in running) + sum(run.completed for run in completed)
