"""Time ``isotune.isotropy`` against straightforward reference implementations of each measure.

Each of our measures is timed alone, and ``measure_all`` (all of them, sharing one covariance and
its eigendecompositions) against the sum of the references, on seeded float32 vectors shaped like
contextual embeddings. Times are the best of ``--repeats`` runs, ours and the reference run
alternately; ratio = ours / reference (below 1: ours is faster). Values are printed side by side so
that a fast but wrong measure shows.

    python benchmarks/bench_isotropy.py --n 10000 --d 768 --repeats 3
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
import torch
from scipy.stats import entropy

from isotune.isotropy import (
    average_cosine,
    isobn_stats,
    isoscore,
    measure_all,
    partition_isotropy,
    spectrum,
)


def embeddings(n: int, d: int, seed: int) -> np.ndarray:
    """Anisotropic float32 vectors like a language model's: noise with unequal per-dimension
    spread, five dominant directions, and a mean offset shared by all points."""
    rng = np.random.default_rng(seed)
    directions, _ = np.linalg.qr(rng.standard_normal((d, 5)))
    dominant = (rng.standard_normal((n, 5)) * [5.0, 4.0, 3.0, 2.5, 2.0]) @ directions.T
    noise = rng.standard_normal((n, d)) * rng.uniform(0.2, 0.8, d)
    offset = 0.4 * rng.standard_normal(d)
    return (noise + dominant + offset).astype(np.float32)


def reference_isobn(X: np.ndarray) -> dict[str, float]:
    """Per-dimension std summary and mean |Pearson correlation| over i != j, with numpy."""
    std = X.std(axis=0, dtype=np.float64)
    corr = np.corrcoef(X, rowvar=False)
    return {
        "std_mean": std.mean(),
        "std_cv": std.std() / std.mean(),
        "std_min": std.min(),
        "std_max": std.max(),
        "corr_abs_mean": np.abs(corr[~np.eye(X.shape[1], dtype=bool)]).mean(),
    }


def reference_iw(X: np.ndarray) -> float:
    """I(W) by a loop over the eigenvectors of X^T X, both signs, exp in float64."""
    X = X.astype(np.float64)
    _, eigenvectors = np.linalg.eigh(X.T @ X)
    partition = []
    for u in eigenvectors.T:
        projection = X @ u
        partition += [np.exp(projection).sum(), np.exp(-projection).sum()]
    return min(partition) / max(partition)


def reference_cosine(X: np.ndarray, pairs: int = 100_000, seed: int = 0) -> float:
    """Mean cosine over randomly sampled pairs of distinct points."""
    rng = np.random.default_rng(seed)
    first = rng.integers(len(X), size=pairs)
    second = rng.integers(len(X) - 1, size=pairs)
    second += second >= first
    unit = X.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    return float(np.einsum("ij,ij->i", unit[first], unit[second]).mean())


def reference_isoscore(X: np.ndarray) -> float:
    from IsoScore import IsoScore

    return float(IsoScore.IsoScore(X))


def reference_effective_rank(X: np.ndarray) -> float:
    variances = np.linalg.eigvalsh(np.cov(X, rowvar=False)).clip(min=0)
    return math.exp(entropy(variances / variances.sum()))


def timed(function: Callable[[], object]) -> tuple[float, object]:
    """Wall time of one call, and what it returned."""
    start = time.perf_counter()
    value = function()
    return time.perf_counter() - start, value


def best_times(
    ours: Callable[[], float], reference: Callable[[], float], repeats: int
) -> tuple[float, float, float, float]:
    """Best wall times of ``ours`` and ``reference``, run alternately so that a change in the
    machine's load hits both alike, and the values they returned."""
    runs = [(timed(ours), timed(reference)) for _ in range(repeats)]
    (_, ours_value), (_, reference_value) = runs[-1]
    ours_s = min(ours_run[0] for ours_run, _ in runs)
    reference_s = min(reference_run[0] for _, reference_run in runs)
    return ours_s, reference_s, ours_value, reference_value


def measure_pairs(X: np.ndarray) -> list[tuple[str, Callable, Callable, str]]:
    """(name, our measure, reference measure, description of the reference) on the cloud X."""
    points = torch.from_numpy(X)
    return [
        ("IsoBN corr_abs_mean", lambda: isobn_stats(points).corr_abs_mean,
         lambda: reference_isobn(X)["corr_abs_mean"], "numpy std + corrcoef"),
        ("I(W)", lambda: partition_isotropy(points).iw,
         lambda: reference_iw(X), "numpy eigh + loop over eigenvectors"),
        ("average cosine", lambda: average_cosine(points),
         lambda: reference_cosine(X), "100k random pairs"),
        ("IsoScore", lambda: isoscore(points),
         lambda: reference_isoscore(X), "IsoScore package 2.0.1"),
        ("effective rank", lambda: spectrum(points).effective_rank,
         lambda: reference_effective_rank(X), "numpy cov + eigvalsh"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="number of points")
    parser.add_argument("--d", type=int, default=768, help="dimensions")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing (best is kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    X = embeddings(args.n, args.d, args.seed)
    for _, ours, reference, _ in measure_pairs(X[:200]):  # pay one-off library start-up costs
        ours(), reference()
    rows = measure_pairs(X)
    points = torch.from_numpy(X)

    threads = torch.get_num_threads()
    print(f"N={args.n} d={args.d} float32, best of {args.repeats} runs, {threads} torch threads")
    header = (
        f"{'measure':<20} {'ours s':>8} {'ref s':>8} {'ratio':>6}  "
        f"{'ours':>12} {'ref':>12}  reference"
    )
    print(header)
    print("-" * len(header))
    reference_total = 0.0
    for name, ours, reference, description in rows:
        ours_s, ref_s, ours_value, ref_value = best_times(ours, reference, args.repeats)
        reference_total += ref_s
        print(
            f"{name:<20} {ours_s:8.3f} {ref_s:8.3f} {ours_s / ref_s:6.2f}  "
            f"{ours_value:12.6g} {ref_value:12.6g}  {description}"
        )
    suite_runs = [timed(lambda: measure_all(points)) for _ in range(args.repeats)]
    suite_s, measures = min(suite_runs, key=lambda run: run[0])
    print("-" * len(header))
    print(
        f"{'measure_all (suite)':<20} {suite_s:8.3f} {reference_total:8.3f} "
        f"{suite_s / reference_total:6.2f}  {len(measures):>12} measures     sum of references"
    )


if __name__ == "__main__":
    main()
