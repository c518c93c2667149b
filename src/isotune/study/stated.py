"""A study's stated test: the one comparison written down before its runs, answered on its own.

A study's report makes many comparisons (every arm against the baseline on every task, the
geometry beside the score); a reader who takes one of them home as the answer takes a number the
data chose. A study may state in advance the comparison it is run for
(``hydra.sweeper.stated``): the task, the arm against the baseline arm, the report seeds it is
answered on, the level, and when it was stated. The report then answers that test first, on those
seeds alone, and calls everything else exploratory; a stated seed whose run started before the
statement was written is named, since a result seen before the statement could have shaped it.

A stated test may also plan its looks (``looks``, with ``spending`` and an equivalence
``margin``): it is then sequential (:mod:`isotune.study.sequential`), decided at planned pair
counts of its stated seeds, which run one look at a time (:mod:`isotune.study.stated_looks`).

This module is the statement, read and checked before any job; its answer on the runs is
:func:`isotune.study.comparison.stated_answer`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from isotune.errors import IsotuneError
from isotune.search.checks import check_seed_list
from isotune.study.sequential import SPENDING

SETTING = "hydra.sweeper.stated"
KEYS = ("task", "arm", "baseline", "seeds", "level", "stated_at", "looks", "spending", "margin")
POINTS = 100  # a margin is typed in points (of a 0-1 metric) and stored in the metric's units
EXAMPLE = (
    f"'{SETTING}={{task:rte,arm:cosreg,seeds:[106,107,108],level:0.05,"
    'stated_at:"2026-12-04T22:55:40+00:00"}\''
)


@dataclass(frozen=True)
class StatedTest:
    """The comparison a study states before its runs: ``arm`` minus ``baseline`` on ``task``,
    on the report ``seeds``, two-sided at ``level``; ``stated_at`` is when it was written (a
    date, or a time with its UTC offset). With ``looks`` (pair counts, the first n of the
    sorted ``seeds`` at each) it is sequential, its ``spending`` function and equivalence
    ``margin`` (the metric's units; None: no equivalence stop) those of its plan."""

    task: str
    arm: str
    baseline: str
    seeds: tuple[int, ...]
    level: float
    stated_at: date | datetime
    looks: tuple[int, ...] = ()
    spending: str = "obf"
    margin: float | None = None

    @property
    def sequential(self) -> bool:
        return bool(self.looks)

    def as_record(self) -> dict[str, Any]:
        sequential = (
            {"looks": list(self.looks), "spending": self.spending, "margin": self.margin}
            if self.sequential
            else {}
        )
        return {
            "task": self.task,
            "arm": self.arm,
            "baseline": self.baseline,
            "seeds": list(self.seeds),
            "level": self.level,
            "stated_at": self.stated_at.isoformat(),
            **sequential,
        }

    def started_before(self, started_at: str | None) -> bool:
        """Whether a run that started at ``started_at`` (its ``results.json``'s) started before
        the statement: by the calendar day when only a day was stated."""
        if not started_at:
            return False
        started = datetime.fromisoformat(started_at)
        if isinstance(self.stated_at, datetime):
            return started < self.stated_at
        return started.date() < self.stated_at


def stated_test(
    settings: Mapping[str, Any] | None,
    tasks: Sequence[str],
    arms: Sequence[str],
    baseline_arm: str,
    report_seeds: Sequence[int],
) -> StatedTest | None:
    """The study's stated test from ``hydra.sweeper.stated`` (None: none stated), checked
    against the study's ``tasks``, ``arms`` and ``report_seeds``: refused, naming the value and
    the fix, before any job runs."""
    if settings is None:
        return None
    if not isinstance(settings, Mapping):
        raise IsotuneError(f"{SETTING}={settings!r} is not a mapping. Fix: {EXAMPLE}.")
    unknown = sorted(set(settings) - set(KEYS))
    if unknown:
        raise IsotuneError(
            f"{SETTING} has no key {', '.join(unknown)}: it takes {', '.join(KEYS)}. "
            f"Fix: {EXAMPLE}."
        )
    missing = [key for key in ("task", "arm", "seeds", "stated_at") if settings.get(key) is None]
    if missing:
        raise IsotuneError(
            f"{SETTING} does not say its {', '.join(missing)}: a stated test names its task, its "
            f"arm, the report seeds it is answered on and when it was stated. Fix: {EXAMPLE}."
        )
    task, arm = str(settings["task"]), str(settings["arm"])
    baseline = str(settings.get("baseline") or baseline_arm)
    if task not in tasks:
        raise IsotuneError(
            f"{SETTING}.task={task} is not a task of this study ({', '.join(tasks)}). Fix: "
            f"state one of them, or add it to the study's tasks (task={','.join([*tasks, task])})."
        )
    for key, name in (("arm", arm), ("baseline", baseline)):
        if name not in arms:
            raise IsotuneError(
                f"{SETTING}.{key}={name} is not an arm of this study ({', '.join(arms)}). Fix: "
                f"state one of them, or add it: 'hydra.sweeper.arms=[{','.join([*arms, name])}]'."
            )
    if arm == baseline:
        raise IsotuneError(
            f"{SETTING} compares arm {arm} with itself. Fix: state another arm, or another "
            f"baseline ({SETTING}.baseline, by default hydra.sweeper.baseline_arm)."
        )
    seeds = check_seed_list(
        settings["seeds"],
        f"{SETTING}.seeds",
        "Fix: name each stated seed once, e.g. seeds:[106,107,108].",
        "the stated test",
        paired=True,
    )
    outside = [seed for seed in seeds if seed not in report_seeds]
    if outside:
        raise IsotuneError(
            f"{SETTING}.seeds names {', '.join(map(str, outside))}, not among the study's "
            f"report seeds {list(report_seeds)}: the stated test is answered on held-out runs. "
            "Fix: add them to hydra.sweeper.report_seeds, or state seeds among them."
        )
    level = settings.get("level", 0.05)
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise IsotuneError(
            f"{SETTING}.level={level!r} is not a level between 0 and 1. Fix: e.g. level:0.05."
        )
    when = _when(settings["stated_at"])
    if settings.get("looks") is None:
        for key in ("spending", "margin"):
            if settings.get(key) is not None:
                raise IsotuneError(
                    f"{SETTING}.{key}={settings[key]!r} belongs to a sequential plan, and this "
                    f"stated test plans no looks. Fix: add {SETTING}.looks (the pair counts at "
                    f"which it looks, e.g. looks:[10,20,30,40]), or drop {key}."
                )
        return StatedTest(task, arm, baseline, seeds, float(level), when)
    looks = _looks(settings["looks"], seeds)
    spending = str(settings.get("spending") or "obf")
    if spending not in SPENDING:
        raise IsotuneError(
            f"{SETTING}.spending={spending} is no spending function this code knows. Fix: "
            "spending:obf (O'Brien-Fleming type, the default) or spending:pocock (Pocock type)."
        )
    margin = _margin(settings.get("margin"))
    return StatedTest(task, arm, baseline, seeds, float(level), when, looks, spending, margin)


def _looks(value: Any, seeds: Sequence[int]) -> tuple[int, ...]:
    """The pair counts of the looks, strictly increasing from 2, the last within the stated
    ``seeds`` (look k is the first n_k of them)."""
    fix = f"Fix: e.g. looks:[10,20,30,40] with at least 40 stated seeds ({SETTING}.seeds)."
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not value
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in value)
    ):
        raise IsotuneError(f"{SETTING}.looks={value!r} is not a list of pair counts. {fix}")
    looks = tuple(value)
    if looks[0] < 2 or any(b <= a for a, b in itertools.pairwise(looks)):
        raise IsotuneError(
            f"{SETTING}.looks={list(looks)} are not strictly increasing pair counts of at least "
            f"2 (a spread needs two pairs, and each look adds pairs). {fix}"
        )
    if looks[-1] > len(seeds):
        raise IsotuneError(
            f"{SETTING}.looks={list(looks)} looks at {looks[-1]} pairs, beyond the "
            f"{len(seeds)} stated seeds the study can run ({SETTING}.seeds): look k is on the "
            f"first n_k of them. Fix: state at least {looks[-1]} seeds (among "
            "hydra.sweeper.report_seeds), or end the looks at "
            f"{len(seeds)} pairs."
        )
    return looks


def _margin(points: Any) -> float | None:
    """The equivalence margin typed in points, in the metric's units (1 point = 0.01)."""
    if points is None:
        return None
    number = isinstance(points, int | float) and not isinstance(points, bool)
    if not number or not points > 0 or points == float("inf"):
        raise IsotuneError(
            f"{SETTING}.margin={points!r} is no equivalence margin: a positive number of points "
            "(the difference that would not matter; 1 point = 0.01 of a 0-1 metric). Fix: e.g. "
            "margin:1 for one point, or drop it for a plan without an equivalence stop."
        )
    if points / POINTS > 1:
        raise IsotuneError(
            f"{SETTING}.margin={points!r} points is {points / POINTS:g} in the metric's units, "
            "more than a whole 0-1 metric spans: likely a margin in other units. Fix: type it "
            "in points, e.g. margin:1 for a difference of 0.01."
        )
    return points / POINTS


def _when(value: Any) -> date | datetime:
    """``stated_at`` as a date (``2026-12-04``) or an aware time (``2026-12-04T22:55:40+00:00``,
    such as the time of the commit that wrote the statement down)."""
    if isinstance(value, datetime | date):  # YAML reads an unquoted date as one
        when = value
    else:
        try:
            when = (date if len(str(value)) == 10 else datetime).fromisoformat(str(value))
        except ValueError:
            when = None
    if when is None or (isinstance(when, datetime) and when.tzinfo is None):
        raise IsotuneError(
            f"{SETTING}.stated_at={value!r} is not a date (2026-12-04) or a time with its UTC "
            "offset (2026-12-04T22:55:40+00:00, as `git show -s --format=%cI <commit>` prints "
            "the commit that wrote the statement). Fix: give one, quoted."
        )
    return when
