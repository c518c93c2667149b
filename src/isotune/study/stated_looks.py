"""A sequential stated test in its study: the plan locked before its runs, the looks taken on
its runs and frozen, and the stated seeds that may run now; between looks nothing is computed,
since a look the plan did not make spends alpha it did not plan
(docs/study.md#looks-gate-the-runs-and-every-output-waits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from isotune.errors import IsotuneError
from isotune.study.calibration import design_plan
from isotune.study.looks_journal import (
    FrozenLook,
    PairedRun,
    changed_runs,
    paired_run,
    read_journal,
    take_due_looks,
)
from isotune.study.plan import reported_seeds
from isotune.study.preregistration import (
    PLAN_FILE,
    Preregistration,
    check_typed,
    new_registration,
    read_registration,
    typed_fields,
)
from isotune.study.results import ArmOutcome, StudyRun
from isotune.study.sequential import LookDecision, SequentialPlan
from isotune.study.stated import SETTING, StatedTest
from isotune.sweeps.intention_to_treat import intention_to_treat_score

STATED_FAILURES = 2  # a stated run failed this often counts at its trivial score


@dataclass(frozen=True)
class Looks:
    """A sequential stated test on its runs: ``pairs`` counts the stated seeds, from the first,
    with their pair now; ``waiting``, the runs the next look waits for and why; ``changed``, the
    runs of frozen looks changed since."""

    registration: Preregistration
    frozen: tuple[FrozenLook, ...]
    pairs: int
    waiting: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @property
    def plan(self) -> SequentialPlan:
        return self.registration.plan

    @property
    def taken(self) -> tuple[LookDecision, ...]:
        return tuple(look.decision for look in self.frozen)

    @property
    def decided(self) -> LookDecision | None:
        """The look that ended the test (any decision but "go on"), None while it goes on."""
        return self.taken[-1] if self.taken and self.taken[-1].stops else None

    @property
    def due(self) -> int:
        """The stated pairs the test needs now: the deciding look's, else the next look's."""
        decided = self.decided
        return decided.n if decided is not None else self.plan.looks[len(self.taken)]


@dataclass(frozen=True)
class StatedScores:
    """The stated seeds' held-out scores of the test's two arms (``{arm: {seed: score}}``),
    each stated run by (arm, seed), and those counted at their trivial score."""

    scores: dict[str, dict[int, float]]
    runs: dict[tuple[str, int], StudyRun]
    at_trivial: tuple[StudyRun, ...]


def stated_scores(test: StatedTest, outcomes: Sequence[ArmOutcome]) -> StatedScores:
    """The stated seeds' scores of ``test``'s arms among ``outcomes``. A stated run that failed
    runs again, as any failed job does, and waits for it; once it has failed
    :data:`STATED_FAILURES` times it counts at its dev set's trivial score (intention to treat,
    :mod:`isotune.sweeps.intention_to_treat`): leaving its seed without a pair would keep the
    test from ever being answered, and leaving the seed out would flatter the arm that fails."""
    by_arm = {o.arm: o for o in outcomes if o.task == test.task}
    runs = {
        (name, run.seed): run
        for name in (test.baseline, test.arm)
        if name in by_arm
        for run in by_arm[name].held_out
        if run.seed in test.seeds
    }
    scores: dict[str, dict[int, float]] = {test.baseline: {}, test.arm: {}}
    for (name, seed), run in runs.items():
        if run.score is not None:
            scores[name][seed] = run.score
    at_trivial = tuple(
        run
        for run in runs.values()
        if run.score is None
        and run.failures >= STATED_FAILURES
        and intention_to_treat_score(run) is not None
    )
    for run in at_trivial:
        scores[run.arm][run.seed] = intention_to_treat_score(run)
    return StatedScores(scores, runs, at_trivial)


def stated_runs(test: StatedTest, folder: Path) -> list[str]:
    """The stated runs in the study ``folder``: the report runs of the test's arm and baseline on
    its task and stated seeds, whatever their end, as ``<task>/<arm>/seed-<s>``."""
    return [
        f"{test.task}/{arm}/seed-{seed}"
        for arm in (test.baseline, test.arm)
        for seed in sorted(reported_seeds(folder / test.task / arm) & set(test.seeds))
    ]


def locked_plan(test: StatedTest, folder: Path, metric: str) -> Preregistration:
    """The study command's plan for its sequential stated ``test``: the one locked in
    ``folder``, verified; else, while no stated run exists, a new one written there before any
    job. A folder with stated runs and no plan is refused."""
    path = folder / PLAN_FILE
    if path.is_file():
        return verified_plan(test, folder, metric)
    runs = stated_runs(test, folder)
    if runs:
        shown = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
        raise IsotuneError(
            f"{SETTING} plans looks, and the study already has stated runs ({shown}) with "
            f"no plan written before them ({path} is missing): a plan made after its runs "
            "is one the data could have chosen. Fix: restore the plan from the commit that "
            "stated it, or state the sequential test in a study of its own "
            "(hydra.sweeper.study_name=<a new name>)."
        )
    plan = design_plan(test.looks, test.alpha, test.spending, test.margin)
    registration = new_registration(test, plan, metric)
    registration.write(path)
    return registration


def verified_plan(test: StatedTest, folder: Path, metric: str | None = None) -> Preregistration:
    """The plan locked in the study ``folder`` for its sequential stated ``test``, its digest
    checked and each field compared with ``test`` (typed, or the study's record of what was
    typed; ``metric`` where the caller knows it); a study whose plan is missing is refused
    (its looks cannot be judged by a plan made now)."""
    path = folder / PLAN_FILE
    if not path.is_file():
        raise IsotuneError(
            f"{path} is missing: the study states a sequential test ({SETTING}.looks="
            f"{list(test.looks)}), whose plan was locked there before its runs. Fix: restore "
            "the file from the commit that stated it, or continue the study with its command, "
            "which writes the plan while no stated run exists."
        )
    registration = read_registration(path)
    check_typed(registration, typed_fields(test, metric), path)
    return registration


def current_pairs(
    folder: Path | None, test: StatedTest, stated: StatedScores
) -> dict[int, tuple[PairedRun | None, PairedRun | None]]:
    """Each stated seed's two runs as a look would freeze them now (None: no score yet), their
    results.json hashed in the study ``folder`` (None: runs held in memory, not hashed)."""

    def side(arm: str, seed: int) -> PairedRun | None:
        score = stated.scores[arm].get(seed)
        run = stated.runs.get((arm, seed))
        if score is None or run is None:
            return None
        if folder is None:
            return PairedRun(run.job_dir, float(score), "not hashed")
        return paired_run(folder, run.job_dir, score)

    return {seed: (side(test.baseline, seed), side(test.arm, seed)) for seed in test.seeds}


def task_scores(test: StatedTest, outcomes: Sequence[ArmOutcome]) -> list[float]:
    """Every score of the study's runs on the stated task: they set the metric's resolution."""
    return [
        run.score
        for o in outcomes
        if o.task == test.task
        for run in o.runs
        if run.score is not None
    ]


def take_looks(
    folder: Path,
    registration: Preregistration,
    test: StatedTest,
    outcomes: Sequence[ArmOutcome],
    recorded: str = "when taken",
) -> None:
    """The study command's step: freeze each look whose pairs are now all in (``recorded``:
    how, where not when taken)."""
    runs = current_pairs(folder, test, stated_scores(test, outcomes))
    take_due_looks(folder, registration, runs, task_scores(test, outcomes), recorded)


def looks_in(
    folder: Path, registration: Preregistration, test: StatedTest, outcomes: Sequence[ArmOutcome]
) -> Looks:
    """The looks frozen in the study ``folder`` (never computed here: only the study command
    takes a look), with the frozen looks' runs changed since."""
    frozen = tuple(read_journal(folder, registration))
    return looks_from(registration, frozen, test, outcomes, tuple(changed_runs(folder, frozen)))


def looks_from(
    registration: Preregistration,
    frozen: tuple[FrozenLook, ...],
    test: StatedTest,
    outcomes: Sequence[ArmOutcome],
    changed: tuple[str, ...] = (),
) -> Looks:
    """The ``frozen`` looks with the pairs in now and what the next look waits for."""
    stated = stated_scores(test, outcomes)
    paired = stated.scores[test.baseline].keys() & stated.scores[test.arm].keys()
    pairs = next((i for i, seed in enumerate(test.seeds) if seed not in paired), len(test.seeds))
    looks = Looks(registration, frozen, pairs)
    waiting: tuple[str, ...] = ()
    if looks.decided is None:
        missing = [
            (arm, seed)
            for seed in test.seeds[: looks.due]
            for arm in (test.baseline, test.arm)
            if seed not in stated.scores[arm]
        ]
        waiting = tuple(
            _waiting_for(stated, arm, seed) for arm, seed in missing if (arm, seed) in stated.runs
        )
        for arm in (test.baseline, test.arm):
            not_run = [str(s) for a, s in missing if a == arm and (a, s) not in stated.runs]
            if not_run:
                waiting += (f"{arm} seeds {', '.join(not_run)}: not run yet (the study runs them)",)
    return Looks(registration, frozen, pairs, waiting, changed)


def _waiting_for(stated: StatedScores, arm: str, seed: int) -> str:
    """Why the next look waits for ``arm``'s run on ``seed``, and what to do."""
    run = stated.runs[arm, seed]
    where = run.job_dir
    if run.status in ("running", "interrupted", "missing"):
        return f"{arm} seed {seed} ({where}): {run.status}; the study command continues it"
    if run.failures < STATED_FAILURES:
        return f"{arm} seed {seed} ({where}): {run.status}; the study command runs it again"
    return (
        f"{arm} seed {seed} ({where}): {run.status} {run.failures} times with no score and no "
        "recorded trivial score, so it can never count: the look cannot be taken. Fix: find "
        f"why in {where}/train.log, then move that folder aside and type the study's command "
        "again, which runs the seed anew"
    )


def report_seeds_due(
    report_seeds: Sequence[int], test: StatedTest, looks: Looks
) -> tuple[int, ...]:
    """The report seeds that run now on the stated test's task: the study's, less the stated
    seeds beyond the pairs the test needs (:attr:`Looks.due`)."""
    later = set(test.seeds[looks.due :])
    return tuple(seed for seed in report_seeds if seed not in later)


def seeds_held_back(test: StatedTest, looks: Looks) -> tuple[int, ...]:
    """The stated seeds every exploratory output leaves out: all while the test is undecided (a
    table would show a stated score before its look), then those beyond the deciding look."""
    decided = looks.decided
    return test.seeds[decided.n :] if decided is not None else test.seeds


def study_looks(
    folder: Path, test: StatedTest | None, outcomes: Sequence[ArmOutcome]
) -> Looks | None:
    """A report's view of the study in ``folder``: the frozen looks of its sequential stated
    ``test``, its plan verified against the study's record (None for any other study)."""
    if test is None or not test.sequential:
        return None
    return looks_in(folder, verified_plan(test, folder), test, outcomes)
