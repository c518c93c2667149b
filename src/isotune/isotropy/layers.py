"""The geometry of a model layer by layer (Razzhigaev et al., Findings of EACL 2024): a profile of
measures per layer, and where its largest activations sit (Sun et al., "Massive Activations in
Large Language Models", COLM 2024). Formulas, sources and blind spots:
docs/isotropy.md#layer-profiles-anisotropy-intrinsic-dimension-massive-activations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from isotune.isotropy.dimension import (
    MLE_NEIGHBOURS,
    mle_from_distances,
    neighbour_distances,
    twonn_from_distances,
    twonn_microscope_from_distances,
)
from isotune.isotropy.measures import anisotropy, average_cosine, isoscore, partition_isotropy
from isotune.isotropy.point_cloud import PointCloud

# What a layer profile holds, in the order figures and tables show them.
PROFILE_MEASURES = (
    "anisotropy",
    "isoscore",
    "avg_cosine",
    "log_iw",
    "twonn",
    "twonn_microscope",
    "mle_id",
)
DIMENSION_MIN_POINTS = 3  # a point and its two nearest neighbours
MASSIVE_K = 3  # Sun et al. report the top 3 magnitudes of each layer


def layer_profile(X: Tensor, mle_neighbours: int = MLE_NEIGHBOURS) -> dict[str, float]:
    """:data:`PROFILE_MEASURES` of one layer's cloud (N points x d dimensions), the covariance
    and one nearest-neighbour search shared (the MLE with ``mle_neighbours``, at most N - 1).

    A cloud smaller than its measures need (a probe of a few examples) gives NaN, so that no
    caller has to guard the call: the intrinsic dimensions below :data:`DIMENSION_MIN_POINTS`
    points, every measure below 2.
    """
    if X.ndim == 2 and len(X) < 2:
        return dict.fromkeys(PROFILE_MEASURES, math.nan)
    cloud = PointCloud(X)
    measures = {
        "anisotropy": anisotropy(cloud),
        "isoscore": isoscore(cloud),
        "avg_cosine": average_cosine(cloud),
        "log_iw": partition_isotropy(cloud).log_iw,
    }
    if cloud.n < DIMENSION_MIN_POINTS:
        return measures | dict.fromkeys(PROFILE_MEASURES[len(measures) :], math.nan)
    neighbours = min(mle_neighbours, cloud.n - 1)
    distances = neighbour_distances(cloud.data, max(neighbours, 2))  # float32 stays
    mean_norm = torch.linalg.vector_norm(cloud.centred, dim=1).mean().item()
    return measures | {
        "twonn": twonn_from_distances(distances),
        "twonn_microscope": twonn_microscope_from_distances(distances, mean_norm),
        "mle_id": mle_from_distances(distances[:, :neighbours]),
    }


@dataclass(frozen=True)
class MassiveActivations:
    """A layer's ``k`` largest activation magnitudes and where they sit, largest first."""

    magnitudes: tuple[float, ...]
    rows: tuple[int, ...]  # the token (row of the states given) of each
    dims: tuple[int, ...]  # the hidden dimension of each
    median: float  # the median magnitude of all the states given

    @property
    def ratio(self) -> float:
        """The largest magnitude over the median one: Sun et al.'s massive activations are
        about 1,000 times the median and more (inf when the median is 0)."""
        return self.magnitudes[0] / self.median if self.median > 0 else float("inf")


def massive_activations(states: Tensor, k: int = MASSIVE_K) -> MassiveActivations:
    """The ``k`` largest ``|activation|`` of one layer's token ``states`` (tokens x d), with their
    token and dimension, and the median; give every token, as they sit at the first and at
    delimiters."""
    magnitudes = states.detach().abs().to(torch.float64)
    if magnitudes.ndim != 2 or not 1 <= k <= magnitudes.numel():
        raise ValueError(
            f"need (tokens, dims) states with at least k = {k} values, got shape "
            f"{tuple(magnitudes.shape)}"
        )
    top = magnitudes.flatten().topk(k)
    dims = magnitudes.shape[1]
    return MassiveActivations(
        magnitudes=tuple(top.values.tolist()),
        rows=tuple((top.indices // dims).tolist()),
        dims=tuple((top.indices % dims).tolist()),
        median=magnitudes.median().item(),
    )
