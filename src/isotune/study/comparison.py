"""The statistics of a study: its stated test (:func:`stated_answer`, outside the Holm family),
each arm against the baseline arm on each task (Holm-adjusted over every (task, arm), with power
figures and intention to treat beside it), the arms across tasks (:func:`across_tasks`,
descriptions with no test of their own), and the geometry beside the score at the last epoch
(:func:`geometry_correlations`). What each number means, and why it is computed so:
docs/study.md#the-study-report.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from isotune.study.results import GEOMETRY, REPORT, ArmOutcome
from isotune.study.stated import StatedTest
from isotune.study.stated_looks import Looks, seeds_held_back, stated_scores
from isotune.sweeps.correlation import Correlation, spearman, stratified_spearman
from isotune.sweeps.intention_to_treat import (
    intention_to_treat_comparison,
    intention_to_treat_line,
)
from isotune.sweeps.power import minimum_detectable_difference, pairs_needed
from isotune.sweeps.statistics import PairedComparison, holm, paired_comparison

HOLM_FAMILY = "every arm against the baseline arm on every task"

ALL_TASKS = "all tasks"


def _by_task(outcomes: Sequence[ArmOutcome]) -> dict[str, dict[str, ArmOutcome]]:
    tasks: dict[str, dict[str, ArmOutcome]] = {}
    for outcome in outcomes:
        tasks.setdefault(outcome.task, {})[outcome.arm] = outcome
    return tasks


def arm_scores(
    arms: Mapping[str, ArmOutcome], arm: str, seeds: Collection[int] | None = None
) -> dict[int, float]:
    """``arm``'s held-out ``{seed: score}`` among a task's ``arms`` (by name), on ``seeds`` alone
    where given: one side of a paired comparison, the task comparisons' and the stated test's
    alike; empty for an arm without an outcome on the task (its search has not run)."""
    if arm not in arms:
        return {}
    scores = arms[arm].held_out_scores()
    return {seed: score for seed, score in scores.items() if seeds is None or seed in seeds}


def shared_scores(outcomes: Sequence[ArmOutcome]) -> dict[tuple[str, str], dict[int, float]]:
    """Each (task, arm)'s held-out ``{seed: score}`` on the report seeds every arm of its task
    has a score on: medians and ranks of arms compared on the same seeds."""
    shared = {}
    for task, arms in _by_task(outcomes).items():
        scores = {arm: outcome.held_out_scores() for arm, outcome in arms.items()}
        seeds = set.intersection(*(set(by_seed) for by_seed in scores.values()))
        for arm, by_seed in scores.items():
            shared[task, arm] = {seed: by_seed[seed] for seed in sorted(seeds)}
    return shared


def arm_table(outcomes: Sequence[ArmOutcome], maximize: bool = True) -> pd.DataFrame:
    """Per (task, arm): its best trial, its held-out median and spread over the seeds every arm of
    the task has (``shared_scores``), its failed runs, the optimism (``maximize``: the score's
    direction), and the median of each geometry measure over its held-out runs."""
    sign = 1 if maximize else -1
    shared = shared_scores(outcomes)
    rows = []
    for outcome in outcomes:
        scores = list(shared[outcome.task, outcome.arm].values())
        median = statistics.median(scores) if scores else None
        rows.append(
            {
                "task": outcome.task,
                "arm": outcome.arm,
                "best_params": dict(outcome.best_params),
                "tuned_value": outcome.tuned_value,
                "held_out_median": median,
                "held_out_std": statistics.stdev(scores) if len(scores) > 1 else None,
                "held_out_min": min(scores) if scores else None,
                "held_out_max": max(scores) if scores else None,
                "held_out_runs": len(scores),
                "failed_to_learn": sum(run.learned is False for run in outcome.held_out),
                "without_score": sum(run.score is None for run in outcome.held_out),
                "report_runs": len(outcome.held_out),
                "optimism": None
                if median is None or outcome.tuned_value is None
                else sign * (outcome.tuned_value - median),
                "final_median": _median([run.final_score for run in outcome.held_out]),
                **{
                    measure: _median([run.geometry.get(measure) for run in outcome.held_out])
                    for measure in GEOMETRY
                },
            }
        )
    return pd.DataFrame(rows, dtype=object)


def _median(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def task_comparisons(outcomes: Sequence[ArmOutcome], baseline: str) -> pd.DataFrame:
    """Per task and arm other than ``baseline``: the paired comparison arm - baseline,
    Holm-adjusted over every comparison of the study with a pair (:data:`HOLM_FAMILY`), its
    power figures, and its intention-to-treat sensitivity (``itt_*``; ``itt_substituted`` 0
    where no report run failed)."""
    compared, sensitivity = {}, {}
    for task, arms in _by_task(outcomes).items():
        reference = arm_scores(arms, baseline)
        reference_runs = arms[baseline].held_out if baseline in arms else ()
        for arm, outcome in arms.items():
            if arm != baseline:
                compared[task, arm] = paired_comparison(reference, arm_scores(arms, arm))
                sensitivity[task, arm] = intention_to_treat_comparison(
                    reference_runs, outcome.held_out
                )
    family = {key: c for key, c in compared.items() if c.n}
    wilcoxon_holm, m = holm({key: c.wilcoxon_p for key, c in family.items()})
    ttest_holm, _ = holm({key: c.ttest_p for key, c in family.items()})
    rows = []
    for (task, arm), c in compared.items():
        low, high = c.t_interval or (None, None)
        itt, substituted = sensitivity[task, arm]
        itt_low, itt_high = (itt.t_interval or (None, None)) if substituted else (None, None)
        rows.append(
            {
                "task": task,
                "arm": arm,
                "n": c.n,
                "mean_difference": c.mean_difference,
                "t_low": low,
                "t_high": high,
                "wilcoxon_p": c.wilcoxon_p,
                "wilcoxon_n": c.wilcoxon_n,
                "wilcoxon_p_holm": wilcoxon_holm.get((task, arm)),
                "ttest_p": c.ttest_p,
                "ttest_p_holm": ttest_holm.get((task, arm)),
                "holm_family": f"{HOLM_FAMILY} ({m})",
                "std_of_differences": c.spread,
                "detectable_difference": None
                if c.spread is None
                else minimum_detectable_difference(c.spread, c.n),
                "pairs_needed": None
                if c.spread is None or not c.mean_difference
                else pairs_needed(c.mean_difference, c.spread),
                "note": c.note,
                "itt_substituted": substituted,
                "itt_n": itt.n if substituted else None,
                "itt_mean_difference": itt.mean_difference if substituted else None,
                "itt_t_low": itt_low,
                "itt_t_high": itt_high,
                "itt_ttest_p": itt.ttest_p if substituted else None,
                "itt_wilcoxon_p": itt.wilcoxon_p if substituted else None,
                "intention_to_treat": intention_to_treat_line(itt, substituted),
            }
        )
    return pd.DataFrame(rows, dtype=object)


def average_ranks(outcomes: Sequence[ArmOutcome], maximize: bool = True) -> dict[str, float]:
    """Each arm's mean over tasks of its rank by held-out median over the seeds every arm of the
    task has (1: best, ties share their mean rank), over the tasks where it has a median; arms
    without one on any task are left out."""
    ranks: dict[str, list[float]] = {}
    shared = shared_scores(outcomes)
    for task, arms in _by_task(outcomes).items():
        medians = {
            arm: statistics.median(scores.values()) for arm in arms if (scores := shared[task, arm])
        }
        if not medians:
            continue
        values = np.array(list(medians.values()), dtype=float)
        ranked = stats.rankdata(-values if maximize else values)
        for arm, rank in zip(medians, ranked, strict=True):
            ranks.setdefault(arm, []).append(float(rank))
    return {arm: float(np.mean(r)) for arm, r in ranks.items()}


def metrics_by_task(outcomes: Sequence[ArmOutcome]) -> dict[str, str]:
    """Each task's primary metric as its report runs record it (tasks without one left out):
    what its Δ is a difference of."""
    metrics: dict[str, str] = {}
    for outcome in outcomes:
        for run in outcome.held_out:
            if run.metric is not None:
                metrics.setdefault(outcome.task, run.metric)
    return metrics


def across_tasks(
    outcomes: Sequence[ArmOutcome], baseline: str, maximize: bool = True
) -> pd.DataFrame:
    """Per arm: its mean paired difference on each task, their mean, and its average rank.
    Descriptions, not tests: a test over every (task, seed) pair would count a task's pairs as
    independent though they share its tuned settings and scale, outside the Holm family."""
    per_task = task_comparisons(outcomes, baseline)
    tasks = list(_by_task(outcomes))
    ranks = average_ranks(outcomes, maximize)
    arms = list(dict.fromkeys(outcome.arm for outcome in outcomes))
    rows = []
    for arm in arms:
        row: dict[str, object] = {"arm": arm}
        if arm != baseline:
            mine = per_task.loc[per_task["arm"] == arm].set_index("task")["mean_difference"]
            differences = {task: mine.get(task) for task in tasks}
            present = [d for d in differences.values() if d is not None and not pd.isna(d)]
            row.update(
                {
                    **{f"difference_{task}": value for task, value in differences.items()},
                    "mean_of_differences": float(np.mean(present)) if present else None,
                    "tasks": len(present),
                }
            )
        row["average_rank"] = ranks.get(arm)
        rows.append(row)
    return pd.DataFrame(rows, dtype=object)


POOLED, WITHIN_ARMS = "pooled", "within arms"  # the two scopes of a geometry correlation


def geometry_correlations(outcomes: Sequence[ArmOutcome]) -> pd.DataFrame:
    """Spearman's rho of each geometry measure against the score over the held-out runs, per task
    (and over all, centred per task), pooled over the arms, which mixes what sets arms apart with
    run-to-run variation, and within arms: under one arm's settings, did a more isotropic run
    score better?"""
    rows = []
    every: dict[str, list[tuple[float, float, tuple[str, str]]]] = {m: [] for m in GEOMETRY}
    for task, arms in _by_task(outcomes).items():
        for measure in GEOMETRY:
            points = geometry_points(arms.values(), measure)
            x, y = [p[0] for p in points], [p[1] for p in points]
            rows.append(_correlation_row(task, measure, POOLED, spearman(x, y)))
            within = stratified_spearman(x, y, [p[2] for p in points])
            rows.append(_correlation_row(task, measure, WITHIN_ARMS, within))
            if points:
                mx, my = np.median(x), np.median(y)
                every[measure] += [(px - mx, py - my, (task, arm)) for px, py, arm in points]
    for measure, points in every.items() if len(_by_task(outcomes)) > 1 else ():
        x, y = [p[0] for p in points], [p[1] for p in points]
        rows.append(_correlation_row(ALL_TASKS, measure, POOLED, spearman(x, y)))
        within = stratified_spearman(x, y, [p[2] for p in points])
        rows.append(_correlation_row(ALL_TASKS, measure, WITHIN_ARMS, within))
    return pd.DataFrame(rows, dtype=object)


def geometry_points(outcomes: Iterable[ArmOutcome], measure: str) -> list[tuple[float, float, str]]:
    """(measure, score, arm) of every held-out run with both, each read at the run's last epoch
    (:class:`~isotune.study.results.StudyRun`): one fixed point, not the epoch the score chose."""
    return [
        (float(run.geometry[measure]), float(run.final_score), outcome.arm)
        for outcome in outcomes
        for run in outcome.held_out
        if run.final_score is not None and measure in run.geometry
    ]


def _correlation_row(task: str, measure: str, scope: str, correlation: Correlation) -> dict:
    rho, p, n, note = correlation
    return {
        "task": task, "measure": measure, "scope": scope, "n": n, "rho": rho, "p": p,
        "note": note,
    }  # fmt: skip


@dataclass(frozen=True)
class StatedAnswer:
    """The stated test on the study's runs: ``comparison`` is None until every stated seed has a
    pair, and always for a sequential test, which its frozen ``looks`` answer; ``at_trivial``:
    (arm, seed, folder relative to the study) of the runs counted at their trivial score;
    ``held_back``: :func:`isotune.study.stated_looks.seeds_held_back`."""

    test: StatedTest
    comparison: PairedComparison | None
    without_pair: tuple[int, ...]
    started_before: tuple[tuple[int, str], ...]
    looks: Looks | None = None
    held_back: tuple[int, ...] = ()
    at_trivial: tuple[tuple[str, int, str], ...] = ()

    def as_record(self) -> dict[str, Any]:
        c = self.comparison
        return {
            **self.test.as_record(),
            **(
                {"sequential": {**_looks_record(self.looks), "held_back": list(self.held_back)}}
                if self.looks is not None
                else {}
            ),
            "pairs": 0 if c is None else c.n,
            "without_pair": list(self.without_pair),
            "started_before": [{"seed": s, "started_at": at} for s, at in self.started_before],
            "at_trivial_score": [
                {"arm": arm, "seed": seed, "run": run} for arm, seed, run in self.at_trivial
            ],
            "mean_difference": None if c is None else c.mean_difference,
            "interval": None if c is None or c.t_interval is None else list(c.t_interval),
            "ttest_p": None if c is None else c.ttest_p,
            "wilcoxon_p": None if c is None else c.wilcoxon_p,
            "wilcoxon_n": None if c is None else c.wilcoxon_n,
        }


def stated_answer(
    test: StatedTest, outcomes: Sequence[ArmOutcome], looks: Looks | None = None
) -> StatedAnswer:
    """The stated ``test`` on its seeds alone, at its alpha, once every stated seed has a pair (a
    test on part of them would be a look the statement did not plan); a sequential test is
    answered by its frozen ``looks`` alone. A stated run that failed twice counts at its trivial
    score (:func:`isotune.study.stated_looks.stated_scores`), and the answer names it."""
    stated = stated_scores(test, outcomes)
    early: dict[int, str] = {}
    for run in stated.runs.values():
        if test.started_before(run.started_at):
            early[run.seed] = min(early.get(run.seed, run.started_at), run.started_at)
    named = tuple((run.arm, run.seed, run.job_dir) for run in stated.at_trivial)
    scores = stated.scores
    paired = scores[test.baseline].keys() & scores[test.arm].keys()
    without = tuple(seed for seed in test.seeds if seed not in paired)
    if test.sequential:
        if looks is None:
            raise ValueError("a sequential stated test is answered by its frozen looks")
        ran = {run.seed for o in outcomes if o.task == test.task for run in o.held_out}
        held_back = tuple(s for s in seeds_held_back(test, looks) if s in ran)
        return StatedAnswer(
            test, None, without, tuple(sorted(early.items())), looks, held_back, named
        )
    comparison = (
        None
        if without
        else paired_comparison(scores[test.baseline], scores[test.arm], confidence=1 - test.alpha)
    )
    return StatedAnswer(test, comparison, without, tuple(sorted(early.items())), at_trivial=named)


def exploratory_outcomes(
    outcomes: Sequence[ArmOutcome], answer: StatedAnswer | None
) -> list[ArmOutcome]:
    """``outcomes`` as the exploratory tables take them: without the report runs, of every arm
    of the stated task, on the stated seeds the ``answer`` holds back (the sweeper runs those
    seeds on every arm of the task together, one look at a time)."""
    if answer is None or not answer.held_back:
        return list(outcomes)
    held_back = set(answer.held_back)
    return [
        replace(o, runs=tuple(r for r in o.runs if r.phase != REPORT or r.seed not in held_back))
        if o.task == answer.test.task
        else o
        for o in outcomes
    ]


def _looks_record(looks: Looks) -> dict[str, Any]:
    """A sequential test's locked plan and frozen looks, as the study's results.yaml keeps them
    (the pairs' scores stay in the journal: a stated score is shown at its look)."""
    decided = looks.decided
    registration = looks.registration
    return {
        "plan": {**registration.fields(), "digest": registration.digest},
        "statistic": registration.statistic.describe(),
        "looks_taken": [
            {
                "look": d.look,
                "pairs": d.n,
                "boundary": d.boundary,
                "mean_difference": d.mean,
                "sd": d.sd,
                "interval": list(d.interval),
                "decision": d.decision,
                "alpha_spent": d.alpha_spent,
                "exact_p": d.exact_p,
                "nominal_level": d.nominal,
                "taken_at": frozen.taken_at,
                "recorded": frozen.recorded,
            }
            for d, frozen in zip(looks.taken, looks.frozen, strict=True)
        ],
        "decision": decided.decision if decided is not None else "go on",
        "pairs_in": looks.pairs,
        "pairs_due": looks.due,
        "waiting_for": list(looks.waiting),
        "changed_since_their_look": list(looks.changed),
    }
