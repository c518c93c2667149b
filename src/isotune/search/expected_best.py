"""The expected best dev score of a search as a function of its budget (Dodge et al., "Show Your
Work: Improved Reporting of Experimental Results", EMNLP 2019, eq. 1).

With the N trials' scores sorted v(1) <= ... <= v(N), the best of n trials drawn from them with
replacement is at most v(i) with probability (i/N)^n, so

    E[max of n] = sum_i v(i) ((i/N)^n - ((i-1)/N)^n).

The curve over n = 1..N says what a search of each budget would have found: two methods compared
at one budget can rank the other way at another, and a baseline given fewer trials is compared at
its own budget. For a search that minimises, the expected minimum is the same sum with the scores
sorted the other way. NumPy only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def expected_best(scores: Sequence[float], n: int, maximize: bool = True) -> float:
    """E[best of ``n`` draws with replacement from ``scores``] (see the module docstring)."""
    v = np.sort(np.asarray(scores, dtype=float))
    if v.size == 0 or n < 1 or not np.isfinite(v).all():
        raise ValueError(f"need finite scores and n >= 1, got {len(v)} scores and n = {n}")
    if not maximize:
        v = v[::-1]
    at_most = (np.arange(1, v.size + 1) / v.size) ** n
    return float(v @ np.diff(at_most, prepend=0.0))


def expected_best_curve(scores: Sequence[float], maximize: bool = True) -> list[float]:
    """``expected_best`` for every budget n = 1..N of the N ``scores``."""
    return [expected_best(scores, n, maximize) for n in range(1, len(scores) + 1)]
