"""Does one per-run number (an isotropy measure) predict another (the score)? Spearman's rho, with
a p exact wherever the orderings can be enumerated: at a sweep's handful of seeds the t
approximation would call a perfect ordering of 5 points a p of 1e-24. Undefined values (too few
points, constant input) are ``None`` with a ``note`` saying why, never NaN.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np
from scipy import stats

from isotune.sweeps.score_resolution import at_resolution
from isotune.sweeps.statistics import CONFIDENCE
from isotune.tracking.reporting import counted

EXACT_SPEARMAN_MAX_N = 8  # all 8! = 40320 orderings enumerated at most; above, the t approximation
EXACT_PERMUTATIONS_MAX = 40320  # within-strata orderings enumerated at most; above, sampled
PERMUTATION_SAMPLES = 9999  # sampled within-strata orderings: p = (1 + as extreme) / (1 + this)


class Correlation(NamedTuple):
    """Spearman's rho of ``n`` points and its two-sided p; None (with ``note``) when undefined."""

    rho: float | None
    p: float | None
    n: int
    note: str


def _undefined(x: np.ndarray, y: np.ndarray, few: str, constant: str) -> Correlation | None:
    """Why rho of ``x`` and ``y`` is undefined (``few``: below 3 points; ``constant``: no
    ranks), as a Correlation of Nones; None where it is defined."""
    n = len(x)
    if n < 3:
        return Correlation(None, None, n, few.format(counted(n, "point")))
    flat = [name for name, v in (("x", x), ("y", y)) if np.all(v == v[0])]
    return Correlation(None, None, n, constant.format(" and ".join(flat))) if flat else None


def _centred_ranks(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The midranks of ``x`` and ``y`` less their mean, and the scale that makes their product
    Spearman's rho: rho = ry @ rx / scale, for any ordering of ry."""
    rx, ry = stats.rankdata(x), stats.rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return rx, ry, math.sqrt((rx @ rx) * (ry @ ry))


def _every_ordering(rx: np.ndarray, ry: np.ndarray, scale: float, strata: list) -> np.ndarray:
    """Rho under every ordering of ``ry`` that keeps each index within its stratum."""
    each = [list(itertools.permutations(members)) for members in strata]
    permuted = np.array([np.concatenate(choice) for choice in itertools.product(*each)])
    return ry[permuted] @ rx / scale


def _as_extreme(rhos: np.ndarray, rho: float) -> float:
    """The share of ``rhos`` at least as far from 0 as ``rho``; orderings tied with it count."""
    return float(np.mean(np.abs(rhos) >= abs(rho) - 1e-12))


def spearman(x: Sequence[float], y: Sequence[float]) -> Correlation:
    """Spearman's rho (Pearson correlation of the midranks) of paired ``x`` and ``y``, two-sided p.

    Up to ``EXACT_SPEARMAN_MAX_N`` points the p is exact: the share of the n! orderings of y's
    ranks against x's whose |rho| is at least the observed one (2 / 120 for a perfect monotone
    relation of 5 points). Above, it is scipy's t approximation t = rho sqrt((n-2) / (1-rho^2))
    with n - 2 degrees of freedom. Fewer than 3 points, or a constant x or y, give rho = p = None
    with the reason in ``note``.
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"x and y must be 1-D of one length, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("x and y must be finite: leave runs without the value out")
    undefined = _undefined(
        a, b, "{}: a rank correlation needs at least 3.", "{} constant: rho undefined."
    )
    if undefined:
        return undefined
    result = stats.spearmanr(a, b)
    rho, n = float(result.statistic), len(a)
    if n > EXACT_SPEARMAN_MAX_N:
        return Correlation(rho, float(result.pvalue), n, "p from the t approximation.")
    rhos = _every_ordering(*_centred_ranks(a, b), [range(n)])
    return Correlation(rho, _as_extreme(rhos, rho), n, "")


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
    undefined = _undefined(
        cx, cy, "{} in strata of 2 or more: rho needs at least 3.", "centred {} constant."
    )
    if undefined:
        return undefined
    rx, ry, scale = _centred_ranks(cx, cy)
    rho, n = float(ry @ rx / scale), len(index)
    orderings = math.prod(math.factorial(len(members)) for members in slices)
    if orderings <= EXACT_PERMUTATIONS_MAX:
        rhos = _every_ordering(rx, ry, scale, slices)
        note = "centred in each stratum; exact permutation p within strata."
        # The smallest p any outcome could have: the share as extreme as the most extreme one.
        floor = _as_extreme(rhos, np.abs(rhos).max())
        if floor > 1 - CONFIDENCE:
            note += (
                f" With {counted(len(rhos), 'ordering')} within strata no p falls below "
                f"{floor:.3g}: too few points to tell any rho from chance at {1 - CONFIDENCE:.2g}."
            )
        return Correlation(rho, _as_extreme(rhos, rho), n, note)
    rng = np.random.default_rng(seed)
    as_extreme = 0
    for _ in range(PERMUTATION_SAMPLES):
        permuted = np.concatenate([rng.permutation(members) for members in slices])
        as_extreme += abs(ry[permuted] @ rx / scale) >= abs(rho) - 1e-12
    p = float((1 + as_extreme) / (1 + PERMUTATION_SAMPLES))
    note = f"centred in each stratum; p from {PERMUTATION_SAMPLES} permutations within strata."
    return Correlation(rho, p, n, note)
