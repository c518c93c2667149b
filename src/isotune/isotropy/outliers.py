"""Outlier dimensions: the few coordinates of an embedding space that dominate it, so that a run
can be compared with its pre-trained self dimension by dimension. Definitions, sources and the
departures from them: docs/isotropy.md#outlier-and-rogue-dimensions.

- **Outlier dimensions** (Rudman, Chen & Eickhoff, EMNLP 2023): variance (ddof 0) at least
  ``factor`` (5) times the mean variance.
- **Rogue dimensions** (Timkey & van Schijndel, EMNLP 2021): each dimension's contribution to the
  average cosine; their share is taken of ``sum |CC_i|``, not of the average cosine, which is
  undefined or explodes near 0 (after BatchNorm or whitening centre the space).
- **Overlap** of two sets of dimensions: Jaccard index, and the share of the first still in the
  second.

Torch only, computed in float64 on a detached copy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from isotune.isotropy.point_cloud import check_point_cloud
from isotune.norms.ranges import POSITIVE

OUTLIER_FACTOR = 5.0  # Rudman et al. (2023): variance at least 5x the mean variance
ROGUE_K = 3  # Timkey & van Schijndel (2021) show how the top 3 dimensions dominate cosine


def _float64(X: Tensor) -> Tensor:
    return check_point_cloud(X).detach().to(torch.float64)


def dimension_variances(X: Tensor) -> Tensor:
    """Each dimension's variance (ddof 0, as the released code's ``np.var``), on the CPU."""
    return _float64(X).var(dim=0, correction=0).cpu()


@dataclass(frozen=True)
class OutlierDimensions:
    """The dimensions whose variance is at least ``factor`` times the mean variance."""

    variances: Tensor  # (d,) per-dimension variance, ddof 0
    factor: float
    indices: tuple[int, ...]  # the outlier dimensions, largest variance first

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def principal(self) -> int:
        """The dimension of largest variance (the paper's principal outlier, rho)."""
        return int(self.variances.argmax())

    @property
    def variance_share(self) -> float:
        """The outlier dimensions' share of the total variance (NaN for a constant cloud)."""
        total = self.variances.sum().item()
        if total == 0:
            return math.nan
        return self.variances[list(self.indices)].sum().item() / total

    @property
    def max_ratio(self) -> float:
        """The largest variance over the mean variance (NaN for a constant cloud)."""
        mean = self.variances.mean().item()
        return self.variances.max().item() / mean if mean > 0 else math.nan


def outliers_from_variances(variances: Tensor, factor: float = OUTLIER_FACTOR) -> OutlierDimensions:
    """The outlier dimensions of per-dimension ``variances``; none for a constant cloud."""
    POSITIVE.require(factor, "factor")
    variances = variances.detach().to(torch.float64).cpu()
    mean = variances.mean()
    chosen = (variances >= factor * mean).nonzero().squeeze(1) if mean > 0 else torch.tensor([])
    # Largest variance first; a stable sort keeps equal variances in index order.
    order = variances[chosen.long()].argsort(descending=True, stable=True)
    return OutlierDimensions(variances, float(factor), tuple(chosen.long()[order].tolist()))


def outlier_dimensions(X: Tensor, factor: float = OUTLIER_FACTOR) -> OutlierDimensions:
    """Rudman et al.'s outlier dimensions of the cloud ``X`` (N points x d dimensions)."""
    return outliers_from_variances(dimension_variances(X), factor)


@dataclass(frozen=True)
class RogueDimensions:
    """Each dimension's contribution to the average cosine, and the ``k`` largest."""

    contributions: Tensor  # (d,) CC_i; they add up to the average cosine
    top: tuple[int, ...]  # the k dimensions of largest |CC_i|, largest first

    @property
    def average_cosine(self) -> float:
        return self.contributions.sum().item()

    @property
    def cosine(self) -> float:
        """The top dimensions' part of the average cosine, in cosine units (signed)."""
        return self.contributions[list(self.top)].sum().item()

    @property
    def share(self) -> float:
        """The top dimensions' share of ``sum |CC_i|``, in [k/d, 1]; NaN only when every
        contribution is 0 (see the module's docstring for why not of the average cosine)."""
        sizes = self.contributions.abs()
        total = sizes.sum().item()
        return sizes[list(self.top)].sum().item() / total if total > 0 else math.nan


def cosine_contributions(X: Tensor) -> Tensor:
    """CC_i = mean over ordered pairs of distinct non-zero points of ``u_i v_i``, ``u = x / |x|``:
    over all pairs, not sampled ones, as ``s_i^2 - sum_n u_ni^2`` with ``s = sum_n u_n``, in
    O(N d). Zero points are left out; below two non-zero points every CC_i is NaN."""
    return _cosine_contributions(_float64(X))


def _cosine_contributions(points: Tensor) -> Tensor:
    norms = torch.linalg.vector_norm(points, dim=1)
    units = points[norms > 0] / norms[norms > 0].unsqueeze(1)
    count = len(units)
    if count < 2:
        return torch.full((points.shape[1],), math.nan, dtype=torch.float64)
    total = units.sum(dim=0)
    return ((total.square() - units.square().sum(dim=0)) / (count * (count - 1))).cpu()


def rogue_dimensions(X: Tensor, k: int = ROGUE_K) -> RogueDimensions:
    """The cosine contributions of ``X`` and its ``k`` rogue dimensions (largest in size)."""
    return _rogue_dimensions(_float64(X), k)


def _rogue_dimensions(points: Tensor, k: int) -> RogueDimensions:
    contributions = _cosine_contributions(points)
    if not 1 <= k <= len(contributions):
        raise ValueError(f"k must lie in [1, {len(contributions)}] for this cloud, got {k}")
    top = contributions.abs().nan_to_num(-1.0).argsort(descending=True, stable=True)[:k]
    return RogueDimensions(contributions, tuple(top.tolist()))


@dataclass(frozen=True)
class Overlap:
    """How two sets of dimensions overlap, e.g. the pre-trained and the fine-tuned outliers."""

    kept: tuple[int, ...]  # in both, in the first set's order
    jaccard: float  # |A & B| / |A | B|; NaN when both are empty
    survival: float  # |A & B| / |A|; NaN when A is empty


def overlap(first: Iterable[int], second: Iterable[int]) -> Overlap:
    """The overlap of ``first`` (e.g. epoch 0's outliers) with ``second`` (a later epoch's)."""
    first, second = list(dict.fromkeys(first)), set(second)
    kept = tuple(dim for dim in first if dim in second)
    union = len(set(first) | second)
    return Overlap(
        kept=kept,
        jaccard=len(kept) / union if union else math.nan,
        survival=len(kept) / len(first) if first else math.nan,
    )


@dataclass(frozen=True)
class OutlierMeasures:
    """The outlier and rogue dimensions of one cloud, and the scalars a run logs of them."""

    outliers: OutlierDimensions
    rogue: RogueDimensions

    @property
    def scalars(self) -> dict[str, float]:
        """``n_outliers``, ``outlier_var_share``, ``max_var_ratio``, ``rogue_cosine`` and
        ``rogue_share`` (see ``docs/isotropy.md``)."""
        return {
            "n_outliers": float(self.outliers.count),
            "outlier_var_share": self.outliers.variance_share,
            "max_var_ratio": self.outliers.max_ratio,
            "rogue_cosine": self.rogue.cosine,
            "rogue_share": self.rogue.share,
        }


def measure_outliers(
    X: Tensor, factor: float = OUTLIER_FACTOR, k: int = ROGUE_K
) -> OutlierMeasures:
    """The outlier dimensions (``factor``) and the ``k`` rogue dimensions of ``X``, from one
    checked float64 copy."""
    points = _float64(X)
    variances = points.var(dim=0, correction=0).cpu()
    return OutlierMeasures(outliers_from_variances(variances, factor), _rogue_dimensions(points, k))
