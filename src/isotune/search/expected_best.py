"""The expected best dev score of a search as a function of the trials it spent (Dodge et al.,
"Show Your Work: Improved Reporting of Experimental Results", EMNLP 2019; allentune's
``samplemax``). Formulas and why with replacement is the default:
docs/search.md#the-expected-best-curve.

With the N trials spent ranked from worst to best, the best of n drawn from them is v(i) with
probability p_i = F(i) - F(i-1): F(i) = (i/N)^n with replacement, C(i, n) / C(N, n) without. The
SD is allentune's closed form (its field ``var`` is this SD), the band clipped to the observed
values. A trial without a value ranks below every value: the curve is the expected best given
that one of the n draws has a value, and ``none`` the chance that none has, so failures cost
budget on the x-axis instead of leaving it. For a search that minimises, everything is mirrored.
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
    """The best of ``n`` trials drawn from ``values`` (None: a trial without a value)."""
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
