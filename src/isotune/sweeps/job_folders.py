"""Which folder each job of a plain multirun runs in: the one that holds its configuration.

Hydra names job folders by place (``${hydra.job.num}``), so a sweep typed again with a seed or a
task added would start its jobs in folders holding other runs. Here a job goes to the folder
whose recorded overrides are its own, in any order and but for those that change no result
(:func:`~isotune.record.same_run.result_overrides`), so what completed stands and what was cut
continues; a new configuration takes the lowest free number, so a new sweep's folders are
Hydra's own 0, 1, 2, ... The isotune sweeper sets ``hydra.sweep.subdir`` from :func:`job_folders`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from isotune.record.results import RESULTS_FILE
from isotune.record.same_run import result_overrides
from isotune.sweeps.runs import HYDRA_OVERRIDES, Run


def recorded_run(folder: Path) -> Run | None:
    """The run ``folder`` records: its results.json's; a job that died before writing one, by
    Hydra's record of its overrides alone (not completed); None for a folder that records no
    job (or none at all)."""
    results = folder / RESULTS_FILE
    if results.is_file():
        return Run.read(results)
    if (folder / HYDRA_OVERRIDES).is_file():
        return Run(results, {})
    return None


def job_folders(sweep_dir: Path, jobs: Sequence[Sequence[str]]) -> list[str]:
    """The folder (a name in ``sweep_dir``) of each of ``jobs`` (each its overrides, in job
    order): the folder recording the same computation (a completed one first, where a job ran in
    several), else the lowest number that names nothing in ``sweep_dir`` nor an earlier job's
    folder. Two jobs with the same overrides (a value typed twice) get two folders."""
    recorded: dict[frozenset[str], list[tuple[bool, str]]] = {}
    existing = set()
    if sweep_dir.is_dir():
        for path in sweep_dir.iterdir():
            existing.add(path.name)
            run = recorded_run(path) if path.is_dir() else None
            if run is not None:
                recorded.setdefault(result_overrides(run.overrides), []).append(
                    (not run.completed, path.name)
                )
    for folders in recorded.values():
        folders.sort(key=lambda folder: (folder[0], _number(folder[1])))
    numbers = (str(n) for n in itertools.count() if str(n) not in existing)
    chosen = []
    for job in jobs:
        same = recorded.get(result_overrides(job))
        chosen.append(same.pop(0)[1] if same else next(numbers))
    return chosen


def _number(name: str) -> float:
    """A folder's number, for the order of folders recording one job (a name: after them)."""
    return int(name) if name.isdigit() else float("inf")
