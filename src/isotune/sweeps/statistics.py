"""Paired statistics across seeds: is a configuration's difference from its baseline more than
seed noise? Runs are paired by the seed that varies (docs/sweeps.md#pairing), differences taken
at the scores' resolution; with a sweep's few seeds the tests are weak (``smallest_wilcoxon_p``).
Undefined values are ``None`` with a ``note`` saying why, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from scipy import stats

from isotune.sweeps.score_resolution import at_resolution
from isotune.tracking.reporting import counted

CONFIDENCE = 0.95  # of every interval; the tests are two-sided at 1 - CONFIDENCE
BOOTSTRAP_MIN_PAIRS = 10  # below, a bootstrap interval of the mean is too narrow
BOOTSTRAP_RESAMPLES = 9999  # scipy's default; BCa needs many for stable tail quantiles

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class PairedComparison:
    """A configuration against its baseline over the seeds both have (see ``paired_comparison``);
    ``note`` explains every None and every departure from the plain computation ("" if none)."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    unpaired_seeds: tuple[int, ...]
    note: str
    median_difference: float | None = None
    mean_difference: float | None = None
    t_interval: tuple[float, float] | None = None
    bootstrap_interval: tuple[float, float] | None = None
    excludes_zero: bool | None = None
    wilcoxon_p: float | None = None
    wilcoxon_n: int = 0
    ttest_p: float | None = None

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def spread(self) -> float | None:
        """The sample standard deviation of the differences, None below 2 pairs. Exactly 0 when
        every difference is equal (no spread, no estimate to plan from): NumPy's, through the
        float rounding of their mean, can be 5e-19 there, which would plan a test on it."""
        if self.n < 2:
            return None
        if len(set(self.differences)) == 1:
            return 0.0
        return float(np.std(self.differences, ddof=1))


def paired_comparison(
    baseline: Mapping[int, float],
    other: Mapping[int, float],
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> PairedComparison:
    """Compare ``other`` with ``baseline``, both ``{seed: score}``, on the seeds they share.

    With the differences d_i = other_i - baseline_i taken at the scores' resolution (see
    ``at_resolution``: float32 noise neither breaks a tie nor hides a zero), n pairs, mean m and
    sample standard deviation s:
    - Student t interval (Student 1908): m ± t_{(1 + confidence) / 2, n-1} s / sqrt(n), from
      n >= 2. When every d_i is the same d there is no spread: the interval is the point [d, d]
      and the t-test is undefined (None), both stated in ``note``; when that d is 0 the arm
      equals its baseline on every seed, and both tests give p = 1 (no sign of a difference), so
      that it counts in Holm's family as the comparison it is.
    - Paired t-test p: ``scipy.stats.ttest_1samp(d, 0)``, which is ``ttest_rel(other, baseline)``
      on the rounded differences, so that it agrees with the interval (p < 0.05 iff it excludes 0).
    - Bootstrap interval of the mean, from n >= ``BOOTSTRAP_MIN_PAIRS``: ``scipy.stats.bootstrap``,
      BCa (Efron 1987: corrects the bias and skew of the resampled means, second-order accurate
      where the percentile interval is first-order), seeded by ``seed``. Not below 10 pairs: the
      bootstrap spread of a mean is s sqrt((n-1)/n) / sqrt(n) with normal rather than t tails,
      which at n = 5 makes the interval about a third narrower than Student's.
    - Wilcoxon signed-rank p (Wilcoxon 1945), two-sided: see ``signed_rank_p``. Zero differences
      are dropped (Wilcoxon's own convention, scipy's ``zero_method="wilcox"``: a tied seed says
      nothing about the direction), tied |d_i| get midranks, and the p is exact given those ties.
    """
    common = sorted(baseline.keys() & other.keys())
    unpaired = tuple(sorted(baseline.keys() ^ other.keys()))
    scores = [float(x) for s in common for x in (baseline[s], other[s])]
    d = at_resolution(np.array([other[s] - baseline[s] for s in common], dtype=float), scores)
    if not np.isfinite(d).all():
        bad = [s for s, value in zip(common, d, strict=True) if not math.isfinite(value)]
        raise ValueError(f"non-finite score on seeds {bad}: leave failed runs out before pairing")
    notes = (
        [f"Seeds without a pair, left out: {', '.join(map(str, unpaired))}."] if unpaired else []
    )
    n = len(d)
    if n == 0:
        notes.append("No seed has a score for both configurations: nothing to compare.")
        return PairedComparison(
            seeds=(), differences=(), unpaired_seeds=unpaired, note=" ".join(notes)
        )

    mean = float(d.mean())
    spread = bool(np.any(d != d[0]))
    t_interval = bootstrap_interval = ttest_p = None
    if n == 1:
        notes.append("One pair: no spread, so no interval and no t-test.")
    elif not spread and d[0] == 0:
        t_interval, ttest_p = (0.0, 0.0), 1.0
        notes.append(f"Equal to the baseline on all {n} seeds: p = 1 for both tests.")
    elif not spread:
        t_interval = (float(d[0]), float(d[0]))
        notes.append(
            f"All {n} differences equal {d[0]:g}: no spread, so the interval is the point "
            f"[{d[0]:g}, {d[0]:g}] and the t-test is undefined."
        )
    else:
        quantile = float(stats.t.ppf((1 + confidence) / 2, n - 1))
        half_width = quantile * float(d.std(ddof=1)) / math.sqrt(n)
        t_interval = (mean - half_width, mean + half_width)
        ttest_p = float(stats.ttest_1samp(d, 0.0).pvalue)
    if n >= BOOTSTRAP_MIN_PAIRS:
        bootstrap_interval = _bootstrap_interval(d, seed) if spread else t_interval
    nonzero = d[d != 0]
    wilcoxon_p = signed_rank_p(nonzero) if len(nonzero) else 1.0
    if 0 < len(nonzero) < n:
        notes.append(
            f"{counted(n - len(nonzero), 'zero difference')} left out of the Wilcoxon test, "
            f"which uses {counted(len(nonzero), 'pair')}."
        )
    return PairedComparison(
        seeds=tuple(common),
        differences=tuple(float(x) for x in d),
        unpaired_seeds=unpaired,
        median_difference=float(np.median(d)),
        mean_difference=mean,
        t_interval=t_interval,
        bootstrap_interval=bootstrap_interval,
        excludes_zero=None if t_interval is None else bool(t_interval[0] > 0 or t_interval[1] < 0),
        wilcoxon_p=wilcoxon_p,
        wilcoxon_n=len(nonzero),
        ttest_p=ttest_p,
        note=" ".join(notes),
    )


def _bootstrap_interval(d: np.ndarray, seed: int) -> tuple[float, float]:
    ci = stats.bootstrap(
        (d,),
        np.mean,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="BCa",
        rng=seed,
    ).confidence_interval
    return float(ci.low), float(ci.high)


def signed_rank_p(differences: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p of non-zero ``differences``, exact given their ties.

    Ranks r_i of |d_i| (midranks for ties); T+ = sum of r_i over d_i > 0. Under the null every
    sign is + or - with probability 1/2 independently, so T+ is distributed as the sum of a
    random subset of the r_i, and p = P(|T+ - E T+| >= |t+ - E T+|) with E T+ = sum(r_i) / 2.
    Midranks are multiples of 1/2, so the distribution of 2 T+ is built exactly by the shift
    algorithm (Streitberg & Röhmel 1986), one rank at a time, in O(n^3).

    Why not ``scipy.stats.wilcoxon`` directly: with tied |d|, SciPy 1.17 is exact only up to 13
    pairs, by enumerating the 2^n sign flips (2.1 s a test at 13 pairs on 2 CPU cores), and
    above that it switches to the normal approximation. Measured on 30 random tied samples per n,
    with no zeros: SciPy's p equals this one at n = 5, 8, 10 and 13, and differs by up to 1.12x
    at n = 14 and 1.33x at n = 16. This p is exact at every n, in milliseconds; a brute-force
    enumeration of the sign flips gives the same value (tests/test_statistics.py). Without ties it
    equals ``wilcoxon(d, method="exact")``.
    """
    d = np.asarray(differences, dtype=float)
    if d.size == 0 or not np.all(d != 0):
        raise ValueError(f"signed_rank_p needs non-zero differences, got {d.tolist()}")
    doubled = np.rint(2 * stats.rankdata(np.abs(d))).astype(int)
    total = int(doubled.sum())
    probability = np.zeros(total + 1)
    probability[0] = 1.0
    for rank in doubled:
        shifted = np.zeros_like(probability)
        shifted[rank:] = probability[:-rank]
        probability = (probability + shifted) / 2
    observed = abs(2 * int(doubled[d > 0].sum()) - total)
    as_extreme = np.abs(2 * np.arange(total + 1) - total) >= observed
    return min(1.0, float(probability[as_extreme].sum()))


def smallest_wilcoxon_p(n: int) -> float:
    """The smallest two-sided Wilcoxon signed-rank p that ``n`` non-zero pairs can give: 2 / 2^n,
    reached when all differences share one sign (0.0625 at n = 5, below 0.05 only from n = 6)."""
    if n < 1:
        raise ValueError(f"the Wilcoxon test needs at least one pair, got n = {n}")
    return min(1.0, 2.0 / 2**n)


def seed_count_caveat(nonzero_pairs: int) -> str:
    """The sentence under a paired-statistics table on what a Wilcoxon test of
    ``nonzero_pairs`` can show: zero differences are dropped before ranking, so the floor
    2 / 2^k counts the non-zero pairs k, not the seeds (4 of 5 non-zero: 0.125, not 0.0625)."""
    floor = smallest_wilcoxon_p(nonzero_pairs)
    weak = floor > 1 - CONFIDENCE
    so = (
        ", so 'not significant' there is" if weak else "; with few seeds 'not significant' is still"
    )
    return (
        f"With {counted(nonzero_pairs, 'non-zero pair')} the smallest two-sided Wilcoxon p is "
        f"{floor:.4g}{so} not 'no effect'."
    )


def holm(pvalues: Mapping[K, float | None]) -> tuple[dict[K, float | None], int]:
    """Holm-Bonferroni adjusted p (Holm 1979) over the family ``pvalues``, and m, its size.

    With the m p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted
    p~_(i) = min(1, max_{j <= i} (m - j + 1) p_(j)): monotone in i and capped at 1. Rejecting
    where p~ < alpha controls the family-wise error rate at alpha. Every entry is a comparison the
    report makes, so every entry counts in m: one without a test (None: a difference with no
    spread) ranks as p = 1 and stays None. Leaving it out would make m smaller than the number of
    questions asked, and every other p too small.
    """
    ranked = sorted(pvalues.items(), key=lambda item: 1.0 if item[1] is None else item[1])
    m = len(ranked)
    adjusted: dict[K, float | None] = {}
    running = 0.0
    for i, (key, p) in enumerate(ranked):
        running = max(running, min(1.0, (m - i) * (1.0 if p is None else p)))
        adjusted[key] = None if p is None else running
    return {key: adjusted[key] for key in pvalues}, m
