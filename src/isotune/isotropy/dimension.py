"""Intrinsic dimension of a point cloud: how many coordinates its points need locally (formulas
and the reference implementations matched:
docs/isotropy.md#layer-profiles-anisotropy-intrinsic-dimension-massive-activations).

- :func:`twonn`: Facco, d'Errico, Rodriguez & Laio (Scientific Reports 2017), as
  scikit-dimension's ``TwoNN`` (0.5.0, ``method='linear'``).
- :func:`twonn_microscope`: Razzhigaev et al., "The Shape of Learning" (Findings of EACL 2024), as
  their package ``llm-microscope`` 0.0.7 computes it.
- :func:`mle_dimension`: Levina & Bickel (NeurIPS 2004), scikit-dimension's ``MLE`` with
  ``comb='mean'`` (its default ``'mle'`` averages the inverses, after MacKay & Ghahramani).

Neighbours are searched in float32 on mean-centred points, k + 2 candidates per point, and their
distances then computed as |x - y| of the points as given, in their own precision, so a duplicate
point is at distance 0, never at a rounding error's distance; a point is never its own neighbour.
The distances cost O(N^2 d) in blocks of rows: 10,000 points take seconds.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from isotune.isotropy.point_cloud import check_point_cloud
from isotune.isotropy.precision import full_precision

TWONN_DISCARD = 0.1  # Facco et al.: the largest 10% of the ratios are left out of the fit
MICROSCOPE_REDUCTION = 5  # Razzhigaev et al.: the fit uses the smallest fifth of the ratios
MICROSCOPE_EPS = 1e-8  # their threshold on distances and ratios, after scaling to mean norm 1
MLE_NEIGHBOURS = 20  # scikit-dimension's default k for MLE
_ROW_BLOCK = 512  # rows of the distance matrix computed at once
_EXTRA_CANDIDATES = 2  # float32 rounding may swap near-equal neighbours: re-rank a few more


def neighbour_distances(X: Tensor, k: int) -> Tensor:
    """(N, k) float64 distances from each point to its k nearest other points, ascending."""
    points = check_point_cloud(X).detach()
    count = len(points)
    if not 1 <= k < count:
        raise ValueError(f"k must lie in [1, {count - 1}] for {count} points, got {k}")
    if points.dtype not in (torch.float32, torch.float64):
        points = points.double()
    # Candidates from |x|^2 + |y|^2 - 2 x.y of the mean-centred points: less cancellation
    wide = points.to(torch.float64)
    coarse = (wide - wide.mean(dim=0)).float()
    squared = coarse.square().sum(dim=1)
    candidates = min(k + _EXTRA_CANDIDATES, count - 1)
    rows = []
    for start in range(0, count, _ROW_BLOCK):
        block = coarse[start : start + _ROW_BLOCK]
        own = torch.arange(len(block), device=points.device)
        with full_precision():  # not TF32: its 1e-3 would swap more than the extra candidates
            products = block @ coarse.T
        approximate = squared[start : start + len(block), None] + squared - 2 * products
        approximate[own, start + own] = math.inf  # not its own neighbour
        nearest = approximate.topk(candidates, dim=1, largest=False).indices
        # |x - y| of the points as given, in place on one gathered copy (half the time of a
        # fresh difference and vector_norm); float32 points' differences are exact to rounding
        differences = points.index_select(0, nearest.flatten()).view(len(block), candidates, -1)
        differences -= points[start : start + len(block), None, :]
        exact = differences.square_().sum(dim=2).sqrt_().to(torch.float64)
        rows.append(exact.sort(dim=1).values[:, :k])
    return torch.cat(rows)


def _slope_through_origin(x: Tensor, y: Tensor) -> float:
    """The least-squares slope of y = d x without intercept."""
    return (x @ y / (x @ x)).item()


def twonn_from_distances(distances: Tensor, discard_fraction: float = TWONN_DISCARD) -> float:
    """Facco et al.'s TwoNN from each point's first two neighbour distances ((N, >= 2)); a
    duplicate (r1 = 0) is dropped, as scikit-dimension drops it. NaN below 2 ratios."""
    if not 0.0 <= discard_fraction < 1.0:
        raise ValueError(f"discard_fraction must lie in [0, 1), got {discard_fraction}")
    r1, r2 = distances[:, 0], distances[:, 1]
    ratios = (r2[r1 > 0] / r1[r1 > 0]).sort().values
    count = len(ratios)
    kept = int(count * (1 - discard_fraction))  # as scikit-dimension rounds it
    if kept < 2:
        return math.nan
    empirical = torch.arange(1, kept + 1, dtype=torch.float64, device=ratios.device) / count
    return _slope_through_origin(ratios[:kept].log(), -torch.log1p(-empirical))


def twonn(X: Tensor, discard_fraction: float = TWONN_DISCARD) -> float:
    """TwoNN intrinsic dimension (Facco et al. 2017), as scikit-dimension's ``TwoNN``."""
    return twonn_from_distances(neighbour_distances(X, 2), discard_fraction)


def twonn_microscope_from_distances(
    distances: Tensor, mean_norm: float, reduction_factor: int = MICROSCOPE_REDUCTION
) -> float:
    """Razzhigaev et al.'s TwoNN variant from the first two neighbour distances ((N, >= 2)) of
    the mean-centred points, whose mean norm is ``mean_norm``. NaN when no ratio is left."""
    if reduction_factor < 1:
        raise ValueError(f"reduction_factor must be >= 1, got {reduction_factor}")
    r1, r2 = distances[:, 0] / mean_norm, distances[:, 1] / mean_norm
    ratios = torch.where(r1 < MICROSCOPE_EPS, -1.0, r2 / r1.clamp(min=MICROSCOPE_EPS))
    ratios = ratios.sort().values
    left_out = int((ratios <= 1 + MICROSCOPE_EPS).sum())
    ratios = ratios[left_out:]
    count = len(ratios)
    used = min(count // reduction_factor, count - 1)
    if used < 1:
        return math.nan
    empirical = torch.arange(
        1 + left_out, used + 1 + left_out, dtype=torch.float64, device=ratios.device
    )
    empirical /= count + left_out
    return _slope_through_origin(ratios[:used].log(), -torch.log1p(-empirical))


def twonn_microscope(X: Tensor, reduction_factor: int = MICROSCOPE_REDUCTION) -> float:
    """The TwoNN variant of LLM-Microscope (Razzhigaev et al. 2024), as its package computes it."""
    points = check_point_cloud(X).detach().to(torch.float64)
    mean_norm = torch.linalg.vector_norm(points - points.mean(dim=0), dim=1).mean().item()
    return twonn_microscope_from_distances(
        neighbour_distances(points, 2), mean_norm, reduction_factor
    )


def mle_from_distances(distances: Tensor) -> float:
    """Levina & Bickel's estimate from each point's k nearest neighbour distances ((N, k)).
    A point whose k distances are all equal, or whose nearest neighbour is a duplicate, has no
    finite estimate and is left out; NaN when no point has one."""
    k = distances.shape[1]
    if k < 2:
        raise ValueError(f"the MLE needs at least 2 neighbours per point, got {k}")
    logs = torch.log(distances[:, -1:] / distances).sum(dim=1)
    defined = (distances[:, 0] > 0) & (logs > 0)
    return ((k - 1) / logs[defined]).mean().item() if defined.any() else math.nan


def mle_dimension(X: Tensor, k: int = MLE_NEIGHBOURS) -> float:
    """Levina-Bickel MLE of the intrinsic dimension over ``k`` neighbours per point."""
    return mle_from_distances(neighbour_distances(X, k))
