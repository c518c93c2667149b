"""Isotropy enhancement: post-process an embedding space so that no direction dominates it.

The four methods Rajaee & Pilehvar (Findings of EMNLP 2021) apply to ask whether the dominant
directions are noise or task knowledge, and ``standardize``, which damps dimensions rather than
directions (sources: docs/analysis.md#methods-behind-t2-t4-and-t5). Each takes an (N, d) tensor
and returns the transformed points with the same shape and dtype, computed in float64; the
clustered methods take the labels from :func:`cluster_labels`, so one clustering serves several.
"""

from __future__ import annotations

import torch
from torch import Tensor

from isotune.isotropy import kmeans


def zero_mean(X: Tensor) -> Tensor:
    """The points minus their mean."""
    points = X.double()
    return (points - points.mean(dim=0)).to(X.dtype)


def standardize(X: Tensor) -> Tensor:
    """Each dimension minus its mean, over its standard deviation (ddof 0, as Timkey & van
    Schijndel's z-scores); a constant dimension becomes 0."""
    points = X.double()
    centred = points - points.mean(dim=0)
    std = centred.square().mean(dim=0).sqrt()
    return (centred / std.where(std > 0, 1.0)).to(X.dtype)


def all_but_the_top(X: Tensor, n_components: int) -> Tensor:
    """Centre the points, then remove their projections on the top ``n_components`` principal
    components (all of them when the cloud has fewer: the points become zero)."""
    if n_components < 0:
        raise ValueError(f"n_components must be >= 0, got {n_components}")
    points = X.double()
    centred = points - points.mean(dim=0)
    top = torch.linalg.svd(centred, full_matrices=False).Vh[:n_components]  # (D, d), orthonormal
    return (centred - (centred @ top.T) @ top).to(X.dtype)


def cluster_labels(X: Tensor, n_clusters: int, seed: int = 0) -> Tensor:
    """k-means cluster of each point: the seeded k-means of :mod:`isotune.isotropy` (k-means++
    seeding, Lloyd iterations), so enhancement and local isotropy see the same clusters."""
    if not 1 <= n_clusters <= len(X):
        raise ValueError(f"n_clusters must lie in [1, {len(X)}] for {len(X)} points")
    return kmeans(zero_mean(X.double()), n_clusters, seed)


def cluster_zero_mean(X: Tensor, labels: Tensor) -> Tensor:
    """Each point minus the mean of its cluster (``labels``: one cluster id per point)."""
    return _per_cluster(X, labels, zero_mean)


def cluster_based(X: Tensor, labels: Tensor, n_components: int) -> Tensor:
    """All-but-the-top inside each cluster: centre it, remove its own top principal components."""
    return _per_cluster(X, labels, lambda points: all_but_the_top(points, n_components))


def _per_cluster(X: Tensor, labels: Tensor, transform) -> Tensor:
    if labels.shape != (len(X),):
        raise ValueError(f"need one label per point: {len(X)} points, labels {labels.shape}")
    result = torch.empty_like(X)
    for cluster in labels.unique():
        members = labels == cluster
        result[members] = transform(X[members])
    return result
