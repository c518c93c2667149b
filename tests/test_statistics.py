"""Paired statistics across seeds, checked against answers worked out by hand (the arithmetic is in
the comments) or restated independently (sign flips enumerated, SciPy's own exact Wilcoxon)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from isotune.sweeps.correlation import spearman, stratified_spearman
from isotune.sweeps.power import minimum_detectable_difference, paired_t_power, pairs_needed
from isotune.sweeps.score_resolution import score_resolution
from isotune.sweeps.statistics import (
    holm,
    paired_comparison,
    seed_count_caveat,
    signed_rank_p,
    smallest_wilcoxon_p,
)
from isotune.tracking.reporting import counted

# t_{0.975, 4} from a table of Student's t: the 95% interval of 5 pairs
T_975_4DF = 2.7764451051977987
BASELINE = {0: 0.80, 1: 0.82, 2: 0.81, 3: 0.79, 4: 0.83}


def shifted(scores: dict[int, float], differences: list[float]) -> dict[int, float]:
    return {seed: scores[seed] + d for seed, d in zip(sorted(scores), differences, strict=True)}


def t_test_p_4df(t: float) -> float:
    """Two-sided p of Student's t with 4 degrees of freedom in closed form: with
    s = t / sqrt(4 + t^2), the CDF is 1/2 + 3s/4 - s^3/4, so p = 1 - s (3 - s^2) / 2."""
    s = abs(t) / math.sqrt(4 + t * t)
    return 1 - s * (3 - s * s) / 2


def brute_force_signed_rank_p(ranks: list[float], positive: list[bool]) -> float:
    """Share of the 2^n sign assignments whose T+ is at least as far from sum(ranks)/2."""
    centre = sum(ranks) / 2
    observed = abs(sum(r for r, plus in zip(ranks, positive, strict=True) if plus) - centre)
    flips = list(itertools.product([False, True], repeat=len(ranks)))
    as_extreme = sum(
        abs(sum(r for r, plus in zip(ranks, signs, strict=True) if plus) - centre)
        >= observed - 1e-12
        for signs in flips
    )
    return as_extreme / len(flips)


def assert_no_nan(comparison) -> None:
    for name, value in dataclasses.asdict(comparison).items():
        values = value if isinstance(value, tuple) else (value,)
        assert not any(isinstance(v, float) and math.isnan(v) for v in values), name


def test_better_on_every_seed_by_varied_margins():
    comparison = paired_comparison(BASELINE, shifted(BASELINE, [0.01, 0.02, 0.03, 0.04, 0.05]))
    assert comparison.n == 5 and comparison.seeds == (0, 1, 2, 3, 4)
    assert comparison.differences == (0.01, 0.02, 0.03, 0.04, 0.05)
    assert comparison.median_difference == pytest.approx(0.03)
    assert comparison.mean_difference == pytest.approx(0.03)
    # s^2 = (0.02^2 + 0.01^2 + 0 + 0.01^2 + 0.02^2) / 4 = 2.5e-4; s / sqrt(5) = sqrt(5e-5)
    standard_error = math.sqrt(5e-5)
    low, high = comparison.t_interval
    assert low == pytest.approx(0.03 - T_975_4DF * standard_error)  # 0.010368
    assert high == pytest.approx(0.03 + T_975_4DF * standard_error)  # 0.049632
    assert comparison.excludes_zero is True
    # t = 0.03 / sqrt(5e-5) = 3 sqrt(2); s = 3 sqrt(2) / sqrt(22) = 3 / sqrt(11);
    # p = 1 - (3 / sqrt(11)) (3 - 9/11) / 2 = 1 - 36 / (11 sqrt(11)) = 0.0132356
    assert comparison.ttest_p == pytest.approx(t_test_p_4df(3 * math.sqrt(2)), rel=1e-9)
    assert comparison.ttest_p == pytest.approx(1 - 36 / (11 * math.sqrt(11)), rel=1e-9)
    # all five signs positive: only all-plus and all-minus are that extreme, 2 / 2^5
    assert comparison.wilcoxon_p == 0.0625 and comparison.wilcoxon_n == 5
    assert comparison.bootstrap_interval is None  # 5 pairs: below the bootstrap's minimum
    assert comparison.unpaired_seeds == () and comparison.note == ""


def test_equal_on_every_seed_is_p_one_stated_and_never_nan():
    comparison = paired_comparison(BASELINE, dict(BASELINE))
    assert comparison.differences == (0.0,) * 5
    assert comparison.median_difference == 0.0 and comparison.mean_difference == 0.0
    assert comparison.t_interval == (0.0, 0.0) and comparison.excludes_zero is False
    # no sign of a difference: p = 1, so that the comparison counts in Holm's family
    assert comparison.ttest_p == 1.0 and comparison.wilcoxon_p == 1.0
    assert comparison.wilcoxon_n == 0 and comparison.bootstrap_interval is None
    assert comparison.note == "Equal to the baseline on all 5 seeds: p = 1 for both tests."
    assert_no_nan(comparison)


def test_the_same_gain_on_every_seed_is_a_point_interval_off_zero():
    comparison = paired_comparison(BASELINE, shifted(BASELINE, [0.01] * 5))
    assert comparison.t_interval == (0.01, 0.01) and comparison.excludes_zero is True
    assert comparison.ttest_p is None and "t-test is undefined" in comparison.note
    # five tied positive differences: still only all-plus and all-minus are as extreme
    assert comparison.wilcoxon_p == 0.0625
    assert_no_nan(comparison)


def test_differences_straddling_zero_give_an_interval_that_contains_it():
    comparison = paired_comparison(BASELINE, shifted(BASELINE, [0.02, -0.01, 0.04, -0.03, 0.05]))
    # mean 0.014; deviations 6, -24, 26, -44, 36 (1e-3): s^2 = 4520e-6 / 4 = 1130e-6
    standard_error = math.sqrt(1130e-6 / 5)
    low, high = comparison.t_interval
    assert low == pytest.approx(0.014 - T_975_4DF * standard_error)  # -0.0277
    assert high == pytest.approx(0.014 + T_975_4DF * standard_error)  # 0.0557
    assert low < 0 < high and comparison.excludes_zero is False
    assert comparison.ttest_p == pytest.approx(t_test_p_4df(0.014 / standard_error), rel=1e-9)
    # ranks of |d|: 0.01 -> 1 (-), 0.02 -> 2 (+), 0.03 -> 3 (-), 0.04 -> 4 (+), 0.05 -> 5 (+);
    # T+ = 11, 3.5 from the centre 7.5: the subsets of {1..5} summing to <= 4 are {}, {1}, {2},
    # {3}, {4}, {1,2}, {1,3} (7), as many sum to >= 11, so p = 14 / 32
    assert comparison.wilcoxon_p == 14 / 32


def test_a_missing_seed_pairs_only_the_seeds_both_have():
    other = shifted(BASELINE, [0.01, 0.02, 0.03, 0.04, 0.05])
    del other[4]
    other[7] = 0.9
    comparison = paired_comparison(BASELINE, other)
    assert comparison.n == 4 and comparison.seeds == (0, 1, 2, 3)
    assert comparison.differences == (0.01, 0.02, 0.03, 0.04)
    assert comparison.unpaired_seeds == (4, 7)
    assert "Seeds without a pair, left out: 4, 7." in comparison.note
    assert comparison.wilcoxon_p == 2 / 2**4


def test_ties_and_zeros_have_an_exact_p_given_the_ties():
    baseline = {0: 0.80, 1: 0.82, 2: 0.80, 3: 0.86, 4: 0.81, 5: 0.90}
    other = {0: 0.82, 1: 0.84, 2: 0.81, 3: 0.85, 4: 0.84, 5: 0.90}
    assert other[0] - baseline[0] != other[1] - baseline[1]  # a tie that float noise would break
    comparison = paired_comparison(baseline, other)
    assert comparison.differences == (0.02, 0.02, 0.01, -0.01, 0.03, 0.0)
    # the zero is dropped; midranks of |d| = 0.02, 0.02, 0.01, 0.01, 0.03 are 3.5, 3.5, 1.5, 1.5, 5
    # and T+ = 13.5, 6 from the centre 7.5: the sign sets leaving out at most 1.5 of the rank sum
    # ({}, either 1.5) and their mirror images are as extreme, so p = 6 / 32
    assert comparison.wilcoxon_n == 5
    assert comparison.wilcoxon_p == 6 / 32
    assert comparison.wilcoxon_p == brute_force_signed_rank_p(
        [3.5, 3.5, 1.5, 1.5, 5.0], [True, True, True, False, True]
    )
    assert "1 zero difference left out of the Wilcoxon test, which uses 5 pairs" in (
        comparison.note
    )


@pytest.mark.parametrize("seed", range(4))
def test_signed_rank_p_agrees_with_independent_computations(seed):
    rng = np.random.default_rng(seed)
    steps = rng.integers(1, 4, size=9) * rng.choice([-1, 1], size=9)  # GLUE-like: ties
    ranks = stats.rankdata(np.abs(steps)).tolist()
    assert signed_rank_p(steps) == pytest.approx(
        brute_force_signed_rank_p(ranks, (steps > 0).tolist()), abs=1e-12
    )
    distinct = rng.normal(size=9)  # no ties: SciPy's exact distribution applies
    exact = stats.wilcoxon(distinct, method="exact").pvalue
    assert signed_rank_p(distinct) == pytest.approx(exact, abs=1e-12)


def test_one_pair_and_no_pair_are_stated():
    one = paired_comparison({0: 0.8, 1: 0.7}, {0: 0.81})
    assert one.n == 1 and one.mean_difference == pytest.approx(0.01)
    assert one.t_interval is None and one.excludes_zero is None and one.ttest_p is None
    assert one.wilcoxon_p == 1.0  # one sign: both outcomes as extreme
    assert "One pair: no spread" in one.note
    none = paired_comparison({0: 0.8}, {1: 0.81})
    assert none.n == 0 and none.mean_difference is None and none.median_difference is None
    assert none.wilcoxon_p is None and none.unpaired_seeds == (0, 1)
    assert "nothing to compare" in none.note
    assert_no_nan(one)
    assert_no_nan(none)


def test_bootstrap_interval_from_ten_pairs_seeded():
    differences = [0.01, -0.01, 0.02, 0.03, 0.0, 0.01, 0.04, -0.02, 0.02, 0.01, 0.03, 0.02]
    baseline = {seed: 0.8 for seed in range(12)}
    other = shifted(baseline, differences)
    comparison = paired_comparison(baseline, other, seed=3)
    low, high = comparison.bootstrap_interval
    assert min(differences) < low < comparison.mean_difference < high < max(differences)
    t_low, t_high = comparison.t_interval
    assert 0.5 < (high - low) / (t_high - t_low) < 1.1  # the same spread, resampled
    assert paired_comparison(baseline, other, seed=3).bootstrap_interval == (low, high)
    constant = paired_comparison(baseline, shifted(baseline, [0.01] * 12))
    assert constant.bootstrap_interval == (0.01, 0.01)
    five = paired_comparison(BASELINE, shifted(BASELINE, differences[:5]))
    assert five.bootstrap_interval is None and five.t_interval is not None


def test_non_finite_score_is_refused():
    with pytest.raises(ValueError, match=r"seeds \[1\]"):
        paired_comparison({0: 0.8, 1: 0.8}, {0: 0.81, 1: math.nan})


def test_holm_on_a_hand_worked_example():
    adjusted, comparisons = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005, "e": None})
    # e (no test) ranks as 1: sorted d 0.005, a 0.01, c 0.03, b 0.04, e; times 5, 4, 3, 2:
    # 0.025, 0.04, 0.09, 0.08; running maximum: 0.025, 0.04, 0.09, 0.09
    assert comparisons == 5
    assert adjusted == pytest.approx({"d": 0.025, "a": 0.04, "c": 0.09, "b": 0.09, "e": None})


def test_holm_caps_at_one_and_counts_a_comparison_without_p_in_its_family():
    assert holm({"x": 0.6, "y": 0.7}) == ({"x": 1.0, "y": 1.0}, 2)
    assert holm({"x": None}) == ({"x": None}, 1)
    assert holm({}) == ({}, 0)
    # an untestable comparison is still a question asked: m = 2, so 0.01 becomes 0.02
    assert holm({"tested": 0.01, "no spread": None}) == ({"tested": 0.02, "no spread": None}, 2)


def test_holm_family_holds_an_arm_equal_to_its_baseline_at_p_one():
    better = paired_comparison(BASELINE, shifted(BASELINE, [0.01, 0.02, 0.015, 0.03, 0.025]))
    equal = paired_comparison(BASELINE, dict(BASELINE))
    adjusted, m = holm({"better": better.wilcoxon_p, "equal": equal.wilcoxon_p})
    assert m == 2 and adjusted == {"better": 0.125, "equal": 1.0}  # 2 x 0.0625, then 1


def test_spearman_monotone_relation_is_one_with_an_exact_p():
    correlation = spearman([1, 2, 3, 4, 5], [1, 4, 9, 16, 25])
    # only the identity of the 5! = 120 orderings (and its reverse, rho = -1) reach |rho| = 1
    assert correlation.rho == pytest.approx(1.0) and correlation.p == pytest.approx(2 / 120)
    assert correlation.n == 5
    assert spearman([1, 2, 3, 4, 5], [5, 3, 2, 1, 0]).rho == pytest.approx(-1.0)


def test_spearman_exact_p_of_a_partial_relation():
    correlation = spearman([1, 2, 3, 4], [10, 20, 40, 30])
    # rho = 1 - 6 * 2 / (4 * 15) = 0.8; |rho| >= 0.8 for the identity and the 3 adjacent swaps
    # (sum d^2 = 2) and their 4 reverses: 8 of 24 orderings
    assert correlation.rho == pytest.approx(0.8) and correlation.p == pytest.approx(8 / 24)


def test_spearman_above_eight_points_uses_the_t_approximation():
    y = [2, 1, 4, 3, 6, 5, 8, 7, 10, 9]
    correlation = spearman(range(10), y)
    # every rank off by 1: rho = 1 - 6 * 10 / (10 * 99) = 1 - 2/33
    rho = 1 - 2 / 33
    t = rho * math.sqrt(8 / (1 - rho**2))
    assert correlation.rho == pytest.approx(rho)
    assert correlation.p == pytest.approx(2 * stats.t.sf(t, 8))
    assert correlation.note == "p from the t approximation."


def test_spearman_degenerate_input_is_none_with_a_note():
    assert spearman([1, 2, 3, 4], [0.5, 0.5, 0.5, 0.5]) == (
        None,
        None,
        4,
        "y constant: rho undefined.",
    )
    assert spearman([1, 2], [3, 4]).rho is None
    with pytest.raises(ValueError, match="one length"):
        spearman([1, 2, 3], [1, 2])


def test_smallest_wilcoxon_p_and_the_sentence_under_the_table():
    assert smallest_wilcoxon_p(5) == 0.0625
    assert smallest_wilcoxon_p(6) == 0.03125
    assert smallest_wilcoxon_p(1) == 1.0
    assert smallest_wilcoxon_p(5) == signed_rank_p([0.01, 0.02, 0.03, 0.04, 0.05])
    with pytest.raises(ValueError):
        smallest_wilcoxon_p(0)
    assert seed_count_caveat(5) == (
        "With 5 non-zero pairs the smallest two-sided Wilcoxon p is 0.0625, so "
        "'not significant' there is not 'no effect'."
    )
    assert seed_count_caveat(6).startswith(
        "With 6 non-zero pairs the smallest two-sided Wilcoxon p is 0.03125"
    )
    # RTE's cosreg against none: 5 seeds, one tied, so 4 pairs ranked and a floor of 0.125
    assert seed_count_caveat(4).startswith(
        "With 4 non-zero pairs the smallest two-sided Wilcoxon p is 0.125"
    )


def test_a_count_of_one_reads_in_the_singular():
    assert seed_count_caveat(1).startswith(
        "With 1 non-zero pair the smallest two-sided Wilcoxon p is 1"
    )
    assert spearman([0.1, 0.2], [0.3, 0.4]).note == "2 points: a rank correlation needs at least 3."
    assert spearman([0.1], [0.3]).note == "1 point: a rank correlation needs at least 3."
    assert (counted(1, "search", "searches"), counted(2, "search", "searches")) == (
        "1 search",
        "2 searches",
    )
    one_left = paired_comparison({0: 0.80, 1: 0.82, 2: 0.81}, {0: 0.80, 1: 0.85, 2: 0.79})
    assert "1 zero difference left out of the Wilcoxon test, which uses 2 pairs." in one_left.note


def float32_accuracy(correct: int, examples: int = 277) -> float:
    """An accuracy as results.json stores it: k / N in float32, read back as a float."""
    return float(np.float32(correct / examples))


def test_differences_are_compared_at_the_accuracy_resolution():
    # in examples of RTE's 277: +2, -2, +7, 0, +7. In float32, 144/277 - 142/277 and
    # 142/277 - 140/277 differ by 6e-8, which broke the tie of |+2| and |-2|: p 0.25, where
    # the tied p is 0.375
    baseline = {seed: float32_accuracy(k) for seed, k in enumerate([142, 142, 150, 156, 160])}
    other = {seed: float32_accuracy(k) for seed, k in enumerate([144, 140, 157, 156, 167])}
    comparison = paired_comparison(baseline, other)
    assert comparison.differences[0] == -comparison.differences[1] == pytest.approx(2 / 277)
    assert comparison.wilcoxon_n == 4
    assert comparison.wilcoxon_p == signed_rank_p([2, -2, 7, 7]) == 0.375


def test_no_spread_at_the_metric_resolution_gives_an_undefined_t_test():
    # one example better on every seed, stored as float32: a spread of 1e-8, not a p of 0
    baseline = {seed: float32_accuracy(k) for seed, k in enumerate([140, 141, 165, 150, 160])}
    other = {seed: float32_accuracy(k + 1) for seed, k in enumerate([140, 141, 165, 150, 160])}
    comparison = paired_comparison(baseline, other)
    assert comparison.ttest_p is None and "t-test is undefined" in comparison.note
    assert comparison.t_interval == pytest.approx((1 / 277, 1 / 277))


def test_off_any_grid_float32_noise_still_ties():
    # F1 scores, on no grid: differences equal up to float32's error are one value
    baseline = {0: 0.8424437046051025, 1: 0.8548123836517334, 2: 0.8557376861572266}
    other = {s: float(np.float32(v + 0.0123)) for s, v in baseline.items()}
    comparison = paired_comparison(baseline, other)
    assert len(set(comparison.differences)) == 1 and comparison.ttest_p is None


def test_score_resolution_reads_the_grid_from_the_scores():
    assert score_resolution([float32_accuracy(k) for k in (140, 151, 166)]) == 1 / 277
    assert score_resolution([100 * float32_accuracy(k) for k in (140, 151, 166)]) == 100 / 277
    f1 = [0.8424437046051025, 0.8548123836517334, 0.865517258644104, 0.8557376861572266]
    assert score_resolution(f1) is None  # MRPC's F1 of the study's baseline: on no grid
    assert score_resolution(f1[:3]) is None
    # values off a grid by float64 arithmetic's 1e-7, more than float32's error: no grid
    assert score_resolution([0.6 + 1.3e-7, 0.5, 0.55]) is None
    assert score_resolution([]) is None


SIMULATED_TESTS = 200_000  # the power's Monte Carlo error: sqrt(0.8 * 0.2 / 200000) = 0.0009
SIMULATION_ERROR = 4 * math.sqrt(0.8 * 0.2 / SIMULATED_TESTS)


def simulated_power(difference: float, spread: float, pairs: int, alpha: float = 0.05) -> float:
    """The share of ``SIMULATED_TESTS`` paired t-tests at ``alpha`` that reject, each on
    ``pairs`` normal differences of mean ``difference`` and standard deviation ``spread``:
    the power by its definition, independent of any noncentral t (fixed seed)."""
    d = np.random.default_rng(0).normal(difference, spread, size=(SIMULATED_TESTS, pairs))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(pairs))
    return float(np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, pairs - 1)))


def quantile_sum_difference(spread: float, pairs: int) -> float:
    """The textbook (t_{0.975, n-1} + t_{0.8, n-1}) s / sqrt(n) that understates at few pairs."""
    return (stats.t.ppf(0.975, pairs - 1) + stats.t.ppf(0.8, pairs - 1)) * spread / math.sqrt(pairs)


@pytest.mark.parametrize("pairs", [2, 3, 5, 20])
def test_the_detectable_difference_has_eighty_percent_power_in_simulated_t_tests(pairs):
    detectable = minimum_detectable_difference(1.48, pairs)
    assert simulated_power(detectable, 1.48, pairs) == pytest.approx(0.8, abs=SIMULATION_ERROR)
    assert paired_t_power(detectable, 1.48, pairs) == pytest.approx(0.8, abs=1e-9)


def test_the_quantile_sum_has_less_than_eighty_percent_power_at_few_pairs():
    # power.md: 14% below the exact value at 2 pairs, 5% at 3, 1.2% at 5; equal at 20
    assert simulated_power(quantile_sum_difference(1.48, 2), 1.48, 2) < 0.8 - 0.05
    for pairs, short in ((2, 0.14), (3, 0.05), (5, 0.012), (20, 0.0)):
        exact = minimum_detectable_difference(1.48, pairs)
        assert 1 - quantile_sum_difference(1.48, pairs) / exact == pytest.approx(short, abs=0.003)


@pytest.mark.parametrize(
    ("difference", "pairs"), [(-3.0, 2), (40.0, 2), (0.5, 3), (-0.9, 20), (5.0, 20)]
)
def test_the_power_matches_simulated_t_tests_in_both_tails_and_far_out(difference, pairs):
    # 40 at 2 pairs: noncentrality 38, where SciPy's nct.cdf of the lower tail is NaN
    exact = paired_t_power(difference, 1.48, pairs)
    assert math.isfinite(exact) and paired_t_power(-difference, 1.48, pairs) == exact
    assert simulated_power(difference, 1.48, pairs) == pytest.approx(exact, abs=SIMULATION_ERROR)


def test_pairs_needed_for_rte_cosreg_detect_its_mean_in_simulated_t_tests():
    # power.md: mean 1.01, s 1.48 points; MDE about 2.4 at 5 pairs, about 1.0 at 20
    assert minimum_detectable_difference(1.48, 5) == pytest.approx(2.4, abs=0.1)
    assert minimum_detectable_difference(1.48, 20) == pytest.approx(1.0, abs=0.05)
    needed = pairs_needed(1.01, 1.48)
    assert needed == pytest.approx(20, abs=2) and pairs_needed(-1.01, 1.48) == needed
    assert simulated_power(1.01, 1.48, needed) > 0.8 - SIMULATION_ERROR
    assert simulated_power(1.01, 1.48, needed - 1) < 0.8 + SIMULATION_ERROR
    assert minimum_detectable_difference(1.48, needed) <= 1.01
    assert minimum_detectable_difference(1.48, needed - 1) > 1.01
    assert pairs_needed(2.0, 1.0) == 5  # 4 pairs have power 0.755 (simulated: 0.756)
    assert simulated_power(2.0, 1.0, 4) < 0.8 - SIMULATION_ERROR
    assert pairs_needed(0.0, 1.48) is None and minimum_detectable_difference(1.48, 1) is None


def test_differences_without_spread_give_no_plan():
    correct = [141, 142, 151, 157, 161]  # RTE dev examples right, of 277
    for gained in (1, 0):  # five pairs all at +1 example, and all equal to the baseline
        baseline = {seed: float32_accuracy(k) for seed, k in enumerate(correct)}
        other = {seed: float32_accuracy(k + gained) for seed, k in enumerate(correct)}
        comparison = paired_comparison(baseline, other)
        assert comparison.spread == 0.0
        assert minimum_detectable_difference(comparison.spread, comparison.n) is None
        assert pairs_needed(gained / 277, comparison.spread) is None


def test_stratified_spearman_sees_within_strata_what_pooling_hides():
    # three arms: within each, the score rises with the measure (-1, 0, +1 about its median);
    # across arms, the more isotropic arm scores lower, so the pooled rho is negative
    x = [m + d for m in (0.0, 10.0, 20.0) for d in (-1.0, 0.0, 1.0)]
    y = [m + d for m in (0.875, 0.5, 0.125) for d in (-0.0625, 0.0, 0.0625)]  # exact in binary
    arms = [arm for arm in "abc" for _ in range(3)]
    assert spearman(x, y).rho == pytest.approx(-0.8)
    within = stratified_spearman(x, y, arms)
    # centred, the three arms are the same three points: rho = 1; of the 3!^3 = 216 orderings
    # within arms only all-identity (rho 1) and all-reversed (rho -1) are as extreme
    assert within.rho == pytest.approx(1.0) and within.p == pytest.approx(2 / 216)
    assert within.n == 9 and "exact permutation" in within.note


def test_stratified_spearman_samples_permutations_above_the_exact_limit():
    rng = np.random.default_rng(3)
    arms = [arm for arm in range(4) for _ in range(5)]  # 5!^4 = 2e8 orderings: sampled
    x = rng.normal(size=20)
    y = x + 0.3 * rng.normal(size=20) + np.repeat([3.0, -3.0, 1.0, 0.0], 5)
    within = stratified_spearman(x, y, arms, seed=0)
    assert within.rho > 0.7 and within.p < 0.01 and "9999 permutations" in within.note
    assert stratified_spearman(x, y, arms, seed=0) == within  # seeded: the same p
    # no relation within strata: a p far from small
    unrelated = stratified_spearman(x, rng.normal(size=20), arms)
    assert unrelated.p > 0.05


def test_stratified_spearman_leaves_out_single_point_strata_and_degenerate_input():
    assert stratified_spearman([1, 2, 3], [1, 2, 3], ["a", "b", "c"]).rho is None
    flat = stratified_spearman([1, 2, 3, 4], [5, 5, 6, 6], ["a", "a", "b", "b"])
    assert flat.rho is None and "centred y constant" in flat.note


def test_a_within_strata_rho_from_too_few_orderings_says_its_p_cannot_be_small():
    """4 runs in 2 arms: 2! x 2! = 4 orderings within arms, so no p goes below 0.5 (each
    ordering and its mirror are as extreme): a rho of 1 says nothing, and the note says so."""
    within = stratified_spearman([1, 2, 10, 12], [0.5, 0.6, 0.7, 0.9], ["a", "a", "b", "b"])
    assert within.rho == pytest.approx(1.0) and within.p == 0.5
    assert within.note.endswith(
        "With 4 orderings within strata no p falls below 0.5: too few points to tell any rho "
        "from chance at 0.05."
    )
    x = [m + d for m in (0.0, 10.0, 20.0) for d in (-1.0, 0.0, 1.0)]  # 216 orderings: 2 / 216
    enough = stratified_spearman(x, x, [arm for arm in "abc" for _ in range(3)])
    assert enough.note == "centred in each stratum; exact permutation p within strata."
