"""The sequential design (isotune.study.sequential, docs/study.md "Seeds in planned looks"):
its spending and boundaries against published and analytic values, the error rates it holds in
small simulations (the full ones are benchmarks/bench_sequential.py), its plan stored and read
back without computing anything, its refusals, and the decision at a look on fixed differences,
checked against the interval computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from sequential_simulation import fixed_pairs, normal_boundaries, simulate

from isotune.errors import IsotuneError
from isotune.study.calibration import boundaries, design_plan
from isotune.study.sequential import (
    BOUNDED,
    DIFFERENT,
    DIFFERENT_SMALL,
    EQUIVALENT,
    GO_ON,
    INTERVAL,
    SequentialPlan,
    spent_alpha,
)
from isotune.sweeps.statistics import signed_rank_p

LOOKS = (10, 20, 30, 40)
STATED = (6.86, 3.11, 2.44, 2.12)  # the project's plan (docs/results.md, the sequential run)


def stated_plan(margin: float | None = 1.0, rules: tuple[str, ...] = (INTERVAL,)) -> SequentialPlan:
    """The IsoBN plan as stated (the repeated interval alone), in points."""
    return SequentialPlan(LOOKS, 0.05, "obf", margin, STATED, "docs/results.md", rules)


def new_plan(margin: float | None = 1.0) -> SequentialPlan:
    """The same boundaries under a new plan's rules: the interval, and the exact tests."""
    return SequentialPlan(LOOKS, 0.05, "obf", margin, STATED, "docs/results.md")


def three_sigma(rate: float, studies: int) -> float:
    return 3 * math.sqrt(rate * (1 - rate) / studies)


def test_each_spending_function_spends_nothing_before_the_first_look_and_alpha_by_the_last():
    for spending in ("obf", "pocock"):
        assert spent_alpha([0.0, 1.0], 0.05, spending) == pytest.approx([0.0, 0.05])
    # docs/results.md: the OBF-type spending of the project's plan, look by look
    assert spent_alpha([0.25, 0.5, 0.75, 1.0]) == pytest.approx(
        [0.00009, 0.0056, 0.0236, 0.05], abs=5e-5
    )
    assert spent_alpha([0.5], 0.05, "pocock") == pytest.approx(
        0.05 * math.log(1 + (math.e - 1) / 2)
    )


@pytest.mark.parametrize(
    ("spending", "expected"),
    [("obf", (3.92, 2.77, 2.30, 2.04)), ("pocock", (2.37, 2.37, 2.36, 2.35))],
)
def test_the_normal_scale_boundaries_of_four_equal_looks_are_the_computed_ones(spending, expected):
    assert normal_boundaries(LOOKS, 0.05, spending) == pytest.approx(expected, abs=0.006)


def test_the_first_boundary_is_students_t_quantile_exactly():
    """At look 1 the t statistic is Student's t with n_1 - 1 degrees of freedom: b_1 is its
    quantile at 1 - alpha(t_1) / 2, with no simulation (6.700 for the IsoBN plan's looks)."""
    for n in (5, 10):
        found = boundaries([n], 0.05, studies=20).values
        assert found == pytest.approx((stats.t.isf(0.025, n - 1),), rel=1e-12)
    spent = spent_alpha([0.25])[0]
    assert spent == pytest.approx(0.0000886, abs=1e-7)
    first = boundaries(LOOKS, studies=20_000, seed=3)
    assert first.values[0] == pytest.approx(stats.t.isf(spent / 2, 9), rel=1e-12)
    assert first.values[0] == pytest.approx(6.700, abs=5e-4)
    assert first.errors[0] == pytest.approx(0.0, abs=1e-12)


def test_a_calibration_is_reproduced_by_its_description():
    """The same studies and seed give the same numbers, and the description names them, the
    numpy version and the Monte Carlo error."""
    made = boundaries([5, 10], 0.05, "pocock", studies=400_000, seed=7)
    assert made == boundaries([5, 10], 0.05, "pocock", studies=400_000, seed=7)
    assert made != boundaries([5, 10], 0.05, "pocock", studies=400_000, seed=8)
    assert made.stored == tuple(round(b, made.digits) for b in made.values)
    for named in ("400,000", f"numpy {np.__version__}", "default_rng(7)", "b_1 exact"):
        assert named in made.description
    assert f"{made.errors[1]:.4f}" in made.description


@pytest.mark.slow
def test_the_default_calibration_holds_two_decimals():
    """The default size (8,000,000 studies from seed 20261206) gives 6.70, 3.13, 2.44, 2.12 for
    the IsoBN plan's looks, each with a Monte Carlo error below half the last digit stored; the
    plan as stated keeps its 6.86, 3.11, 2.44, 2.12 (docs/results.md gives both)."""
    made = boundaries(LOOKS)
    assert made.stored == (6.70, 3.13, 2.44, 2.12)
    assert max(made.errors) < 0.005
    assert design_plan(LOOKS, margin=0.01).boundaries == made.stored


def test_a_calibration_too_small_for_its_digits_designs_no_plan():
    with pytest.raises(IsotuneError, match=r"Monte Carlo errors .* Fix: calibrate on more"):
        design_plan([2, 4], 0.05, "obf", 0.01, studies=2_000, seed=7)
    coarse = boundaries([5, 10], 0.05, "pocock", studies=20_000, seed=7)
    assert coarse.digits == 1 and coarse.stored == tuple(round(b, 1) for b in coarse.values)


def test_the_plans_boundaries_hold_the_error_rate_with_no_true_difference():
    """Without a margin every study ends "different" or "bounded": "different" is the error."""
    found = simulate(stated_plan(None), 0.0, 20_000, np.random.default_rng(11), sd=1.61)
    assert abs(found.different - 0.05) <= three_sigma(0.05, 20_000)
    assert found.rates[EQUIVALENT] == 0 and found.rates[BOUNDED] == pytest.approx(
        1 - found.different
    )


def test_calibrated_boundaries_hold_the_error_rate_on_real_differences_recentred():
    plan = SequentialPlan(
        LOOKS, 0.05, "obf", None, boundaries(LOOKS, studies=50_000, seed=5).stored
    )
    rte = [3.25, 1.08, -2.53, 0, -0.36, -1.08, -1.08, 0, 3.25, 3.61, 0.72, 1.08, 0.36, 0.36, -1.08]
    found = simulate(plan, 0.0, 20_000, np.random.default_rng(12), pool=rte)
    assert found.different <= 0.05 + three_sigma(0.05, 20_000)


def test_at_a_true_difference_equal_to_the_margin_equivalence_errs_at_most_half_alpha():
    found = simulate(stated_plan(1.0), 1.0, 20_000, np.random.default_rng(13), sd=1.61)
    assert found.rates[EQUIVALENT] <= 0.025 + three_sigma(0.025, 20_000)
    assert sum(found.rates.values()) == pytest.approx(1.0)
    assert sum(found.stopped_at) == pytest.approx(1.0)
    assert LOOKS[0] <= found.mean_pairs < LOOKS[-1]


def test_real_differences_are_recentred_on_the_true_difference_before_resampling():
    """A pool far from 0 recentred on 0 with a wide margin is equivalent, never different."""
    found = simulate(
        stated_plan(5.0), 0.0, 2_000, np.random.default_rng(14), pool=[10.0, 11.0, 12.5]
    )
    assert found.rates[EQUIVALENT] > 0.99


def test_a_simulated_study_decides_as_the_plan_decides_look_by_look():
    """The vectorized simulation against :meth:`SequentialPlan.decide` walked over the looks
    of the same draws (one study per seed: ``rng.normal(difference, sd, size=(1, 40))``)."""
    plan = stated_plan(1.0)
    for seed in range(40):
        difference = [0.0, 0.6, 1.0, 2.5][seed % 4]
        d = np.random.default_rng(seed).normal(difference, 1.2, size=(1, LOOKS[-1]))[0]
        walked = next(
            plan.decide(d[:n]) for n in LOOKS if plan.decide(d[:n]).stops or n == LOOKS[-1]
        )
        found = simulate(plan, difference, 1, np.random.default_rng(seed), sd=1.2)
        assert found.rates[walked.decision] == 1.0
        assert found.mean_pairs == walked.n


def test_a_fixed_design_of_the_same_power_is_the_smallest_paired_t_test_with_it():
    # Cohen's d 0.5 and 1 at 80% power, two-sided 0.05: 34 and 10 pairs (G*Power's)
    assert fixed_pairs(0.5, 1.0, 0.8) == 34
    assert fixed_pairs(1.61, 1.61, 0.8) == 10

    def power(n: int) -> float:
        critical, shift = stats.t.isf(0.025, n - 1), 1 / 1.61 * math.sqrt(n)
        return stats.nct.sf(critical, n - 1, shift) + stats.nct.cdf(-critical, n - 1, shift)

    n = fixed_pairs(1.0, 1.61, 0.95)
    assert power(n) >= 0.95 > power(n - 1)
    with pytest.raises(ValueError):
        fixed_pairs(1.0, 1.61, 1.0)


# --- the plan, as data ----------------------------------------------------------------------


def test_a_plan_reads_back_with_its_own_boundaries_and_rules():
    """Boundaries that no calibration gives (the normal-scale ones) come back as given: reading
    a plan never computes them again."""
    plan = SequentialPlan(LOOKS, 0.05, "obf", 1.0, (3.92, 2.77, 2.30, 2.04), "typed")
    assert SequentialPlan.from_dict(plan.to_dict()) == plan
    assert SequentialPlan.from_dict(stated_plan().to_dict()).rules == (INTERVAL,)


def test_a_designed_plan_says_how_its_boundaries_were_made_and_stores_them():
    plan = design_plan([5, 10], 0.05, "pocock", 0.005, studies=800_000, seed=7)
    made = boundaries([5, 10], 0.05, "pocock", studies=800_000, seed=7)
    assert plan.boundaries == made.stored and plan.boundaries_from == made.description
    assert plan.rules == new_plan().rules and len(plan.rules) == 2
    assert SequentialPlan.from_dict(plan.to_dict()) == plan
    assert plan.spent == pytest.approx(tuple(spent_alpha([0.5, 1.0], 0.05, "pocock")))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"looks": [20, 10]}, "[20, 10]"),
        ({"looks": [10, 10, 20]}, "[10, 10, 20]"),
        ({"looks": [1, 10]}, "at least 2"),
        ({"looks": []}, "[]"),
        ({"looks": [10.0, 20.0]}, "[10.0, 20.0]"),
        ({"alpha": 0.0}, "alpha 0.0"),
        ({"alpha": 1.5}, "alpha 1.5"),
        ({"spending": "obrien-fleming"}, "'obrien-fleming'"),
        ({"margin": 0.0}, "margin 0.0"),
        ({"margin": -1.0}, "margin -1.0"),
        ({"boundaries": [6.86, 3.11, 2.44]}, "not 4 positive numbers"),
        ({"boundaries": [6.86, 3.11, 2.44, -2.12]}, "-2.12"),
        ({"rules": ["exact_signed_rank"]}, "['exact_signed_rank']"),
        ({"rules": ["repeated_interval", "coin"]}, "coin"),
    ],
)
def test_a_plan_that_cannot_be_is_refused_naming_its_value(change, named):
    values = {**stated_plan().to_dict(), **change}
    with pytest.raises(IsotuneError, match="Fix:") as refused:
        SequentialPlan.from_dict({key: values[key] for key in stated_plan().to_dict()})
    assert named in str(refused.value)
    if set(change) <= {"looks", "alpha", "spending"}:
        with pytest.raises(IsotuneError, match="Fix:"):
            boundaries(values["looks"], values["alpha"], values["spending"], studies=100)
    if "rules" in change:
        with pytest.raises(IsotuneError, match="Fix:"):
            SequentialPlan(LOOKS, 0.05, "obf", 1.0, STATED, "", tuple(change["rules"]))


def test_a_malformed_plan_is_refused_not_guessed_at():
    stored = stated_plan().to_dict()
    for data in ({k: v for k, v in stored.items() if k != "boundaries"}, {**stored, "b": 1}, []):
        with pytest.raises(IsotuneError, match="exactly the keys"):
            SequentialPlan.from_dict(data, where="plan.yaml")
    with pytest.raises(IsotuneError, match="holds a list"):
        SequentialPlan.from_dict({**stored, "boundaries": "6.86 3.11"})


# --- the decision at a look --------------------------------------------------------------------


def around(centre: float, spread: float, n: int) -> list[float]:
    """n differences with mean ``centre`` exactly and a spread set by ``spread``."""
    offsets = (
        np.resize([-spread, spread], n) if n % 2 == 0 else [*np.resize([-spread, spread], n - 1), 0]
    )
    return [centre + x for x in offsets]


def test_the_decision_at_a_look_is_the_repeated_confidence_interval_computed_by_hand():
    d = around(0.5, 1.5, 20)
    decision = stated_plan().decide(d)
    half = 3.11 * np.std(d, ddof=1) / math.sqrt(20)
    assert (decision.look, decision.n, decision.boundary) == (2, 20, 3.11)
    assert decision.interval == pytest.approx((np.mean(d) - half, np.mean(d) + half))
    assert decision.alpha_spent == pytest.approx(spent_alpha([0.5])[0])
    assert decision.decision == GO_ON and not decision.stops and decision.note == ""


@pytest.mark.parametrize(
    ("d", "margin", "decision"),
    [
        (around(5.0, 0.5, 10), 1.0, DIFFERENT),  # a clear difference, at the first look
        (around(-5.0, 0.5, 10), None, DIFFERENT),  # either way
        (around(0.5, 0.05, 10), 1.0, DIFFERENT_SMALL),  # excludes 0, inside the margin
        (around(0.5, 0.05, 10), None, DIFFERENT),  # no margin: no "smaller than" it
        (around(0.0, 0.1, 10), 1.0, EQUIVALENT),  # tiny spread around 0
        (around(0.0, 0.1, 10), None, GO_ON),  # without a margin nothing is equivalent
        (around(0.3, 2.0, 30), 1.0, GO_ON),  # wide: neither
        (around(0.3, 3.0, 40), 1.0, BOUNDED),  # the last look bounds what it cannot decide
        (around(0.5, 2.0, 40), 1.0, BOUNDED),  # holds 0 and reaches past the margin
        (around(0.9, 0.5, 40), 1.0, DIFFERENT),  # excludes 0, reaches past the margin
    ],
)
def test_the_decision_on_fixed_differences(d, margin, decision):
    found = stated_plan(margin).decide(d)
    assert found.decision == decision, found


@pytest.mark.parametrize(
    ("d", "margin", "by_interval", "by_both"),
    [
        # ten identical one-example differences: exact p 2/1024, far above look 1's 7.4e-5
        ([0.36] * 10, 1.0, DIFFERENT_SMALL, GO_ON),
        ([2.0] * 20, 1.0, DIFFERENT, DIFFERENT),  # 2/2^20 = 1.9e-6, below look 2's 0.0058
        ([0.0] * 10, 1.0, EQUIVALENT, GO_ON),  # ten zeros: 1/1024 per side, above 3.7e-5
        ([0.0] * 20, 1.0, EQUIVALENT, EQUIVALENT),  # 2^-20 per side, below 0.0029
        ([0.0] * 10, None, GO_ON, GO_ON),
        ([0.0] * 40, None, BOUNDED, BOUNDED),
    ],
)
def test_no_spread_is_decided_by_the_exact_tests_under_a_new_plans_rules(
    d, margin, by_interval, by_both
):
    """The IsoBN plan as stated: the point interval decides, and says so. A new plan's rules:
    the exact signed-rank tests with ties must agree, so ties decide nothing the data cannot."""
    stated = stated_plan(margin).decide(d)
    assert stated.decision == by_interval
    assert stated.sd == 0 and stated.interval == (d[0], d[0]) and "No spread" in stated.note
    both = new_plan(margin).decide(d)
    assert both.decision == by_both and both.interval == stated.interval
    assert both.exact_p == stated.exact_p
    assert ("do not agree" in both.note) == (by_both != by_interval)


def test_two_tied_pairs_at_a_first_look_go_on():
    """A new user's first sequential study, looks at 2 and 4 pairs: both differences one dev
    example. The point interval excludes 0, but the exact two-sided p is 0.5."""
    plan = SequentialPlan((2, 4), 0.05, "obf", 0.01, (20.0, 3.0), "typed")
    found = plan.decide([0.0036, 0.0036])
    assert found.exact_p == pytest.approx(0.5) and found.decision == GO_ON
    assert (
        SequentialPlan((2, 4), 0.05, "obf", 0.01, (20.0, 3.0), "", (INTERVAL,))
        .decide([0.0036, 0.0036])
        .decision
        == DIFFERENT_SMALL
    )


def test_the_exact_p_and_nominal_level_stand_beside_every_interval():
    d = around(0.5, 1.5, 20)
    found = stated_plan().decide(d)
    assert found.exact_p == pytest.approx(signed_rank_p(d))
    assert found.nominal == pytest.approx(2 * stats.t.sf(3.11, 19))
    assert stated_plan().nominal == pytest.approx((7.4e-5, 0.0058, 0.021, 0.040), rel=0.05)


def test_the_exact_rule_can_only_make_a_stop_harder():
    """Over many random looks, a new plan stops only where the stated rules stop too, and with
    the same decision."""
    rng = np.random.default_rng(21)
    for _ in range(300):
        n = LOOKS[rng.integers(4)]
        d = np.round(rng.normal(rng.choice([0.0, 0.5, 1.5]), rng.choice([0.1, 0.7]), n) / 0.36)
        d = list(d * 0.36)
        both, stated = new_plan().decide(d), stated_plan().decide(d)
        if both.stops and both.decision != BOUNDED:
            assert both.decision == stated.decision


def test_no_decision_between_looks_nor_on_a_missing_score():
    with pytest.raises(IsotuneError, match=r"15 paired differences are no look .*10, 20, 30, 40"):
        stated_plan().decide(around(0.0, 1.0, 15))
    with pytest.raises(IsotuneError, match="nan"):
        stated_plan().decide([*around(0.0, 1.0, 9), float("nan")])
