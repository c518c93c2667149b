"""Isotropy enhancement on analytic cases: what each method must remove, and nothing else."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from isotune.isotropy import isoscore, outlier_dimensions
from isotune.isotropy.enhance import (
    all_but_the_top,
    cluster_based,
    cluster_labels,
    cluster_zero_mean,
    standardize,
    zero_mean,
)


def rotation(d: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))
    return q


def anisotropic_cloud(n: int = 500, d: int = 8, seed: int = 0) -> torch.Tensor:
    """Gaussian points with well-separated variances along rotated axes, off the origin."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.logspace(1, -1, d, dtype=torch.float64)
    points = torch.randn(n, d, generator=generator, dtype=torch.float64) * scales
    return points @ rotation(d, seed).T + 3.0


def axis_points(scales: torch.Tensor, offset: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Points +-s_i q_i (plus an offset): their covariance is exactly diagonal in ``basis``."""
    along = torch.diag(scales) @ basis.T  # row i: s_i q_i
    return torch.cat([along, -along]) + offset


def test_zero_mean_gives_zero_mean_and_keeps_differences_and_dtype():
    X = anisotropic_cloud().float()
    centred = zero_mean(X)
    assert centred.dtype == torch.float32 and centred.shape == X.shape
    assert centred.double().mean(dim=0).abs().max() < 1e-5
    torch.testing.assert_close(centred[1:] - centred[:-1], X[1:] - X[:-1], rtol=0, atol=1e-5)


def test_all_but_the_top_removes_exactly_the_top_axes_of_an_exact_cloud():
    d = 5
    basis = rotation(d, seed=3)
    scales = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    X = axis_points(scales, offset=torch.full((d,), 7.0, dtype=torch.float64), basis=basis)
    for n_components in range(d + 1):
        expected = axis_points(
            torch.cat([torch.zeros(n_components), scales[n_components:]]).double(),
            offset=torch.zeros(d, dtype=torch.float64),
            basis=basis,
        )
        torch.testing.assert_close(all_but_the_top(X, n_components), expected)


def test_all_but_the_top_removes_the_top_directions_and_keeps_the_other_variances():
    X = anisotropic_cloud()
    variances = torch.linalg.eigvalsh(torch.cov(X.T)).flip(0)
    top = torch.linalg.svd(X - X.mean(dim=0), full_matrices=False).Vh[:3]
    result = all_but_the_top(X, 3)
    assert (result @ top.T).abs().max() < 1e-9
    after = torch.linalg.eigvalsh(torch.cov(result.T)).flip(0)
    torch.testing.assert_close(after[:5], variances[3:])
    assert after[5:].abs().max() < 1e-9
    torch.testing.assert_close(all_but_the_top(X, 0), zero_mean(X))


@pytest.mark.parametrize(
    "scales",
    [
        [10.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # dominated: IsoScore rises
        [3.0, 2.0, 1.0, 1.0, 1.0, 1.0],  # dominated, just
        [2.0, 1.9, 1.8, 1.7, 1.6, 1.5],  # flat: IsoScore falls (one direction fewer)
    ],
)
def test_removing_the_top_direction_raises_isoscore_exactly_when_it_dominates(scales):
    """IsoScore = (PR - 1) / (d - 1) with PR = (sum v)^2 / sum v^2 of the variances v; dropping
    the largest variance v1 raises PR iff v1 / sum v > 2 / (PR + 1)."""
    X = axis_points(torch.tensor(scales, dtype=torch.float64), torch.ones(6), rotation(6, seed=2))
    variances = torch.tensor(scales, dtype=torch.float64) ** 2
    participation = variances.sum() ** 2 / (variances**2).sum()
    dominates = variances[0] / variances.sum() > 2 / (participation + 1)
    assert (isoscore(all_but_the_top(X, 1)) > isoscore(X)) == bool(dominates)


def test_one_cluster_makes_the_clustered_methods_their_global_ones():
    X = anisotropic_cloud()
    one = torch.zeros(len(X), dtype=torch.long)
    torch.testing.assert_close(cluster_zero_mean(X, one), zero_mean(X))
    torch.testing.assert_close(cluster_based(X, one, 2), all_but_the_top(X, 2))
    assert torch.equal(cluster_labels(X, 1), one)


def two_blobs() -> tuple[torch.Tensor, torch.Tensor]:
    first = anisotropic_cloud(n=200, seed=1)
    second = anisotropic_cloud(n=100, seed=2) + 100.0
    return torch.cat([first, second]), torch.cat([torch.zeros(200), torch.ones(100)]).long()


def test_cluster_labels_find_separated_blobs_deterministically():
    X, truth = two_blobs()
    labels = cluster_labels(X, 2, seed=0)
    assert torch.equal(labels, truth) or torch.equal(labels, 1 - truth)
    assert torch.equal(labels, cluster_labels(X, 2, seed=0))
    with pytest.raises(ValueError, match="n_clusters"):
        cluster_labels(X, len(X) + 1)


def test_clustered_methods_apply_their_global_method_inside_each_cluster():
    X, labels = two_blobs()
    centred = cluster_zero_mean(X, labels)
    based = cluster_based(X, labels, 2)
    for cluster in (0, 1):
        members = labels == cluster
        assert centred[members].mean(dim=0).abs().max() < 1e-9
        torch.testing.assert_close(based[members], all_but_the_top(X[members], 2))
    with pytest.raises(ValueError, match="one label per point"):
        cluster_zero_mean(X, labels[:-1])


def test_standardize_gives_every_dimension_mean_0_and_std_1_and_removes_outliers():
    generator = torch.Generator().manual_seed(0)
    points = torch.randn(500, 8, generator=generator, dtype=torch.float64) * 3 + 1
    points[:, 2] *= 10  # an outlier dimension
    points[:, 5] = 4.0  # a constant one
    result = standardize(points.float())
    assert result.dtype == torch.float32
    expected = (points.numpy() - points.numpy().mean(0)) / points.numpy().std(0)
    expected[:, 5] = 0.0
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert outlier_dimensions(points).indices == (2,)
    assert outlier_dimensions(result).indices == ()
