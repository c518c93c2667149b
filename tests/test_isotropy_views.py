"""A view's measures where its vectors are (isotune.isotropy.views): today's CPU numbers within
1e-6 relative, IsoScore* in float64 (the published package and a numpy reference), and float32
products at full precision whatever the run allowed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from isotune.isotropy import isoscore_star, measure_cloud, measure_outliers
from isotune.isotropy.dimension import neighbour_distances
from isotune.isotropy.precision import full_precision
from isotune.isotropy.views import measure_view


def probe_like_cloud(n: int = 277, d: int = 64, seed: int = 0) -> torch.Tensor:
    """float32 sentence vectors as an encoder gives them: off the origin, a few loud dimensions."""
    generator = torch.Generator().manual_seed(seed)
    points = torch.randn(n, d, generator=generator, dtype=torch.float64)
    points[:, :3] *= torch.tensor([12.0, 6.0, 3.0], dtype=torch.float64)
    return (points + 0.7).float()


def numpy_isoscore_star(points: np.ndarray, zeta: float = 0.2) -> float:
    """IsoScore* with the identity scaled to the mean variance as C0: the singular values of the
    shrunk covariance, as the published code takes them (Rudman & Eickhoff 2024)."""
    covariance = np.cov(points, rowvar=False)
    d = covariance.shape[0]
    shrunk = (1 - zeta) * covariance + zeta * np.trace(covariance) / d * np.eye(d)
    values = np.linalg.svd(shrunk, compute_uv=False)
    participation = values.sum() ** 2 / np.square(values).sum()
    return (participation - 1) / (d - 1)


def test_every_scalar_equals_the_float32_cpu_computation_within_1e_6():
    """The callback measured float32 vectors on the CPU (IsoScore* of a float32 covariance):
    measure_view gives every one of those scalars within 1e-6 relative."""
    points = probe_like_cloud()
    today = {
        **measure_cloud(points).scalars,
        "isoscore_star": isoscore_star(points).item(),
        **measure_outliers(points).scalars,
    }
    measured = measure_view(points)
    assert list(measured.scalars) == list(today)
    for name, value in today.items():
        assert measured.scalars[name] == pytest.approx(value, rel=1e-6, abs=1e-12), name
    assert measured.outliers.outliers.indices == measure_outliers(points).outliers.indices


def test_isoscore_star_of_a_view_is_the_float64_value():
    """As the numpy reference to float64 rounding, and as the published package to its float32
    square root; float32's value differs more than that, so the device cannot move it."""
    points = probe_like_cloud(n=120, d=40)
    expected = numpy_isoscore_star(points.double().numpy())
    assert measure_view(points).scalars["isoscore_star"] == pytest.approx(expected, rel=1e-12)
    package = pytest.importorskip("IsoScore.IsoScore")
    C0 = torch.cov(points.double().T).diagonal().mean() * torch.eye(40, dtype=torch.float64)
    published = float(package.IsoScore_star(points.double().numpy(), C0, 0.2))
    assert measure_view(points).scalars["isoscore_star"] == pytest.approx(published, rel=1e-6)


def test_a_view_is_measured_in_its_own_float64_whatever_its_input_dtype():
    points = probe_like_cloud()
    as_float32, as_float64 = measure_view(points), measure_view(points.double())
    assert as_float32.scalars == as_float64.scalars


def test_full_precision_restores_the_callers_setting():
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        with full_precision():
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)


def test_neighbour_distances_ignore_a_lowered_matmul_precision():
    """TF32 on a GPU, bf16 passes on a CPU with bf16 units: the neighbours stay the same."""
    points = probe_like_cloud(n=600, d=48)
    expected = neighbour_distances(points, 20)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        assert torch.equal(neighbour_distances(points, 20), expected)
    finally:
        torch.set_float32_matmul_precision(before)
