"""The stated test's part of a study report: the statement, its answer first, then the line that
makes the rest exploratory (docs/study.md#a-stated-test, and for a sequential one
docs/study.md#looks-gate-the-runs-and-every-output-waits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from isotune.study.comparison import StatedAnswer
from isotune.study.preregistration import PLAN_FILE
from isotune.study.sequential import BOUNDED, EQUIVALENT, EXACT, equivalence_p
from isotune.study.stated import StatedTest
from isotune.study.stated_looks import STATED_FAILURES, Looks
from isotune.tracking.reporting import counted

MISSING = "n/a"  # a value not there: never `none`, which is the name of the baseline arm
SPENDING_NAMES = {"obf": "O'Brien-Fleming type", "pocock": "Pocock type"}
EARLY_STOP = {  # a mean at an early stop is biased, away from 0 or towards it
    False: "The study stopped early: a mean at an early stop is biased away from 0 (a study "
    "stops for a difference when its differences happen to be far from 0), so the mean above "
    "overstates the difference; the repeated interval holds its coverage.",
    True: "The study stopped early for equivalence: a mean at such a stop is biased towards 0 (a "
    "study stops there when its differences happen to lie close to 0), so the mean above may "
    "understate a difference; the repeated interval, inside the margin, is the answer and holds "
    "its coverage.",
}
RULE_NAMES = {
    EXACT: "and the exact signed-rank tests (with ties) agree at the look's nominal level: "
    "different only where the two-sided test rejects, equivalent only where both one-sided "
    "tests of d - margin and d + margin reject at half of it",
}


def stated_lines(answer: StatedAnswer) -> list[str]:
    """The stated test's statement and its answer, then the line that makes the rest of the
    report exploratory."""
    test, c = answer.test, answer.comparison
    if answer.looks is not None:
        lines = [*_sequential_lines(test, answer.looks), *_at_trivial_lines(answer)]
        return [*lines, *_exploratory_lines(answer)]
    confidence = f"{1 - test.alpha:.0%}"
    lines = [
        f"Stated at {test.stated_at.isoformat()}, before its runs: on {test.task}, "
        f"`{test.arm}` minus `{test.baseline}`, the held-out score on report seeds "
        f"{seed_ranges(test.seeds)} ({counted(len(test.seeds), 'pair')}), two-sided at level "
        f"{test.alpha:g}: the paired t-test with its {confidence} t interval, and the exact "
        "Wilcoxon signed-rank test beside it.",
        "",
    ]
    if c is None:
        have = len(test.seeds) - len(answer.without_pair)
        lines.append(
            f"{have} of {counted(len(test.seeds), 'stated pair')} in (without a pair yet: "
            f"{seed_ranges(answer.without_pair)}): the stated test is answered once every "
            "stated seed has its pair, and not before."
        )
    else:
        low, high = c.t_interval or (None, None)
        verdict = (
            "no spread, so no t-test"
            if c.ttest_p is None
            else f"**different from `{test.baseline}`** at level {test.alpha:g} (the interval "
            "excludes 0)"
            if c.excludes_zero
            else f"**not told apart from `{test.baseline}`** at level {test.alpha:g} (the "
            "interval includes 0)"
        )
        lines.append(
            f"**Answer:** mean difference {number(c.mean_difference)}, {confidence} t interval "
            f"{interval_text(low, high)}; paired t-test p {number(c.ttest_p)}, Wilcoxon p "
            f"{number(c.wilcoxon_p)} ({counted(c.wilcoxon_n, 'non-zero pair')}): {verdict}."
        )
    return [*lines, *_at_trivial_lines(answer), *_exploratory_lines(answer)]


def _at_trivial_lines(answer: StatedAnswer) -> list[str]:
    """The stated runs counted at their trivial score, by name (none: no line)."""
    if not answer.at_trivial:
        return []
    runs = "; ".join(f"`{arm}` seed {seed} ({run})" for arm, seed, run in answer.at_trivial)
    return [
        "",
        f"Counted at its dev set's trivial score, having failed {STATED_FAILURES} times "
        f"(intention to treat: a stated run that failed runs again; failing again, it counts "
        f"as a run that learned nothing): {runs}.",
    ]


def _exploratory_lines(answer: StatedAnswer) -> list[str]:
    """The stated seeds run before the statement, the seeds held back, then the line that makes
    the rest of the report exploratory."""
    lines = []
    if answer.started_before:
        early = ", ".join(f"{seed} ({at})" for seed, at in answer.started_before)
        lines += [
            "",
            f"Stated seeds whose runs started before the statement: {early}. Their results "
            "could have been seen before it was written: the test counts them as stated, and "
            "a reader should know.",
        ]
    if answer.held_back:
        lines += ["", held_back_sentence(answer)]
    lines += [
        "",
        "Everything below is exploratory: every comparison over all the report seeds (the "
        "stated ones and any others), every other arm and task, and the geometry were not "
        "stated before the runs.",
    ]
    return lines


def _sequential_lines(test: StatedTest, looks: Looks) -> list[str]:
    """A sequential stated test's lines, from its frozen looks alone: between looks nothing is
    computed."""
    registration, plan = looks.registration, looks.plan
    margin = (
        "no equivalence margin"
        if plan.margin is None
        else f"equivalence margin {plan.margin:g} ({plan.margin * 100:g} "
        f"point{'' if plan.margin == 0.01 else 's'} of a 0-1 metric)"
    )
    rules = f" {RULE_NAMES[EXACT]}" if EXACT in plan.rules else ""
    lines = [
        f"Stated at {registration.stated_at}, before its runs: on {test.task}, `{test.arm}` "
        f"minus `{test.baseline}`, {registration.statistic.describe()}, on report seeds "
        f"{seed_ranges(test.seeds)}, decided in planned looks at "
        f"{', '.join(map(str, plan.looks))} pairs (look k on the first n_k stated seeds), "
        f"two-sided alpha {plan.alpha:g} spent by the Lan-DeMets "
        f"{SPENDING_NAMES[plan.spending]} function, {margin}. At each look the repeated "
        f"{1 - plan.alpha:.0%} interval mean ± boundary × sd / sqrt(n) (Jennison & Turnbull) "
        f"decides{rules}: different (it excludes 0), equivalent (it lies inside the margin), or "
        "go on; the last look gives the interval as the bound. Boundaries on the t scale, "
        f"locked before the runs ({PLAN_FILE}, {registration.digest[:19]}...): "
        f"{', '.join(f'{b:.3f}' for b in plan.boundaries)} ({plan.boundaries_from}).",
        "",
    ]
    if looks.taken:
        lines += [
            "| look | pairs | boundary | mean difference | repeated interval | exact p "
            "(nominal level) | decision | alpha spent |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {d.look} | {d.n} | {d.boundary:.3f} | {number(d.mean)} | "
                f"{interval_text(*d.interval)} | {_exact(d.exact_p, d.nominal)} | "
                f"{d.decision} | {d.alpha_spent:.4f} |"
                for d in looks.taken
            ),
            "",
            *(f"Look {d.look}: {d.note}" for d in looks.taken if d.note),
            *(
                f"Look {f.decision.look} was recorded {f.recorded}."
                for f in looks.frozen
                if f.recorded != "when taken"
            ),
            "",
        ]
    decided = looks.decided
    used = test.seeds[: looks.taken[-1].n] if looks.taken else ()
    if decided is None:
        lines.append(
            f"**Go on:** the next look at {looks.due} pairs ({looks.pairs} in); nothing is "
            "computed between looks, since a look the plan did not make spends alpha it did not "
            "plan. The study command takes it once its pairs are in."
        )
        if looks.waiting:
            lines += ["", "It waits for:", *(f"- {why}" for why in looks.waiting)]
    elif decided.decision == BOUNDED:
        lines.append(
            f"**Decision at the last look ({decided.n} pairs): bounded**; the repeated "
            f"interval {interval_text(*decided.interval)} bounds the difference."
        )
    else:
        lines.append(
            f"**Decision at look {decided.look} ({decided.n} pairs): {decided.decision}** "
            f"(repeated interval {interval_text(*decided.interval)}); the study runs no more "
            "of its stated seeds."
        )
    if looks.changed:
        lines += [
            "",
            f"Changed since their look (the frozen decision stands): {', '.join(looks.changed)}.",
        ]
    lines += [
        "",
        f"Stated seeds used: {seed_ranges(used) if used else 'none yet'} "
        f"({counted(len(used), 'pair')}); alpha spent: "
        f"{looks.taken[-1].alpha_spent if looks.taken else 0:.4f} of {plan.alpha:g}.",
    ]
    if decided is not None and decided.decision == EQUIVALENT and plan.margin is not None:
        d = looks.frozen[-1].differences()
        lines += [
            "",
            f"The exact one-sided signed-rank tests of d - margin and d + margin at look "
            f"{decided.look}: p {equivalence_p(d, plan.margin):.2g} at most, against half the "
            f"look's nominal level, {decided.nominal / 2:.2g}.",
        ]
    if decided is not None and decided.look < len(plan.looks):
        lines += ["", EARLY_STOP[decided.decision == EQUIVALENT]]
    return lines


def _exact(p: float | None, nominal: float | None) -> str:
    return f"{p:.4g} ({nominal:.2g})" if p is not None and nominal is not None else "no sign"


def held_back_sentence(answer: StatedAnswer) -> str:
    """Which stated seeds every exploratory output leaves out, and why."""
    assert answer.looks is not None, "only a sequential stated test holds seeds back"
    decided = answer.looks.decided
    why = (
        f"beyond the look that decided it (look {decided.look}, at {counted(decided.n, 'pair')})"
        if decided is not None
        else "while the stated test is undecided: a table over them would show a stated score "
        "before its look, or an interval of the stated comparison that no plan made"
    )
    return (
        f"Left out of the tables, figures and study_runs.csv: the report runs of every arm of "
        f"{answer.test.task} on stated seeds {seed_ranges(answer.held_back)}, {why} "
        f"({PLAN_FILE}). The study report's stated test gives them at their looks."
    )


def seed_ranges(seeds: Sequence[int]) -> str:
    """Seeds as runs of consecutive numbers: ``101-105, 110``."""
    runs: list[list[int]] = []
    for seed in sorted(seeds):
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def interval_text(low: Any, high: Any) -> str:
    if low is None or (isinstance(low, float) and math.isnan(low)):
        return MISSING
    return f"[{number(low)}, {number(high)}]"


def number(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return f"{value:.{digits}f}"
