"""Isotropy measures: analytic extremes, invariances, and agreement with independent computations
(brute force in numpy, the published IsoScore package)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import entropy

from isotune.isotropy import (
    average_cosine,
    isobn_stats,
    isoscore,
    isoscore_star,
    local_isotropy,
    measure_all,
    partition_isotropy,
    spectrum,
)


def anisotropic_cloud(n: int = 2000, d: int = 12, seed: int = 0) -> np.ndarray:
    """Gaussian points with well-separated variances along random axes, off the origin."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(3.0, 0.2, d)
    rotation, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (rng.standard_normal((n, d)) * scales) @ rotation.T + rng.normal(0.5, 0.2, d)


def random_rotation(d: int, seed: int = 1) -> np.ndarray:
    rotation, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return rotation


def t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


# Input validation


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (torch.zeros(5), r"2-D .* shape \(5,\)"),
        (torch.zeros(2, 3, 4), r"2-D .* shape \(2, 3, 4\)"),
        (torch.zeros(1, 8), r"at least 2 points .* shape \(1, 8\)"),
        (torch.zeros(8, 1), r"2 dimensions, got shape \(8, 1\)"),
        (torch.tensor([[0.0, 1.0], [math.nan, 2.0]]), "NaN or inf"),
        (torch.tensor([[0.0, 1.0], [math.inf, 2.0]]), "NaN or inf"),
    ],
)
@pytest.mark.parametrize(
    "measure",
    [isobn_stats, partition_isotropy, average_cosine, isoscore, isoscore_star, spectrum],
)
def test_bad_input_raises_a_value_error_naming_the_problem(measure, bad, message):
    with pytest.raises(ValueError, match=message):
        measure(bad)


def test_local_isotropy_rejects_more_clusters_than_points():
    with pytest.raises(ValueError, match=r"k must lie in \[1, 10\]"):
        local_isotropy(torch.randn(10, 3), k=11)


# IsoBN statistics


def test_isobn_stats_match_numpy_std_and_corrcoef():
    X = anisotropic_cloud()
    stats = isobn_stats(t(X))
    std = X.std(axis=0)  # ddof 0, like IsoBN's batch std
    corr = np.corrcoef(X, rowvar=False)
    upper = np.abs(corr[np.triu_indices(X.shape[1], k=1)])
    np.testing.assert_allclose(stats.std.numpy(), std, rtol=1e-10)
    np.testing.assert_allclose(stats.corr_abs.numpy(), upper, rtol=1e-9, atol=1e-12)
    assert stats.std_mean == pytest.approx(std.mean(), rel=1e-10)
    assert stats.std_std == pytest.approx(std.std(), rel=1e-9)
    assert (stats.std_min, stats.std_max) == pytest.approx((std.min(), std.max()), rel=1e-10)
    assert stats.std_cv == pytest.approx(std.std() / std.mean(), rel=1e-9)
    off_diagonal = ~np.eye(X.shape[1], dtype=bool)
    assert stats.corr_abs_mean == pytest.approx(np.abs(corr[off_diagonal]).mean(), rel=1e-9)
    assert stats.n_constant_dims == 0


def test_isobn_stats_exclude_constant_dimensions_without_nan():
    X = anisotropic_cloud(n=500, d=6)
    X[:, 2] = 3.0
    stats = isobn_stats(t(X))
    varying = np.delete(X, 2, axis=1)
    corr = np.corrcoef(varying, rowvar=False)
    assert stats.n_constant_dims == 1
    assert stats.std[2] == 0.0
    assert not torch.isnan(stats.std).any() and not torch.isnan(stats.corr_abs).any()
    assert len(stats.corr_abs) == 5 * 4 // 2
    np.testing.assert_allclose(stats.corr_abs.numpy(), np.abs(corr[np.triu_indices(5, k=1)]))
    assert math.isnan(isobn_stats(torch.ones(4, 3)).corr_abs_mean)


# Partition-function isotropy I(W)


def reference_iw(X: np.ndarray) -> float:
    """I(W) by a direct loop over the eigenvectors of X^T X, both signs, exp in float64."""
    _, eigenvectors = np.linalg.eigh(X.T @ X)
    partition = []
    for u in eigenvectors.T:
        projection = X @ u
        partition += [np.exp(projection).sum(), np.exp(-projection).sum()]
    return min(partition) / max(partition)


def test_partition_isotropy_matches_a_direct_loop_over_eigenvectors():
    X = anisotropic_cloud(n=800, d=6)
    result = partition_isotropy(t(X))
    expected = reference_iw(X)
    assert 0.0 < expected < 0.5
    assert result.iw == pytest.approx(expected, rel=1e-9)
    assert result.log_iw == pytest.approx(math.log(expected), rel=1e-9)


def test_partition_isotropy_does_not_depend_on_eigenvector_signs(monkeypatch):
    X = t(anisotropic_cloud(n=800, d=6))
    before = partition_isotropy(X)
    eigh = torch.linalg.eigh

    def eigh_with_flipped_signs(matrix):
        values, vectors = eigh(matrix)
        signs = torch.tensor([(-1.0) ** i for i in range(vectors.shape[1])], dtype=vectors.dtype)
        return torch.return_types.linalg_eigh((values, vectors * signs))

    monkeypatch.setattr(torch.linalg, "eigh", eigh_with_flipped_signs)
    after = partition_isotropy(X)
    assert after.log_iw == pytest.approx(before.log_iw, rel=1e-12)
    # Negating the cloud swaps Z(u) and Z(-u) for every u: a one-sign convention would change.
    assert partition_isotropy(-X).log_iw == pytest.approx(before.log_iw, rel=1e-12)


def test_partition_isotropy_of_an_isotropic_gaussian_is_near_one():
    X = torch.randn(20000, 10, generator=torch.Generator().manual_seed(0))
    assert partition_isotropy(X).iw > 0.9
    assert partition_isotropy(0.1 * X).iw > 0.99


def test_partition_isotropy_of_a_rank_one_cloud_is_near_zero():
    generator = torch.Generator().manual_seed(0)
    direction = torch.randn(10, generator=generator)
    X = 10 * torch.randn(500, 1, generator=generator) * direction / direction.norm()
    result = partition_isotropy(X)
    assert result.log_iw < -20
    assert result.iw == pytest.approx(math.exp(result.log_iw))


def test_partition_isotropy_does_not_overflow_on_large_norms():
    X = (250 * anisotropic_cloud(n=1000, d=16, seed=3)).astype(np.float32)
    assert np.linalg.norm(X, axis=1).mean() > 500
    X64 = X.astype(np.float64)
    _, eigenvectors = np.linalg.eigh(X64.T @ X64)
    projections = X64 @ eigenvectors
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(projections)).any()  # the naive partition function overflows
    log_z = np.concatenate([logsumexp(projections, axis=0), logsumexp(-projections, axis=0)])
    result = partition_isotropy(t(X))
    assert math.isfinite(result.log_iw) and result.log_iw < -100
    assert 0.0 <= result.iw <= 1.0
    assert result.log_iw == pytest.approx(log_z.min() - log_z.max(), rel=1e-9)


# Average cosine


def test_average_cosine_matches_brute_force_over_all_pairs():
    X = anisotropic_cloud(n=300, d=8)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    cosines = unit @ unit.T
    expected = cosines[~np.eye(len(X), dtype=bool)].mean()
    assert average_cosine(t(X)) == pytest.approx(expected, rel=1e-10)


def test_average_cosine_analytic_values():
    v = torch.tensor([[1.0, 2.0, -3.0]])
    assert average_cosine(v.repeat(5, 1)) == pytest.approx(1.0, abs=1e-12)
    assert average_cosine(torch.eye(7)) == pytest.approx(0.0, abs=1e-12)
    assert average_cosine(torch.cat([v, -v])) == pytest.approx(-1.0, abs=1e-12)
    d = 6  # vertices of a regular simplex centred at the origin: cos = -1/d for every pair
    simplex = torch.eye(d + 1) - 1.0 / (d + 1)
    assert average_cosine(simplex) == pytest.approx(-1.0 / d, abs=1e-12)


def test_average_cosine_excludes_zero_vectors():
    v = torch.tensor([[1.0, 2.0, -3.0]])
    with_zeros = torch.cat([v.repeat(4, 1), torch.zeros(3, 3)])
    assert average_cosine(with_zeros) == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(average_cosine(torch.cat([v, torch.zeros(2, 3)])))


def test_average_cosine_is_invariant_to_scaling_each_point():
    X = t(anisotropic_cloud(n=300, d=8))
    scales = torch.rand(300, 1, generator=torch.Generator().manual_seed(0), dtype=X.dtype) + 0.1
    assert average_cosine(X * scales) == pytest.approx(average_cosine(X), rel=1e-10)
    assert average_cosine(X * 1e4) == pytest.approx(average_cosine(X), rel=1e-10)


# IsoScore and IsoScore*


# The package (2.0.1, signature IsoScore(points)) takes sqrt(d) of an integer tensor, which torch
# evaluates in float32: agreement is to float32 precision even on float64 points.
PACKAGE_RTOL = 1e-6


def test_isoscore_matches_the_published_package():
    package = pytest.importorskip("IsoScore.IsoScore")
    for X in (anisotropic_cloud(), anisotropic_cloud(n=50, d=80, seed=2)):
        expected = float(package.IsoScore(X))
        assert isoscore(t(X)) == pytest.approx(expected, rel=PACKAGE_RTOL, abs=1e-9)


def test_isoscore_star_matches_the_published_package():
    package = pytest.importorskip("IsoScore.IsoScore")
    X = anisotropic_cloud(n=40, d=30)
    C0 = np.diag(np.linspace(0.5, 2.0, 30))
    expected = float(package.IsoScore_star(X, torch.from_numpy(C0), 0.3))
    assert isoscore_star(t(X), t(C0), zeta=0.3).item() == pytest.approx(expected, rel=PACKAGE_RTOL)


def test_isoscore_analytic_extremes():
    isotropic = torch.randn(50000, 8, generator=torch.Generator().manual_seed(0))
    assert isoscore(isotropic) > 0.99
    rank_one = torch.randn(1000, 1, dtype=torch.float64) * torch.randn(1, 8, dtype=torch.float64)
    assert isoscore(rank_one) == pytest.approx(0.0, abs=1e-9)
    assert math.isnan(isoscore(torch.ones(5, 4)))


def test_isoscore_is_invariant_to_rotation_scaling_and_translation():
    X = anisotropic_cloud()
    score = isoscore(t(X))
    assert 0.05 < score < 0.95
    assert isoscore(t(X @ random_rotation(X.shape[1]))) == pytest.approx(score, rel=1e-9)
    assert isoscore(t(17.0 * X)) == pytest.approx(score, rel=1e-9)
    assert isoscore(t(X + 100.0)) == pytest.approx(score, rel=1e-9)


def test_isoscore_star_reduces_to_isoscore_and_shrinks_towards_isotropy():
    X = t(anisotropic_cloud(n=30, d=40))
    assert isoscore_star(X, zeta=0.0).item() == pytest.approx(isoscore(X), rel=1e-9)
    scores = [isoscore_star(X, zeta=zeta).item() for zeta in (0.0, 0.2, 0.6)]
    assert scores == sorted(scores) and scores[0] < scores[-1]
    assert isoscore_star(X, zeta=1.0).item() == pytest.approx(1.0, abs=1e-9)
    assert isoscore_star(5 * X).item() == pytest.approx(isoscore_star(X).item(), rel=1e-9)
    with pytest.raises(ValueError, match="zeta"):
        isoscore_star(X, zeta=1.5)
    with pytest.raises(ValueError, match=r"C0 must have shape \(40, 40\)"):
        isoscore_star(X, C0=torch.eye(3))


def test_isoscore_star_is_differentiable():
    X = torch.randn(16, 8, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
    X.requires_grad_(True)
    score = isoscore_star(X)
    assert score.dtype == torch.float32 and score.requires_grad
    score.backward()
    assert X.grad is not None and torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0
    small = torch.randn(10, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.autograd.gradcheck(isoscore_star, (small.requires_grad_(True),))


# Spectrum


def test_spectrum_matches_numpy_and_scipy():
    X = anisotropic_cloud()
    result = spectrum(t(X))
    variances = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    ratio = variances / variances.sum()
    np.testing.assert_allclose(result.variances.numpy(), variances, rtol=1e-9)
    np.testing.assert_allclose(result.explained_variance_ratio.numpy(), ratio, rtol=1e-9)
    assert result.effective_rank == pytest.approx(math.exp(entropy(ratio)), rel=1e-9)
    expected_pr = variances.sum() ** 2 / (variances**2).sum()
    assert result.participation_ratio == pytest.approx(expected_pr, rel=1e-9)


def test_spectrum_counts_dominant_directions_and_extremes():
    generator = torch.Generator().manual_seed(0)
    scales = torch.ones(50)
    scales[:3] = torch.tensor([10.0, 9.0, 8.0])  # variances 100, 81, 64 against a mean of ~5
    X = torch.randn(5000, 50, generator=generator) * scales
    assert spectrum(X).n_dominant == 3
    assert spectrum(X, factor=1000.0).n_dominant == 0
    isotropic = spectrum(torch.randn(50000, 8, generator=generator))
    assert isotropic.effective_rank == pytest.approx(8.0, rel=1e-3)
    assert isotropic.participation_ratio == pytest.approx(8.0, rel=1e-2)
    rank_one = spectrum(torch.randn(100, 1, generator=generator) * torch.ones(1, 8))
    assert rank_one.effective_rank == pytest.approx(1.0, abs=1e-6)
    assert rank_one.participation_ratio == pytest.approx(1.0, abs=1e-6)


# Local isotropy


def three_blobs() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    centres = torch.tensor([[20.0, 0, 0, 0], [0, 20.0, 0, 0], [0, 0, 20.0, 0]])
    return torch.cat([c + torch.randn(200, 4, generator=generator) for c in centres])


def test_local_isotropy_finds_separated_clusters_and_centres_them():
    X = three_blobs()
    result = local_isotropy(X, k=3)
    labels = result.labels.view(3, 200)
    assert all(len(row.unique()) == 1 for row in labels) and len(labels[:, 0].unique()) == 3
    assert result.cluster_sizes.tolist() == [200, 200, 200]
    for measures in result.per_cluster.values():
        assert abs(measures["avg_cosine"]) < 0.05  # a centred isotropic blob
        assert measures["isoscore"] > 0.8
    assert result.pooled["isoscore"] > 0.8 > isoscore(X)


def test_local_isotropy_is_deterministic_for_a_seed():
    X = torch.randn(300, 5, generator=torch.Generator().manual_seed(0))
    first, second = local_isotropy(X, k=4, seed=7), local_isotropy(X, k=4, seed=7)
    assert torch.equal(first.labels, second.labels)
    assert first.pooled == second.pooled and first.per_cluster == second.per_cluster


# measure_all


def test_measure_all_is_flat_prefixed_and_agrees_with_each_measure():
    X = t(anisotropic_cloud())
    measures = measure_all(X, prefix="val/")
    expected_names = {
        "std_mean", "std_std", "std_min", "std_max", "std_cv", "corr_abs_mean", "n_constant_dims",
        "iw", "log_iw", "avg_cosine", "isoscore", "effective_rank", "participation_ratio",
        "n_dominant", "top1_var_ratio", "top10_var_ratio",
    }  # fmt: skip
    assert set(measures) == {"val/" + name for name in expected_names}
    assert all(type(value) is float and math.isfinite(value) for value in measures.values())
    spec = spectrum(X)
    assert measures["val/iw"] == pytest.approx(partition_isotropy(X).iw, rel=1e-9)
    assert measures["val/avg_cosine"] == pytest.approx(average_cosine(X), rel=1e-12)
    assert measures["val/isoscore"] == pytest.approx(isoscore(X), rel=1e-12)
    assert measures["val/corr_abs_mean"] == pytest.approx(isobn_stats(X).corr_abs_mean)
    assert measures["val/effective_rank"] == pytest.approx(spec.effective_rank, rel=1e-12)
    assert measures["val/n_dominant"] == spec.n_dominant
    assert measures["val/top1_var_ratio"] == pytest.approx(spec.explained_variance_ratio[0].item())
    top10 = spec.explained_variance_ratio[:10].sum().item()
    assert measures["val/top10_var_ratio"] == pytest.approx(top10)


def test_measure_all_adds_pooled_local_measures_on_request():
    X = three_blobs()
    measures = measure_all(X, local_k=3)
    assert measures["local_isoscore"] == pytest.approx(local_isotropy(X, k=3).pooled["isoscore"])
    assert set(measures) == {
        name for measure in measure_all(X) for name in (measure, f"local_{measure}")
    }
