"""The intention-to-treat sensitivity of a paired test: failed runs at their trivial score.

A paired test counts only runs with a score, so a setting that breaks training more often is
flattered by its failures leaving the test. :func:`intention_to_treat_line` gives the same test
with each run that ended without a score counted at its dev set's trivial score as its
``results.json`` records it; a run that has not ended is not counted. Sweep tables, a search's
held-out report and a study's comparisons all count it here; a search trial is never given a
made-up value (:mod:`isotune.search.outcomes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from isotune.sweeps.runs import Run
from isotune.sweeps.statistics import PairedComparison, paired_comparison
from isotune.tracking.reporting import counted

UNENDED = ("running", "interrupted", "missing")  # a job's statuses that are not its end
INTENTION_TO_TREAT = "Intention to treat (failed runs at their trivial score"


def trivial_of(run: Run) -> float | None:
    """The score of the run's dev set's trivial predictor as its results.json records it
    (``trivial.score``: the majority class, the mean predictor of a regression); None where it
    records none (a run that ended before validation said which examples it scores)."""
    score = (run.result.get("trivial") or {}).get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        return None
    return float(score)


class ReportRun(Protocol):
    """A run as the intention-to-treat line reads it (a search's
    :class:`~isotune.search.outcomes.JobOutcome`, a study's
    :class:`~isotune.study.results.StudyRun`, a sweep table's :class:`TableRun`)."""

    @property
    def seed(self) -> Hashable: ...
    @property
    def score(self) -> float | None: ...
    @property
    def trivial(self) -> float | None: ...
    @property
    def status(self) -> str: ...


@dataclass(frozen=True)
class TableRun:
    """A run of the sweep tables as the intention-to-treat line reads it: its pairing seed, its
    score (None: it ended without one) and trivial score, in the tables' units, and its status."""

    seed: Hashable
    score: float | None
    trivial: float | None
    status: str


def intention_to_treat_score(run: ReportRun) -> float | None:
    """A run's score as the intention-to-treat line counts it: its score; where it ended
    without one (failed, refused, no finite score), its trivial score, what a run that learned
    nothing scores; None for a run that has not ended (missing, interrupted, running), which is
    no outcome of its setting yet, and for a failed run that recorded no trivial score."""
    if run.score is not None:
        return run.score
    return None if run.status in UNENDED else run.trivial


def intention_to_treat_comparison(
    baseline: Iterable[ReportRun], other: Iterable[ReportRun]
) -> tuple[PairedComparison, int]:
    """``other`` - ``baseline`` paired over the seeds where both have an intention-to-treat
    score, and how many of the runs paired there count at their trivial score (0: the
    comparison is the plain one)."""
    scores, trivial_seeds = [], []
    for runs in (baseline, other):
        counted_runs = {run.seed: run for run in runs if intention_to_treat_score(run) is not None}
        scores.append({seed: intention_to_treat_score(run) for seed, run in counted_runs.items()})
        trivial_seeds.append({seed for seed, run in counted_runs.items() if run.score is None})
    comparison = paired_comparison(*scores)
    return comparison, sum(len(seeds & set(comparison.seeds)) for seeds in trivial_seeds)


def intention_to_treat_line(comparison: PairedComparison, substituted: int) -> str:
    """The sensitivity line beside a paired test whose failed runs had no score: the same test
    with ``substituted`` of its runs counted at their trivial score (see
    :func:`intention_to_treat_comparison`); "" where none was, which leaves the report as it
    was."""
    if not substituted:
        return ""
    c = comparison

    def number(value: float | None) -> str:
        return "none" if value is None else f"{value:.4f}"

    interval = "none" if c.t_interval is None else "[{}, {}]".format(*map(number, c.t_interval))
    return (
        f"{INTENTION_TO_TREAT}; {counted(substituted, 'run')} in {counted(c.n, 'pair')}): "
        f"mean {number(c.mean_difference)}, 95% t interval {interval}, "
        f"paired t-test p {number(c.ttest_p)}, Wilcoxon p {number(c.wilcoxon_p)}."
    )


def ended_without_score(runs: Sequence[Run], key: Callable[[Run], Hashable | None]) -> list[Run]:
    """Of each ``key`` (configuration, task, seeds) that no run of ``runs`` completed, its
    latest run, where that one ended without completing (failed, refused) and recorded its
    trivial score: the runs the sweep tables' intention-to-treat line counts at it. A key whose
    latest run has not ended (running, interrupted: waiting to be rerun or requeued) has no
    failure; a run ``key`` cannot place (None: a record without its settings) is left out."""
    done = {key(run) for run in runs if run.completed}
    latest: dict[Hashable, Run] = {}
    for run in runs:
        identity = None if run.completed else key(run)
        if identity is None or identity in done:
            continue
        if identity not in latest or _last_update(run) >= _last_update(latest[identity]):
            latest[identity] = run
    return [
        run for run in latest.values() if run.status not in UNENDED and trivial_of(run) is not None
    ]


def _last_update(run: Run) -> str:
    return str(run.result.get("updated_at") or run.result.get("finished_at") or "")
