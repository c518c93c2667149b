"""How finely scores can be told apart, read from the scores themselves: the paired statistics
(docs/sweeps.md#tables-statistics-report) and the within-strata correlation compare differences
at this resolution, so that float32 storage (a share k / N is off by at most 2^-24 of it) neither
breaks a tie nor hides a zero.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

GRID_TOLERANCE = 2.0**-23  # a score on a 1/N grid: k within this share of k (twice the bound)
FLOAT32_TOLERANCE = 2.0**-20  # off any grid, differences closer than this share of |score| tie
MAX_EXAMPLES = 100_000  # the largest evaluation set whose 1/N grid ``score_resolution`` looks for
SCORE_UNITS = (1.0, 100.0)  # scores as fractions, or as percentages (the sweep tables' points)


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
    """``differences`` of ``scores`` as the metric can tell them apart.

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
