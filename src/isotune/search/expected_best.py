"""The expected best dev score of a search as a function of the trials it spent (Dodge et al.,
"Show Your Work: Improved Reporting of Experimental Results", EMNLP 2019; allentune's
``samplemax``).

With the N trials spent ranked from worst to best, v(1) <= ... <= v(N), the best of n trials
drawn from them is v(i) with probability p_i = F(i) - F(i-1), where F(i), the chance that all n
draws rank at most i, is

- with replacement (Dodge et al.'s eq. 1, allentune's default): F(i) = (i/N)^n;
- without replacement (allentune's other option): F(i) = C(i, n) / C(N, n), so that the best of
  all N is the observed best.

E[best of n] = sum_i p_i v(i), and its standard deviation sqrt(sum_i p_i (v(i) - E)^2) is
allentune's closed form (its field ``var`` is this SD); the band E +- SD is clipped to the
observed minimum and maximum, as allentune and ``show_your_work`` draw it. With replacement is
the default: it is the published curve, and of the estimators Card, Dodge et al. (2021) compared,
the biased ones gave fewer wrong comparisons than the unbiased one.

A trial spent without a value (it failed: a crash, a NaN) ranks below every value: a draw that
found nothing. The curve is then the expected best given that one of the n draws has a value,
p_i renormalised by 1 - F(F0) for the F0 trials without one, and ``none`` is F(F0), the chance
that n trials found none; so failures cost budget on the x-axis instead of leaving it.

The draws are assumed i.i.d.: true of random search, not of a sampler that chooses each trial
from the earlier ones (TPE), whose curve describes that search and is no budget law. For a search
that minimises, the best is the smallest and everything above is mirrored. NumPy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

WITH_REPLACEMENT, WITHOUT_REPLACEMENT = "with replacement", "without replacement"
ESTIMATORS = (WITH_REPLACEMENT, WITHOUT_REPLACEMENT)
DEFAULT_ESTIMATOR = WITH_REPLACEMENT
MIN_TRIALS = 5  # below it, report the values, not a curve (show_your_work's advice)


@dataclass(frozen=True)
class BestOfN:
    """The best of ``n`` trials: its expected value, the SD of its distribution, the band
    ``mean`` +- ``sd`` clipped to the observed values, and ``none``, the chance that none of the
    ``n`` trials has a value (the rest is given that one has)."""

    n: int
    mean: float
    sd: float
    low: float
    high: float
    none: float


def best_of_n(
    values: Sequence[float | None],
    n: int,
    maximize: bool = True,
    estimator: str = DEFAULT_ESTIMATOR,
) -> BestOfN:
    """The best of ``n`` trials drawn from ``values`` (None: a trial without a value), by
    ``estimator`` (see the module docstring)."""
    scores = [float(v) for v in values if v is not None]
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator {estimator!r} is not one of {ESTIMATORS}")
    if not scores or not np.isfinite(scores).all():
        raise ValueError(f"need a finite value among the trials, got {list(values)}")
    total, missing = len(values), len(values) - len(scores)
    if n < 1 or (estimator == WITHOUT_REPLACEMENT and n > total):
        raise ValueError(f"n = {n} is not a budget of 1 to {total} trials drawn {estimator}")
    v = np.sort(scores) if maximize else -np.sort(scores)[::-1]
    at_most = _at_most(total, n, estimator)  # F(0), ..., F(total)
    p = np.diff(at_most[missing:])
    none = float(at_most[missing])
    p = p / (1.0 - none)
    mean = float(p @ v)
    sd = math.sqrt(max(float(p @ (v - mean) ** 2), 0.0))
    low, high = max(mean - sd, v[0]), min(mean + sd, v[-1])
    if not maximize:
        mean, low, high = -mean, -high, -low
    return BestOfN(n, mean, sd, float(low), float(high), none)


def _at_most(total: int, n: int, estimator: str) -> np.ndarray:
    """F(i) for i = 0..total: the chance that every one of n draws ranks at most i."""
    if estimator == WITH_REPLACEMENT:
        return (np.arange(total + 1) / total) ** n
    return np.array([math.comb(i, n) / math.comb(total, n) for i in range(total + 1)])


def expected_best_curve(
    values: Sequence[float | None], maximize: bool = True, estimator: str = DEFAULT_ESTIMATOR
) -> list[BestOfN]:
    """:func:`best_of_n` for every budget n = 1..N of the N trials spent."""
    return [best_of_n(values, n, maximize, estimator) for n in range(1, len(values) + 1)]
