"""A study's stated test: the one comparison written down before its runs, answered on its own
first, since of the many comparisons a report makes one the data chose is no answer. This module
is the statement, checked before any job; its answer is
:func:`isotune.study.comparison.stated_answer`. A record written before ``alpha`` was named says
``level``, with its margin in points: :func:`stated_test` reads it as it was meant.
Docs: docs/study.md#a-stated-test.
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
KEYS = (
    "task", "arm", "baseline", "seeds", "alpha", "stated_at", "looks", "spending", "margin",
    "select_epoch",
)  # fmt: skip
OLD_ALPHA = "level"  # alpha's name in records written before it was named alpha
POINTS = 100  # such a record's margin is in points (of a 0-1 metric); one point is 0.01
OWN_FILES = "files"  # the task a study of one's own files runs (docs/data.md)
SELECT_EPOCHS = ("best", "last")  # the epoch a stated run is scored at (conf/train.yaml)
EXAMPLE = (
    f"'{SETTING}={{task:rte,arm:cosreg,seeds:[106,107,108],alpha:0.05,"
    'stated_at:"2026-12-04T22:55:40+00:00"}\''
)


@dataclass(frozen=True)
class StatedTest:
    """The comparison a study states before its runs (fields: docs/study.md#a-stated-test); with
    ``looks`` it is sequential, ``margin`` in the metric's units (None: no equivalence stop),
    each stated run scored at ``select_epoch`` (``last`` unless typed: no epoch chosen on the
    scored examples)."""

    task: str
    arm: str
    baseline: str
    seeds: tuple[int, ...]
    alpha: float
    stated_at: date | datetime
    looks: tuple[int, ...] = ()
    spending: str = "obf"
    margin: float | None = None
    select_epoch: str = "last"

    @property
    def sequential(self) -> bool:
        return bool(self.looks)

    def as_record(self) -> dict[str, Any]:
        sequential = (
            {
                "looks": list(self.looks),
                "spending": self.spending,
                "margin": self.margin,
                "select_epoch": self.select_epoch,
            }
            if self.sequential
            else {}
        )
        return {
            "task": self.task,
            "arm": self.arm,
            "baseline": self.baseline,
            "seeds": list(self.seeds),
            "alpha": self.alpha,
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
    record: bool = False,
) -> StatedTest | None:
    """The study's stated test from ``hydra.sweeper.stated`` (None: none stated), checked against
    the study before any job runs. A ``record`` (multirun.yaml) written before alpha had one name
    says ``level``, and its margin in points: read as meant."""
    if settings is None:
        return None
    if not isinstance(settings, Mapping):
        raise IsotuneError(f"{SETTING}={settings!r} is not a mapping. Fix: {EXAMPLE}.")
    if OLD_ALPHA in settings:
        if not record:
            raise IsotuneError(
                f"{SETTING}.{OLD_ALPHA} is named alpha now, as a sequential plan stores it (one "
                f"name for one thing). Fix: type alpha:{settings[OLD_ALPHA]} in its place."
            )
        margin = settings.get("margin")
        settings = {
            **{key: value for key, value in settings.items() if key != OLD_ALPHA},
            "alpha": settings[OLD_ALPHA],
            "margin": margin / POINTS if isinstance(margin, int | float) else margin,
        }
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
        own = (
            "A study of your own files names its task files, whatever task.name says. Fix: "
            "state task:files."
            if OWN_FILES in tasks
            else "Fix: state one of them, or add it to the study's tasks "
            f"(task={','.join([*tasks, task])})."
        )
        raise IsotuneError(
            f"{SETTING}.task={task} is not a task of this study ({', '.join(tasks)}). {own}"
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
    alpha = settings.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise IsotuneError(
            f"{SETTING}.alpha={alpha!r} is not a level between 0 and 1. Fix: e.g. alpha:0.05."
        )
    when = _when(settings["stated_at"])
    if settings.get("looks") is None:
        for key in ("spending", "margin", "select_epoch"):
            if settings.get(key) is not None:
                raise IsotuneError(
                    f"{SETTING}.{key}={settings[key]!r} belongs to a sequential plan, and this "
                    f"stated test plans no looks. Fix: add {SETTING}.looks (the pair counts at "
                    f"which it looks, e.g. looks:[10,20,30,40]), or drop {key}."
                )
        return StatedTest(task, arm, baseline, seeds, float(alpha), when)
    looks = _looks(settings["looks"], seeds)
    spending = str(settings.get("spending") or "obf")
    if spending not in SPENDING:
        raise IsotuneError(
            f"{SETTING}.spending={spending} is no spending function this code knows. Fix: "
            "spending:obf (O'Brien-Fleming type, the default) or spending:pocock (Pocock type)."
        )
    margin = _margin(settings.get("margin"))
    select_epoch = settings.get("select_epoch") or "last"
    if select_epoch not in SELECT_EPOCHS:
        raise IsotuneError(
            f"{SETTING}.select_epoch={select_epoch!r} is not one of {list(SELECT_EPOCHS)}. Fix: "
            "select_epoch:last (each run scored at its last epoch: nothing chosen on the scored "
            "examples; the default) or select_epoch:best (at the epoch its dev score chose)."
        )
    return StatedTest(
        task, arm, baseline, seeds, float(alpha), when, looks, spending, margin, select_epoch
    )


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


def _margin(margin: Any) -> float | None:
    """The equivalence margin, typed in the metric's units (0.01: one point of accuracy)."""
    if margin is None:
        return None
    number = isinstance(margin, int | float) and not isinstance(margin, bool)
    if not number or not margin > 0 or margin == float("inf"):
        raise IsotuneError(
            f"{SETTING}.margin={margin!r} is no equivalence margin: a positive number in the "
            "metric's units (the difference that would not matter). Fix: e.g. margin:0.01 for "
            "one point of accuracy, or drop it for a plan without an equivalence stop."
        )
    if margin >= 1:
        raise IsotuneError(
            f"{SETTING}.margin={margin!r} spans a whole 0-1 metric: likely a margin in points. "
            f"Fix: type it in the metric's units, e.g. margin:{margin / POINTS:g} for "
            f"{margin:g} point{'s' if margin != 1 else ''}."
        )
    return float(margin)


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
