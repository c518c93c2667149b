"""Seeded, deterministic k-means in torch, and a cloud centred within its clusters: local isotropy
(Cai et al. 2021) measures each cluster, or their union, on its own centre.
"""

from __future__ import annotations

import torch
from torch import Tensor

KMEANS_MAX_ITER = 100  # Lloyd iterations at most; they usually stop earlier, when no label changes


def _cluster_means(points: Tensor, labels: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Mean of each of the k clusters (0 for an empty one) and the cluster sizes."""
    sizes = torch.bincount(labels, minlength=k)
    sums = points.new_zeros(k, points.shape[1]).index_add_(0, labels, points)
    return sums / sizes.clamp(min=1).unsqueeze(1), sizes


def kmeans(points: Tensor, k: int, seed: int = 0, max_iter: int = KMEANS_MAX_ITER) -> Tensor:
    """Cluster labels from k-means++ seeding (a seeded torch.Generator) and Lloyd iterations that
    stop when no label changes. An emptied cluster keeps its previous centre."""
    generator = torch.Generator().manual_seed(seed)
    squared_norms = points.square().sum(dim=1)

    def squared_distances(centres: Tensor) -> Tensor:
        cross = points @ centres.T
        return (squared_norms[:, None] - 2 * cross + centres.square().sum(dim=1)).clamp(min=0)

    centres = points[torch.randint(len(points), (1,), generator=generator)]
    nearest = squared_distances(centres).squeeze(1)
    for _ in range(1, k):
        weights = nearest.cpu() if nearest.sum() > 0 else torch.ones(len(points))
        chosen = points[torch.multinomial(weights, 1, generator=generator).to(points.device)]
        centres = torch.cat([centres, chosen])
        nearest = torch.minimum(nearest, squared_distances(chosen).squeeze(1))
    labels = squared_distances(centres).argmin(dim=1)
    for _ in range(max_iter):
        means, sizes = _cluster_means(points, labels, k)
        centres = torch.where(sizes.unsqueeze(1) > 0, means, centres)
        new_labels = squared_distances(centres).argmin(dim=1)
        if torch.equal(new_labels, labels):
            break
        labels = new_labels
    return labels


def centre_clusters(
    centred: Tensor, k: int, seed: int, max_iter: int = KMEANS_MAX_ITER
) -> tuple[Tensor, Tensor]:
    """The points, each minus the mean of its k-means cluster, and the cluster labels. k-means
    runs on the globally ``centred`` points: the same clusters, with smaller numbers."""
    n = len(centred)
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, {n}] for {n} points, got {k}")
    labels = kmeans(centred, k, seed, max_iter)
    means, _ = _cluster_means(centred, labels, k)
    return centred - means[labels], labels
