"""Paired statistics across seeds: is a configuration's difference from its baseline more than
seed noise, and does one per-run number (an isotropy measure) predict another (the score)?

Runs of a configuration and of its baseline that share a seed share the data order (``seed_data``)
or the initialisation of the new layers (``seed_init``), whichever varies, so they are compared as
pairs (:mod:`isotune.sweeps.seeds`): every statistic below is of the
differences ``other - baseline`` over the seeds both have. With the handful of seeds a sweep
affords the tests are weak (see ``smallest_wilcoxon_p``), which the report must say next to them.
Undefined values (no spread, too few pairs, constant input) are ``None`` with a ``note`` saying
why, never NaN. NumPy and SciPy only, so that it serves the aggregate and a notebook alike.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import numpy as np
from scipy import optimize, stats

from isotune.tracking.reporting import counted

__all__ = [
    "BOOTSTRAP_MIN_PAIRS",
    "CONFIDENCE",
    "POWER",
    "Correlation",
    "PairedComparison",
    "holm",
    "minimum_detectable_difference",
    "paired_comparison",
    "paired_t_power",
    "pairs_needed",
    "score_resolution",
    "seed_count_caveat",
    "signed_rank_p",
    "smallest_wilcoxon_p",
    "spearman",
    "stratified_spearman",
]

CONFIDENCE = 0.95  # of every interval; the tests are two-sided at 1 - CONFIDENCE
BOOTSTRAP_MIN_PAIRS = 10  # below, a bootstrap interval of the mean is too narrow
BOOTSTRAP_RESAMPLES = 9999  # scipy's default; BCa needs many for stable tail quantiles
POWER = 0.8  # of the minimum detectable difference and the pairs needed (Cohen's convention)
# Scores are stored as float32: k / N rounded once to float32 is off by at most 2^-24 of it.
GRID_TOLERANCE = 2.0**-23  # a score on a 1/N grid: k within this share of k (twice the bound)
FLOAT32_TOLERANCE = 2.0**-20  # off any grid, differences closer than this share of |score| tie
MAX_EXAMPLES = 100_000  # the largest evaluation set whose 1/N grid ``score_resolution`` looks for
SCORE_UNITS = (1.0, 100.0)  # scores as fractions, or as percentages (the sweep tables' points)
EXACT_SPEARMAN_MAX_N = 8  # all 8! = 40320 orderings enumerated at most; above, the t approximation
EXACT_PERMUTATIONS_MAX = 40320  # within-strata orderings enumerated at most; above, sampled
PERMUTATION_SAMPLES = 9999  # sampled within-strata orderings: p = (1 + as extreme) / (1 + this)

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class PairedComparison:
    """A configuration against its baseline over the seeds both have (see ``paired_comparison``).

    ``differences[i]`` is other - baseline on ``seeds[i]``; ``wilcoxon_n`` counts the non-zero
    differences the signed-rank test used; ``excludes_zero`` says whether the Student t interval
    lies on one side of 0 (None without an interval). ``note`` explains every None and every
    departure from the plain computation ("" when there is none).
    """

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    unpaired_seeds: tuple[int, ...]
    median_difference: float | None
    mean_difference: float | None
    t_interval: tuple[float, float] | None
    bootstrap_interval: tuple[float, float] | None
    excludes_zero: bool | None
    wilcoxon_p: float | None
    wilcoxon_n: int
    ttest_p: float | None
    note: str

    @property
    def n(self) -> int:
        """The number of pairs: seeds with a score for both configurations."""
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


class Correlation(NamedTuple):
    """Spearman's rho of ``n`` points and its two-sided p; None (with ``note``) when undefined."""

    rho: float | None
    p: float | None
    n: int
    note: str


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
    - Student t interval (Student 1908): m ± t_{(1 + confidence) / 2, n-1} s / sqrt(n) (95% by
      default; a stated test's at its own level), from n >= 2. When every
      d_i is the same d there is no spread: the interval is the point [d, d] and the t-test is
      undefined (None), both stated in ``note``; when that d is 0 the arm equals its baseline on
      every seed, and both tests give p = 1 (no sign of a difference), so that it counts in
      Holm's family as the comparison it is.
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
            seeds=(),
            differences=(),
            unpaired_seeds=unpaired,
            median_difference=None,
            mean_difference=None,
            t_interval=None,
            bootstrap_interval=None,
            excludes_zero=None,
            wilcoxon_p=None,
            wilcoxon_n=0,
            ttest_p=None,
            note=" ".join(notes),
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


def score_resolution(scores: Sequence[float]) -> float | None:
    """The step of the grid every score lies on, as a share of a set of N examples does:
    ``unit / N`` for the smallest N <= ``MAX_EXAMPLES`` (``unit``: 1, or 100 for points, with
    every |score| <= unit) whose multiples hold every score within float32's error; None where no
    grid fits (an F1, a correlation) or no score is given. Accuracy on RTE's 277 dev examples:
    1/277.

    The grid is read from the scores themselves, so it needs no record of N: one score off the
    grid rules that N out. A grid found by chance is harmless: at small N the chance is
    negligible (below 1e-12 for N < 1000 and 6 scores), and any grid that fits moves no score
    by more than float32's own error (2^-23 of it).
    """
    values = np.abs(np.asarray(scores, dtype=float))
    if values.size == 0 or not np.isfinite(values).all():
        return None
    examples = np.arange(1, MAX_EXAMPLES + 1, dtype=float)
    for unit in SCORE_UNITS:
        if values.max() > unit:
            continue
        counts = np.outer(examples, values / unit)  # k = score * N / unit: integers on the grid
        fits = np.all(np.abs(counts - np.rint(counts)) <= GRID_TOLERANCE * counts, axis=1)
        if fits.any():
            return unit / float(examples[int(np.argmax(fits))])
    return None


def at_resolution(differences: np.ndarray, scores: Sequence[float]) -> np.ndarray:
    """``differences`` of ``scores`` as the metric can tell them apart (power.md, "Ties").

    On the scores' grid (``score_resolution``: accuracy on N examples), each difference is the
    nearest multiple of the step, so that two one-example differences are equal bit for bit.
    Off any grid, differences within ``FLOAT32_TOLERANCE`` of the largest |score| of each other
    are one value (the smallest |d| of the run of such values, with its own sign) and those that
    close to 0 are 0: float32 storage moves a score by up to 2^-24 of it, which would otherwise
    break a tie (a Wilcoxon p of 0.1875 where the tied p is 0.3125) or give a spread of 1e-8 a
    t-test p of 0.
    """
    step = score_resolution(scores)
    if step is not None:
        return np.rint(differences / step) * step
    tolerance = FLOAT32_TOLERANCE * max([1.0, *np.abs(scores)])
    magnitude = np.abs(differences)
    snapped = np.where(magnitude <= tolerance, 0.0, magnitude)
    order = np.argsort(snapped, kind="stable")
    for previous, current in itertools.pairwise(order):
        if snapped[current] - snapped[previous] <= tolerance:
            snapped[current] = snapped[previous]
    return np.sign(differences) * snapped


def _bootstrap_interval(d: np.ndarray, seed: int) -> tuple[float, float]:
    """The BCa bootstrap interval of the mean of ``d`` (see ``paired_comparison``)."""
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
    pairs = counted(nonzero_pairs, "non-zero pair")
    if floor > 1 - CONFIDENCE:
        return (
            f"With {pairs} the smallest two-sided Wilcoxon p is {floor:.4g}, so "
            f"'not significant' there is not 'no effect'."
        )
    return (
        f"With {pairs} the smallest two-sided Wilcoxon p is {floor:.4g}; with few "
        f"seeds 'not significant' is still not 'no effect'."
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


def paired_t_power(
    difference: float, spread: float, pairs: int, alpha: float = 1 - CONFIDENCE
) -> float:
    """The power of a two-sided paired t-test at ``alpha`` over ``pairs`` pairs to detect a true
    mean ``difference`` when the differences have standard deviation ``spread`` > 0: exactly
    P(|T'| > t_{1-alpha/2, n-1}), T' noncentral t with n - 1 degrees of freedom and
    noncentrality difference sqrt(n) / spread (power.md, "Exact").

    Each tail is scipy's ``nct.sf``, the lower one as the upper tail of the mirrored
    noncentrality: SciPy 1.17's ``nct.cdf`` far in the lower tail is NaN (from noncentrality
    about 8, at every degree of freedom), its ``sf`` is finite and monotone there.
    """
    df = pairs - 1
    critical = float(stats.t.ppf(1 - alpha / 2, df))
    noncentrality = abs(difference) * math.sqrt(pairs) / spread
    upper, lower = stats.nct.sf(critical, df, [noncentrality, -noncentrality])
    return float(upper + lower)


def minimum_detectable_difference(
    spread: float, pairs: int, power: float = POWER, alpha: float = 1 - CONFIDENCE
) -> float | None:
    """The smallest true mean difference a two-sided paired t-test at ``alpha`` detects with
    ``power`` over ``pairs`` pairs whose differences have standard deviation ``spread``: the
    root of ``paired_t_power`` = ``power`` (Brent's method).

    Not the textbook (t_{1-alpha/2, n-1} + t_{power, n-1}) s / sqrt(n), which ignores the far
    tail and the noncentral t's skew: it falls short of this one by 14% at 2 pairs, 5% at 3 and
    1.2% at 5 (a test at its value has power 0.73 at 2 pairs, not 0.8), and agrees to 4 digits
    from about 20. None below 2 pairs, where a t-test has no degrees of freedom, and without
    spread (``spread`` 0: every difference equal), which gives no estimate to plan from.
    """
    if pairs < 2 or spread <= 0:
        return None
    if not alpha < power < 1:
        raise ValueError(f"power must lie between alpha ({alpha:g}) and 1, got {power:g}")

    def short_of(difference: float) -> float:
        return paired_t_power(difference, spread, pairs, alpha) - power

    high = spread
    while short_of(high) < 0:  # power is alpha at 0: widen until the root is bracketed
        high *= 2
    return float(optimize.brentq(short_of, 0.0, high, xtol=1e-12 * spread, rtol=1e-12))


def pairs_needed(
    mean: float, spread: float, power: float = POWER, alpha: float = 1 - CONFIDENCE
) -> int | None:
    """The fewest pairs (at least 2) whose paired t-test detects a true mean difference
    ``mean`` with ``power`` (``paired_t_power``), for differences of standard deviation
    ``spread``: a planning figure, since ``spread`` is itself estimated from few pairs. Searched
    from the normal approximation n = ((z_{1-alpha/2} + z_{power}) s / m)^2, which is within a
    few pairs of it. None when ``mean`` is 0 (no number of pairs detects no difference) and
    without spread (no estimate to plan from).
    """
    if mean == 0 or spread <= 0:
        return None
    z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    n = max(2, math.ceil((z * spread / mean) ** 2))
    while paired_t_power(mean, spread, n, alpha) < power:
        n += 1
    while n > 2 and paired_t_power(mean, spread, n - 1, alpha) >= power:
        n -= 1
    return n


def spearman(x: Sequence[float], y: Sequence[float]) -> Correlation:
    """Spearman's rho (Pearson correlation of the midranks) of paired ``x`` and ``y``, two-sided p.

    Up to ``EXACT_SPEARMAN_MAX_N`` points the p is exact: the share of the n! orderings of y's
    ranks against x's whose |rho| is at least the observed one (2 / 120 for a perfect monotone
    relation of 5 points). Above, it is scipy's t approximation t = rho sqrt((n-2) / (1-rho^2))
    with n - 2 degrees of freedom, which at 5 points would call rho = 1 a p of 1e-24.
    Fewer than 3 points, or a constant x or y, give rho = p = None with the reason in ``note``.
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"x and y must be 1-D of one length, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("x and y must be finite: leave runs without the value out")
    n = len(a)
    if n < 3:
        return Correlation(
            None, None, n, f"{counted(n, 'point')}: a rank correlation needs at least 3."
        )
    constant = [name for name, v in (("x", a), ("y", b)) if np.all(v == v[0])]
    if constant:
        return Correlation(None, None, n, f"{' and '.join(constant)} constant: rho undefined.")
    result = stats.spearmanr(a, b)
    rho = float(result.statistic)
    if n > EXACT_SPEARMAN_MAX_N:
        return Correlation(rho, float(result.pvalue), n, "p from the t approximation.")
    rx, ry = stats.rankdata(a), stats.rankdata(b)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    orderings = np.array(list(itertools.permutations(range(n))))
    rhos = ry[orderings] @ rx / math.sqrt((rx @ rx) * (ry @ ry))
    p = float(np.mean(np.abs(rhos) >= abs(rho) - 1e-12))  # orderings tied with rho count
    return Correlation(rho, p, n, "")


def stratified_spearman(
    x: Sequence[float], y: Sequence[float], strata: Sequence[Hashable], seed: int = 0
) -> Correlation:
    """Spearman's rho of ``x`` against ``y`` within strata, with a permutation p that keeps them.

    Each value is centred on its stratum's median, so that a difference between strata (an
    arm that is both more isotropic and better) is no correlation, and rho is that of the
    centred values, taken at the values' resolution (``at_resolution``). Under the null, y is
    exchangeable within a stratum only: the p is the share
    of within-stratum orderings of y whose |rho| is at least the observed one, all of them when
    there are at most ``EXACT_PERMUTATIONS_MAX``, else ``PERMUTATION_SAMPLES`` drawn with
    ``seed`` (p = (1 + as extreme) / (1 + drawn), Phipson & Smyth 2010). A stratum of one point
    says nothing within itself and is left out; fewer than 3 points, or a constant centred x or
    y, give rho = p = None with the reason.
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not (a.shape == b.shape == (len(strata),)):
        raise ValueError("x, y and strata must be 1-D of one length")
    groups: dict[Hashable, list[int]] = {}
    for i, stratum in enumerate(strata):
        groups.setdefault(stratum, []).append(i)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    index = [i for members in groups.values() for i in members]
    cx, cy = np.empty(len(index)), np.empty(len(index))
    slices, start = [], 0
    for members in groups.values():
        cx[start : start + len(members)] = a[members] - np.median(a[members])
        cy[start : start + len(members)] = b[members] - np.median(b[members])
        slices.append(np.arange(start, start + len(members)))
        start += len(members)
    # centred values equal but for float noise (one example above its arm's median in two arms)
    # are one value, as differences are (``at_resolution``): their tie is real. Doubled, since
    # the median of an even stratum is a midpoint: 2 (x - median) is a difference of the grid.
    cx = at_resolution(2 * cx, a[index].tolist()) / 2
    cy = at_resolution(2 * cy, b[index].tolist()) / 2
    n = len(index)
    if n < 3:
        return Correlation(
            None, None, n, f"{counted(n, 'point')} in strata of 2 or more: rho needs at least 3."
        )
    constant = [name for name, v in (("x", cx), ("y", cy)) if np.all(v == v[0])]
    if constant:
        return Correlation(None, None, n, f"centred {' and '.join(constant)} constant.")
    rx, ry = stats.rankdata(cx), stats.rankdata(cy)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    scale = math.sqrt((rx @ rx) * (ry @ ry))
    rho = float(ry @ rx / scale)
    orderings = math.prod(math.factorial(len(members)) for members in slices)
    if orderings <= EXACT_PERMUTATIONS_MAX:
        each = [list(itertools.permutations(members)) for members in slices]
        permuted = np.array([np.concatenate(choice) for choice in itertools.product(*each)])
        rhos = ry[permuted] @ rx / scale
        p = float(np.mean(np.abs(rhos) >= abs(rho) - 1e-12))
        note = "centred in each stratum; exact permutation p within strata."
        # The smallest p any outcome could have: the share as extreme as the most extreme one.
        floor = float(np.mean(np.abs(rhos) >= np.abs(rhos).max() - 1e-12))
        if floor > 1 - CONFIDENCE:
            note += (
                f" With {counted(len(permuted), 'ordering')} within strata no p falls below "
                f"{floor:.3g}: too few points to tell any rho from chance at {1 - CONFIDENCE:.2g}."
            )
        return Correlation(rho, p, n, note)
    rng = np.random.default_rng(seed)
    as_extreme = 0
    for _ in range(PERMUTATION_SAMPLES):
        permuted = np.concatenate([rng.permutation(members) for members in slices])
        as_extreme += abs(ry[permuted] @ rx / scale) >= abs(rho) - 1e-12
    p = float((1 + as_extreme) / (1 + PERMUTATION_SAMPLES))
    note = f"centred in each stratum; p from {PERMUTATION_SAMPLES} permutations within strata."
    return Correlation(rho, p, n, note)
