"""A sequential stated test in its study: the plan written before its runs, the looks taken on
its runs, and the stated seeds that may run now (docs/study.md, "A stated test").

A stated test with ``looks`` (:mod:`isotune.study.stated`) is decided by a
:class:`~isotune.study.sequential.SequentialPlan`: its boundaries are calibrated once, before any
stated run, and stored in the study folder (:data:`PLAN_FILE`), so that the plan the runs are
judged by is the one written before them; typed again, the study reads it back, never computes
it again, and refuses a changed plan once a stated run exists (a plan changed after seeing runs
is a plan the data chose). Look k is on the first n_k stated seeds (in order), and is taken only
when each of them has its pair: between looks nothing is computed, since a look the plan did
not make spends alpha it did not plan. The stated seeds beyond the look the study waits for do
not run; a decided study runs no more of them. Those already run, by a study stopped on its way
to its next look, wait for it outside every table (:func:`seeds_beyond_looks`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from isotune.errors import IsotuneError
from isotune.study.plan import reported_seeds
from isotune.study.sequential import LookDecision, SequentialPlan
from isotune.study.stated import SETTING, StatedTest
from isotune.sweeps.statistics import at_resolution

PLAN_FILE = "sequential_plan.yaml"


@dataclass(frozen=True)
class Looks:
    """A sequential stated test on its runs: its ``plan``, the looks ``taken`` in order (the
    last one the decision when it stops the study), and how many of the stated seeds, from the
    first, have their pair (``pairs``)."""

    plan: SequentialPlan
    taken: tuple[LookDecision, ...]
    pairs: int

    @property
    def decided(self) -> LookDecision | None:
        """The look that ended the test (any decision but "go on"), None while it goes on."""
        return self.taken[-1] if self.taken and self.taken[-1].stops else None

    @property
    def due(self) -> int:
        """The stated pairs the test needs now: the deciding look's, else the next look's."""
        decided = self.decided
        return decided.n if decided is not None else self.plan.looks[len(self.taken)]


def looks_taken(
    plan: SequentialPlan,
    seeds: Sequence[int],
    baseline: Mapping[int, float],
    arm: Mapping[int, float],
) -> Looks:
    """The looks of ``plan`` that the scores (``{seed: score}`` of the baseline and the arm) let
    it take, each on the first n_k of the stated ``seeds`` (sorted), in order, until one stops
    it: the differences arm - baseline at the scores' resolution, as every paired comparison
    takes them."""
    pairs = 0
    for seed in seeds:
        if seed not in baseline or seed not in arm:
            break
        pairs += 1
    paired = seeds[:pairs]
    scores = [float(x) for s in paired for x in (baseline[s], arm[s])]
    d = at_resolution(np.array([arm[s] - baseline[s] for s in paired], dtype=float), scores)
    taken: list[LookDecision] = []
    for n in plan.looks:
        if n > pairs or (taken and taken[-1].stops):
            break
        taken.append(plan.decide(d[:n]))
    return Looks(plan, tuple(taken), pairs)


def stated_runs(test: StatedTest, folder: Path) -> list[str]:
    """The stated runs in the study ``folder``: the report runs of the test's arm and baseline on
    its task and stated seeds, whatever their end, as ``<task>/<arm>/seed-<s>``."""
    return [
        f"{test.task}/{arm}/seed-{seed}"
        for arm in (test.baseline, test.arm)
        for seed in sorted(reported_seeds(folder / test.task / arm) & set(test.seeds))
    ]


def stated_plan(test: StatedTest, folder: Path) -> SequentialPlan:
    """The plan of the sequential stated ``test`` of the study in ``folder``: the one stored
    there when it is the plan typed (its boundaries as stored); else, while no stated run
    exists, a new one, calibrated and written there before any job. A plan typed otherwise than
    the stored one, or none stored, once stated runs exist, is refused."""
    path = folder / PLAN_FILE
    stored = SequentialPlan.read(path) if path.is_file() else None
    typed = {
        "looks": list(test.looks),
        "alpha": test.level,
        "spending": test.spending,
        "margin": test.margin,
    }
    if stored is not None:
        changed = {key: value for key, value in typed.items() if stored.to_dict()[key] != value}
        if not changed:
            return stored
    runs = stated_runs(test, folder)
    if runs:
        shown = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
        if stored is None:
            raise IsotuneError(
                f"{SETTING} plans looks, and the study already has stated runs ({shown}) with "
                f"no plan written before them ({path} is missing): a plan made after its runs "
                "is one the data could have chosen. Fix: drop looks, spending and margin to "
                "answer the stated test at a fixed size, or state the sequential test in a "
                "study of its own (hydra.sweeper.study_name=<a new name>)."
            )
        was = ", ".join(f"{key}={stored.to_dict()[key]!r}" for key in changed)
        now = ", ".join(f"{key}={value!r}" for key, value in changed.items())
        raise IsotuneError(
            f"{SETTING} gives the sequential plan {now}, where the plan written before the "
            f"study's stated runs ({path}) has {was}; stated runs exist ({shown}), and a plan "
            "changed after its runs is one the data could have chosen. Fix: type the plan as "
            "written (margin in points: the stored margin x 100), or state the new plan in a "
            "study of its own (hydra.sweeper.study_name=<a new name>)."
        )
    plan = SequentialPlan.design(test.looks, test.level, test.spending, test.margin)
    plan.write(path)
    return plan


def read_stated_plan(test: StatedTest, folder: Path) -> SequentialPlan:
    """The plan stored in the study ``folder`` for its sequential stated ``test``, as stored; a
    study whose plan is missing is refused (its looks cannot be judged by a plan made now)."""
    path = folder / PLAN_FILE
    if not path.is_file():
        raise IsotuneError(
            f"{path} is missing: the study states a sequential test ({SETTING}.looks="
            f"{list(test.looks)}), whose plan and boundaries were written there before its runs. "
            "Fix: restore the file from where the study was run, or continue the study with "
            "its command, which writes the plan while no stated run exists."
        )
    return SequentialPlan.read(path)


def report_seeds_due(
    report_seeds: Sequence[int], test: StatedTest, looks: Looks
) -> tuple[int, ...]:
    """The report seeds that run now on the stated test's task: the study's, less the stated
    seeds beyond the pairs the test needs (:attr:`Looks.due`)."""
    later = set(test.seeds[looks.due :])
    return tuple(seed for seed in report_seeds if seed not in later)


def seeds_beyond_looks(test: StatedTest, looks: Looks) -> tuple[int, ...]:
    """The stated seeds beyond the last look taken (every stated seed before the first look):
    a study stopped on its way to its next look holds some of their runs, and an interval over
    them would be a look at a size the plan does not take."""
    return test.seeds[looks.taken[-1].n if looks.taken else 0 :]
