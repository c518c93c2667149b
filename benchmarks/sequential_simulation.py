"""What a sequential plan does over many simulated studies: the rate of each decision, the
pairs it uses, and the fixed design of the same power to set beside it (docs/study.md,
"Seeds in planned looks"): ``bench_sequential.py`` runs them at full size, and
tests/test_sequential.py small, so the module lives beside them rather than in the package.

Each simulated study decides as :meth:`~isotune.study.sequential.SequentialPlan.decide` does,
by the plan's own rules, so the rates measured are those of the decisions a study makes. The
normal-scale boundaries (:func:`normal_boundaries`, known spread) are a reference for reading
and for tests, not what a plan stores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

from isotune.study.calibration import Draw, chunks, moments, normal_draws
from isotune.study.sequential import (
    ALPHA,
    BOUNDED,
    DECISIONS,
    DIFFERENT,
    DIFFERENT_SMALL,
    EXACT,
    GO_ON,
    SequentialPlan,
    check_design,
    decision_codes,
    exact_decision,
    spent_alpha,
)

MAX_FIXED_PAIRS = 100_000  # the largest fixed design :func:`fixed_pairs` looks for


def normal_boundaries(
    looks: Sequence[int], alpha: float = ALPHA, spending: str = "obf"
) -> tuple[float, ...]:
    """The boundaries c_k on the normal scale (a known spread): c_k solves
    P(|Z_1| < c_1, ..., |Z_k| < c_k) = 1 - alpha(t_k), (Z_1..Z_K) jointly normal with
    corr(Z_i, Z_j) = sqrt(t_i / t_j) for i < j. Four equal looks at alpha 0.05: O'Brien-Fleming
    type 3.92, 2.77, 2.30, 2.04; Pocock type 2.37, 2.37, 2.36, 2.35.

    SciPy integrates the rectangles by randomized quasi-Monte Carlo (to about 1e-5, from a fixed
    seed here): a reference for :func:`boundaries` and for reading, not what a plan stores."""
    check_design(looks, alpha, spending)
    t = np.asarray(looks, dtype=float) / looks[-1]
    spent = spent_alpha(t, alpha, spending)
    correlation = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    found = [float(stats.norm.isf(spent[0] / 2))]
    for k in range(1, len(looks)):
        joint = stats.multivariate_normal(mean=np.zeros(k + 1), cov=correlation[: k + 1, : k + 1])

        def unstopped(c: float, k: int = k, joint: Any = joint) -> float:
            upper = np.array([*found, c])
            inside = joint.cdf(upper, lower_limit=-upper, rng=np.random.default_rng(k))
            return inside - (1 - spent[k])

        found.append(float(optimize.brentq(unstopped, 0.1, 20.0, xtol=1e-5)))
    return tuple(found)


@dataclass(frozen=True)
class SimulatedStudies:
    """What a plan did over ``studies`` simulated studies: the share ending in each decision
    (every study ends: the last look decides "bounded" at worst), the share stopped at each
    look, and the mean pairs used."""

    studies: int
    rates: Mapping[str, float]
    stopped_at: tuple[float, ...]
    mean_pairs: float

    @property
    def different(self) -> float:
        """The share that said "different", smaller than the margin or not: the error rate at
        no true difference, the power at one."""
        return self.rates[DIFFERENT] + self.rates[DIFFERENT_SMALL]

    def error(self, rate: float) -> float:
        """The Monte Carlo standard error of a ``rate`` over these studies."""
        return math.sqrt(rate * (1 - rate) / self.studies)


def simulate(
    plan: SequentialPlan,
    true_difference: float,
    studies: int,
    rng: np.random.Generator,
    *,
    sd: float | None = None,
    pool: Sequence[float] | None = None,
) -> SimulatedStudies:
    """``studies`` simulated studies of ``plan`` at ``true_difference``, each deciding as
    :meth:`SequentialPlan.decide` does at every look until one stops it, by its rules (the
    exact tests, where the plan states them, checked on the studies the interval would stop).
    The differences are normal with standard deviation ``sd``, or drawn with replacement from
    ``pool`` (real differences) recentred on ``true_difference``: exactly one of the two."""
    if (sd is None) == (pool is None):
        raise ValueError("simulate takes sd (normal differences) or pool (real ones), one of them")
    if pool is None:
        draw = normal_draws(true_difference, sd)
    else:
        draw = _resampled_draws(np.asarray(pool, dtype=float), true_difference)
    ends = np.concatenate([_first_stops(plan, d) for d in chunks(plan.looks, draw, studies, rng)])
    look, code = ends[:, 0], ends[:, 1]
    return SimulatedStudies(
        studies=studies,
        rates={
            decision: float(np.mean(code == i))
            for i, decision in enumerate(DECISIONS)
            if decision != GO_ON
        },
        stopped_at=tuple(float(np.mean(look == k)) for k in range(len(plan.looks))),
        mean_pairs=float(np.mean(np.asarray(plan.looks)[look])),
    )


def fixed_pairs(difference: float, sd: float, power: float, alpha: float = ALPHA) -> int:
    """The fewest pairs whose two-sided paired t-test at ``alpha`` detects a true mean
    ``difference`` of differences with spread ``sd`` with at least ``power``: a fixed design
    to set beside a sequential one of the same power (its simulated :attr:`different` rate).
    The power at n pairs is P(|T| > t_{1-alpha/2, n-1}) for T noncentral t with n - 1 degrees
    of freedom and noncentrality difference / sd * sqrt(n); it grows with n, so the fewest is
    found by doubling n, then halving the gap."""
    if not 0 < power < 1 or difference == 0 or not sd > 0:
        raise ValueError(
            f"fixed_pairs needs 0 < power < 1, a difference and a spread, got power {power}, "
            f"difference {difference}, sd {sd}"
        )

    def enough(n: int) -> bool:
        critical, shift = stats.t.isf(alpha / 2, n - 1), abs(difference) / sd * math.sqrt(n)
        found = stats.nct.sf(critical, n - 1, shift) + stats.nct.cdf(-critical, n - 1, shift)
        return found >= power

    low, high = 1, 2  # too few, and a candidate
    while not enough(high):
        if high >= MAX_FIXED_PAIRS:
            raise ValueError(f"no fixed design up to {MAX_FIXED_PAIRS:,} pairs has power {power}")
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def _resampled_draws(pool: np.ndarray, true_difference: float) -> Draw:
    centred = pool - pool.mean() + true_difference
    return lambda rng, shape: rng.choice(centred, size=shape, replace=True)


def _first_stops(plan: SequentialPlan, d: np.ndarray) -> np.ndarray:
    """Each simulated study's first look whose decision stops it and that decision's code
    (studies x 2), from its differences ``d`` (studies x the last look's pairs): the interval's
    decision at every look at once, then, under the exact rule, that of each study the
    interval would stop, look by look until it stops."""
    mean, sd = moments(plan.looks, d)
    half = sd * np.asarray(plan.boundaries) / np.sqrt(plan.looks)
    last = len(plan.looks) - 1
    codes = np.stack(
        [decision_codes(mean[:, k], half[:, k], plan.margin, k == last) for k in range(last + 1)],
        axis=1,
    )
    if EXACT in plan.rules:
        stopped = np.zeros(len(d), dtype=bool)
        for k, (n, nominal) in enumerate(zip(plan.looks, plan.nominal, strict=True)):
            stops = ~stopped & (codes[:, k] != DECISIONS.index(GO_ON))
            for i in np.flatnonzero(stops & (codes[:, k] != DECISIONS.index(BOUNDED))):
                found = exact_decision(
                    d[i, :n], DECISIONS[codes[i, k]], nominal, plan.margin, k == last
                )
                codes[i, k] = DECISIONS.index(found)
            stopped |= codes[:, k] != DECISIONS.index(GO_ON)
    look = np.argmax(codes != DECISIONS.index(GO_ON), axis=1)  # the last look always stops
    return np.stack([look, codes[np.arange(len(look)), look]], axis=1)
