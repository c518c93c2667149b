"""A study's stated test: the one comparison written down before its runs, answered on its own.

A study's report makes many comparisons (every arm against the baseline on every task, the
geometry beside the score); a reader who takes one of them home as the answer takes a number the
data chose. A study may state in advance the comparison it is run for
(``hydra.sweeper.stated``): the task, the arm against the baseline arm, the report seeds it is
answered on, the level, and when it was stated. The report then answers that test first, on those
seeds alone, and calls everything else exploratory; a stated seed whose run started before the
statement was written is named, since a result seen before the statement could have shaped it.

This module is the statement, read and checked before any job; its answer on the runs is
:func:`isotune.study.comparison.stated_answer`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from isotune.errors import IsotuneError

SETTING = "hydra.sweeper.stated"
KEYS = ("task", "arm", "baseline", "seeds", "level", "stated_at")
EXAMPLE = (
    f"'{SETTING}={{task:rte,arm:cosreg,seeds:[106,107,108],level:0.05,"
    'stated_at:"2026-12-04T22:55:40+00:00"}\''
)


@dataclass(frozen=True)
class StatedTest:
    """The comparison a study states before its runs: ``arm`` minus ``baseline`` on ``task``,
    on the report ``seeds``, two-sided at ``level``; ``stated_at`` is when it was written (a
    date, or a time with its UTC offset)."""

    task: str
    arm: str
    baseline: str
    seeds: tuple[int, ...]
    level: float
    stated_at: date | datetime

    def as_record(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "arm": self.arm,
            "baseline": self.baseline,
            "seeds": list(self.seeds),
            "level": self.level,
            "stated_at": self.stated_at.isoformat(),
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
    seeds = _seeds(settings["seeds"])
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
    return StatedTest(task, arm, baseline, seeds, float(level), _when(settings["stated_at"]))


def _seeds(value: Any) -> tuple[int, ...]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    ):
        raise IsotuneError(
            f"{SETTING}.seeds={value!r} is not a list of seeds. Fix: e.g. seeds:[106,107,108]."
        )
    if len(set(value)) != len(value) or len(value) < 2:
        raise IsotuneError(
            f"{SETTING}.seeds={list(value)} must name at least two different seeds: a paired "
            "test needs two pairs to have a spread. Fix: name each stated seed once."
        )
    return tuple(sorted(value))


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
