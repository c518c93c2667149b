"""A study's searches run to their end, its sequential stated test one look at a time, then its
report: what the study sweeper does once Hydra has composed and checked it
(:mod:`hydra_plugins.isotune_launcher._study_search` adapts Hydra to this loop;
docs/study.md#looks-gate-the-runs-and-every-output-waits). The report is made from the folder
and its record, as ``python -m isotune.aggregate`` makes it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from isotune.search.loop import Launch, check_reports_complete, run_searches
from isotune.search.search import Search
from isotune.study.plan import StudyPlan
from isotune.study.preregistration import PLAN_FILE, Preregistration
from isotune.study.report import write_study_report
from isotune.study.results import read_arm, read_study
from isotune.study.stated import StatedTest
from isotune.study.stated_looks import (
    Looks,
    looks_in,
    report_seeds_due,
    stated_runs,
    take_looks,
)

log = logging.getLogger(__name__)


def run_study_searches(
    folder: Path,
    searches: Sequence[Search],
    plan: StudyPlan,
    stated: StatedTest | None,
    registration: Preregistration | None,
    launch: Launch,
    trials_at_once: int,
) -> None:
    """Run the study's ``searches`` through ``launch`` (a sequential ``stated`` test, locked in
    ``registration``, one look at a time), then write and print its report."""
    if registration is not None:
        _say_plan(registration, folder)
    looks = _stated_looks(folder, stated, registration)
    while True:  # a sequential stated test: one look's stated seeds at a time
        searches = _stated_seeds_due(searches, plan, stated, looks)
        run_searches(searches, launch, trials_at_once)
        if looks is None:
            break
        before, looks = looks, _stated_looks(folder, stated, registration)
        assert looks is not None
        if looks.decided is not None or looks.due == before.due:
            break
    study = read_study(folder)
    assert study is not None, f"{folder} holds the study's record"
    final = _stated_looks(folder, stated, registration, say=False)
    text = write_study_report(
        folder, study.outcomes, study.baseline, study.maximize, study.stated, final
    )
    log.info(f"\n{text}")
    if final is not None and final.decided is None and final.waiting:
        waiting = "\n".join(f"  - {why}" for why in final.waiting)
        log.warning(f"The stated test's look at {final.due} pairs waits for:\n{waiting}")
    check_reports_complete(searches)


def _say_plan(registration: Preregistration, folder: Path) -> None:
    plan = registration.plan
    log.info(
        f"The stated test decides in looks at {', '.join(map(str, plan.looks))} pairs, "
        f"boundaries {', '.join(f'{b:.3f}' for b in plan.boundaries)} "
        f"({plan.spending}, alpha {plan.alpha:g}, margin {plan.margin}), on "
        f"{registration.statistic.describe()}: the plan is locked in {folder / PLAN_FILE} "
        f"({registration.digest}), written before any stated run"
    )


def _stated_looks(
    folder: Path,
    stated: StatedTest | None,
    registration: Preregistration | None,
    say: bool = True,
) -> Looks | None:
    """The looks of the ``stated`` test's locked plan on the runs in ``folder``, each look whose
    pairs are now in taken and frozen first, and said (None: no sequential stated test)."""
    if stated is None or registration is None:
        return None
    outcomes = [
        read_arm(folder / stated.task / arm, stated.task, arm, stated.seeds)
        for arm in (stated.baseline, stated.arm)
        if stated_runs(stated, folder)  # before them, a search's journal may not be opened yet
    ]
    take_looks(folder, registration, stated, outcomes)
    looks = looks_in(folder, registration, stated, outcomes)
    if not say:
        return looks
    for d in looks.taken:
        low, high = d.interval
        log.info(
            f"Stated test, look {d.look} at {d.n} pairs (frozen): repeated interval [{low:.4f}, "
            f"{high:.4f}] (boundary {d.boundary:.3f}), exact p {d.exact_p}: {d.decision}"
        )
    for run in looks.changed:
        log.warning(f"{run} changed since its look was taken: the frozen decision stands")
    if looks.decided is not None:
        log.info(
            f"The stated test is decided ({looks.decided.decision}, look {looks.decided.look}): "
            "no more of its stated seeds run"
        )
    else:
        log.info(
            f"The stated test goes on: its stated seeds run up to its look at {looks.due} pairs"
        )
    return looks


def _stated_seeds_due(
    searches: Sequence[Search], plan: StudyPlan, stated: StatedTest | None, looks: Looks | None
) -> list[Search]:
    """The searches as they run now: on a sequential stated test's task, without the stated seeds
    beyond the pairs it needs."""
    if stated is None or looks is None:
        return list(searches)
    due = report_seeds_due(plan.report_seeds, stated, looks)
    return [
        Search(replace(search.settings, report_seeds=due), search.folder, search.sweep_record)
        if task == stated.task
        else search
        for search, (task, _) in zip(searches, plan.searches, strict=True)
    ]
