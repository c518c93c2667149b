"""What one job of a search gave, read from its ``results.json`` whichever launcher ran it, and a
trial's value over its seeds (the rules: docs/search.md#how-it-works, "Failed runs count"). A job
that has not ended is no result at all: its trial waits.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotune.errors import IsotuneError
from isotune.record.results import RESULTS_FILE
from isotune.search.checks import changes_a_run
from isotune.sweeps.failures import learned_of
from isotune.sweeps.intention_to_treat import UNENDED, trivial_of
from isotune.sweeps.runs import Run


@dataclass(frozen=True)
class JobOutcome:
    """One job's end: its score (None when it has none) or why it has none."""

    job_dir: Path
    seed: int
    score: float | None
    learned: bool | None
    status: str
    error: str | None
    trivial: float | None = None  # its dev set's trivial predictor's score (results.json's)

    @property
    def completed(self) -> bool:
        return self.score is not None

    @property
    def ended(self) -> bool:
        """Completed or failed for good: not running, interrupted or never started."""
        return self.status not in UNENDED

    def as_record(self) -> dict[str, Any]:
        """Plain values, kept with the trial in the study (Optuna's user attributes)."""
        return {**dataclasses.asdict(self), "job_dir": str(self.job_dir)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> JobOutcome:
        return cls(**{**record, "job_dir": Path(record["job_dir"])})


@dataclass(frozen=True)
class TrialRow:
    """A finished trial as the report lists it: Optuna's state name (COMPLETE, PRUNED, FAIL), its
    searched values, its value (None unless COMPLETE), its jobs and, for FAIL, why."""

    number: int
    state: str
    values: Mapping[str, Any]
    value: float | None
    jobs: Sequence[JobOutcome]
    reason: str = ""


def read_outcome(job_dir: Path, seed: int) -> JobOutcome:
    """The outcome of the job that ran in ``job_dir`` with ``seed``."""
    path = Path(job_dir) / RESULTS_FILE
    if not path.is_file():
        return JobOutcome(job_dir, seed, None, None, "missing", f"no {RESULTS_FILE} in {job_dir}")
    run = Run.read(path)
    trivial = trivial_of(run)
    if not run.completed:
        error = run.result.get("error")
        return JobOutcome(job_dir, seed, None, None, str(run.status), error, trivial)
    metric = run.result.get("primary_metric")
    score = (run.result.get("best") or {}).get(metric)
    if not isinstance(score, (int, float)) or not math.isfinite(score):
        error = f"best dev {metric} is {score!r} in {path}"
        return JobOutcome(job_dir, seed, None, None, "no score", error, trivial)
    return JobOutcome(job_dir, seed, float(score), learned_of(run), "completed", None, trivial)


def completed_before(job_dir: Path, seed: int, overrides: Sequence[str]) -> JobOutcome | None:
    """The outcome of a job whose run already completed in ``job_dir`` with these ``overrides``
    (bar those that change no score), else None; one of other overrides is refused."""
    outcome = read_outcome(job_dir, seed)
    if not outcome.completed:
        return None
    ran = Run.read(Path(job_dir) / RESULTS_FILE).overrides
    if set(filter(changes_a_run, ran)) != set(filter(changes_a_run, overrides)):
        raise IsotuneError(
            f"{job_dir} holds a completed run of other overrides ({' '.join(ran)}) than this "
            f"search's job there ({' '.join(overrides)}): the search folder holds another "
            "search. Fix: give this search its own folder (hydra.sweep.dir=... or another "
            "hydra.sweeper.study_name), or move that folder away."
        )
    return outcome


def evaluated_on(job_dirs: Iterable[Path]) -> str:
    """The data the runs in ``job_dirs`` evaluated on (``data.evaluated_on``), distinct values
    joined; a run that says nothing (recorded before ``data.tuning_split``) evaluated on dev."""
    seen = dict.fromkeys(
        _evaluated_on(path)
        for path in (Path(job_dir) / RESULTS_FILE for job_dir in job_dirs)
        if path.is_file()
    )
    return "; ".join(seen) or "dev"


def evaluated_on_by_run(folder: Path) -> dict[Path, str]:
    """Each results.json below ``folder`` and the data its run evaluated on, as
    :func:`evaluated_on` reads it."""
    return {path: _evaluated_on(path) for path in sorted(Path(folder).rglob(RESULTS_FILE))}


def _evaluated_on(path: Path) -> str:
    return (Run.read(path).result.get("data") or {}).get("evaluated_on", "dev")


def trial_value(outcomes: Sequence[JobOutcome]) -> float:
    """The median score over a trial's seeds (each job completed)."""
    return statistics.median(outcome.score for outcome in outcomes)  # type: ignore[misc]


def median_score(runs: Sequence[JobOutcome]) -> float | None:
    """The median score of the ``runs`` that have one; None where none has."""
    scores = [run.score for run in runs if run.score is not None]
    return statistics.median(scores) if scores else None


def shown(value: float | None) -> str:
    """A score or a p as the search's report shows it: four places, or "none"."""
    return "none" if value is None else f"{value:.4f}"


def failure_reason(outcome: JobOutcome) -> str:
    """Why a job leaves its trial without a value, in one line."""
    first = " ".join(str(outcome.error or "").split())[:300]
    return f"seed {outcome.seed} ({outcome.job_dir}): {outcome.status}: {first}"
