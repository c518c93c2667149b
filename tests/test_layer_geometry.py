"""Layer-by-layer geometry: intrinsic dimension (TwoNN, LLM-Microscope's TwoNN, Levina-Bickel MLE),
Razzhigaev et al.'s anisotropy and massive activations, against their reference packages on fixed
clouds and against brute force.

Tolerances: scikit-dimension's TwoNN and MLE and LLM-Microscope's anisotropy compute in float64
as we do: relative 1e-9. LLM-Microscope's intrinsic dimension stores each point's two neighbour
distances in a float32 tensor (``torch.tensor`` of a list of 0-d float64 tensors), so its ratios
carry float32 rounding: relative 1e-6.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from isotune.isotropy import (
    PROFILE_MEASURES,
    anisotropy,
    average_cosine,
    isoscore,
    layer_profile,
    massive_activations,
    measure_all,
    mle_dimension,
    partition_isotropy,
    twonn,
    twonn_microscope,
)
from isotune.isotropy.dimension import neighbour_distances

PACKAGE_RTOL = 1e-9
MICROSCOPE_RTOL = 1e-6


def manifold_cloud(n: int, dim: int, ambient: int, noise: float, seed: int) -> torch.Tensor:
    """Gaussian points on a random ``dim``-dimensional subspace of R^ambient, off the origin,
    with isotropic noise of scale ``noise``."""
    generator = torch.Generator().manual_seed(seed)
    basis = torch.randn(dim, ambient, generator=generator, dtype=torch.float64)
    points = torch.randn(n, dim, generator=generator, dtype=torch.float64) @ basis
    points += noise * torch.randn(n, ambient, generator=generator, dtype=torch.float64)
    return points + 3.0


CLOUDS = {
    "plane_in_40d": manifold_cloud(300, 2, 40, 0.0, seed=0),
    "5d_noisy_in_64d": manifold_cloud(400, 5, 64, 0.05, seed=1),  # > 25 dims: chunked distances
    "gaussian_12d": manifold_cloud(250, 12, 12, 0.0, seed=2),  # <= 25 dims: a k-NN search
}


def microscope_functions():
    """LLM-Microscope's ``functions`` module (0.0.7), loaded from its file: the package's
    ``__init__`` runs ``from logit_lens import *``, a module it does not ship, so ``import
    llm_microscope`` fails."""
    spec = importlib.util.find_spec("llm_microscope")
    if spec is None:
        pytest.skip("llm-microscope is not installed (pip install -e '.[dev]')")
    path = Path(spec.submodule_search_locations[0]) / "functions.py"
    module_spec = importlib.util.spec_from_file_location("llm_microscope_functions", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", CLOUDS)
def test_twonn_and_mle_equal_scikit_dimension(name):
    skdim = pytest.importorskip("skdim")
    points = CLOUDS[name]
    expected = skdim.id.TwoNN().fit(points.numpy()).dimension_
    assert twonn(points) == pytest.approx(expected, rel=PACKAGE_RTOL)
    mle = skdim.id.MLE().fit(points.numpy(), comb="mean", n_neighbors=20).dimension_
    assert mle_dimension(points, k=20) == pytest.approx(mle, rel=PACKAGE_RTOL)


def test_twonn_drops_duplicates_as_scikit_dimension_does():
    skdim = pytest.importorskip("skdim")
    points = CLOUDS["gaussian_12d"].clone()
    points[7] = points[3]  # a duplicate pair: neither has a ratio
    with pytest.warns(UserWarning, match="duplicate"):
        expected = skdim.id.TwoNN().fit(points.numpy()).dimension_
    assert twonn(points) == pytest.approx(expected, rel=PACKAGE_RTOL)


@pytest.mark.parametrize("name", CLOUDS)
def test_microscope_dimension_and_anisotropy_equal_llm_microscope(name):
    microscope = microscope_functions()
    points = CLOUDS[name]
    expected = microscope.intrinsic_dimension(points, "cpu")
    assert twonn_microscope(points) == pytest.approx(expected, rel=MICROSCOPE_RTOL)
    expected = microscope.calculate_anisotropy_torch(points)
    assert anisotropy(points) == pytest.approx(expected, rel=PACKAGE_RTOL)
    assert measure_all(points)["top1_var_ratio"] == pytest.approx(expected, rel=PACKAGE_RTOL)


def test_estimators_find_the_dimension_of_a_linear_manifold():
    points = manifold_cloud(1500, 3, 30, 0.0, seed=3)
    assert twonn(points) == pytest.approx(3.0, rel=0.15)
    assert mle_dimension(points) == pytest.approx(3.0, rel=0.15)
    # The variant fits only the smallest fifth of the ratios: it reads the same manifold.
    assert twonn_microscope(points) == pytest.approx(3.0, rel=0.25)
    assert anisotropy(points) > 1 / 3 - 0.1  # three directions share the variance


def test_neighbour_distances_equal_brute_force_with_a_duplicate():
    points = CLOUDS["5d_noisy_in_64d"][:120].clone()
    points[5] = points[9]
    brute = np.linalg.norm(points.numpy()[:, None] - points.numpy()[None], axis=2)
    np.fill_diagonal(brute, np.inf)
    expected = np.sort(brute, axis=1)[:, :4]
    found = neighbour_distances(points, 4)
    np.testing.assert_allclose(found.numpy(), expected, rtol=1e-12)
    assert found[5, 0] == 0.0 and found[9, 0] == 0.0  # exactly, not a rounding error
    with pytest.raises(ValueError, match=r"k must lie in \[1, 119\]"):
        neighbour_distances(points, 120)


def test_neighbour_distances_equal_brute_force_across_row_blocks():
    """Rows past the first block of 512 are ranked at their own offset; a duplicate pair in two
    blocks is at distance exactly 0."""
    points = manifold_cloud(600, 5, 64, 0.05, seed=3)
    points[590] = points[5]
    brute = np.linalg.norm(points.numpy()[:, None] - points.numpy()[None], axis=2)
    np.fill_diagonal(brute, np.inf)
    found = neighbour_distances(points, 3)
    np.testing.assert_allclose(found.numpy(), np.sort(brute, axis=1)[:, :3], rtol=1e-12)
    assert found[5, 0] == 0.0 and found[590, 0] == 0.0


def test_layer_profile_is_each_measure_from_one_neighbour_search():
    points = CLOUDS["5d_noisy_in_64d"]
    profile = layer_profile(points)
    assert tuple(profile) == PROFILE_MEASURES
    assert profile == pytest.approx(
        {
            "anisotropy": anisotropy(points),
            "isoscore": isoscore(points),
            "avg_cosine": average_cosine(points),
            "log_iw": partition_isotropy(points).log_iw,
            "twonn": twonn(points),
            "twonn_microscope": twonn_microscope(points),
            "mle_id": mle_dimension(points),
        },
        rel=1e-12,
    )


def test_layer_profile_of_identical_points_is_nan_where_undefined():
    points = torch.ones(6, 4)  # e.g. layer 0's [CLS] embedding, the same for every example
    profile = layer_profile(points)
    for measure in ("anisotropy", "isoscore", "twonn", "twonn_microscope", "mle_id"):
        assert math.isnan(profile[measure]), measure


def test_layer_profile_below_the_points_its_estimators_need_is_nan_there():
    points = CLOUDS["5d_noisy_in_64d"]
    two = layer_profile(points[:2])  # a cloud measure needs 2 points, a dimension 3
    assert tuple(two) == PROFILE_MEASURES
    assert two["anisotropy"] == pytest.approx(anisotropy(points[:2]), rel=1e-12)
    for measure in ("twonn", "twonn_microscope", "mle_id"):
        assert math.isnan(two[measure]), measure
    for fewer in (points[:1], points[:0]):
        profile = layer_profile(fewer)
        assert tuple(profile) == PROFILE_MEASURES
        assert all(math.isnan(value) for value in profile.values())
    assert not math.isnan(layer_profile(points[:3])["twonn"])


def test_massive_activations_find_the_largest_magnitudes_and_where_they_sit():
    generator = torch.Generator().manual_seed(4)
    states = torch.randn(50, 16, generator=generator)
    states[0, 11] = -900.0  # the first token, one dimension (Sun et al.'s pattern)
    states[17, 3] = 400.0
    found = massive_activations(states, k=3)
    assert found.magnitudes[:2] == (900.0, 400.0)
    assert (found.rows[:2], found.dims[:2]) == ((0, 17), (11, 3))
    assert found.magnitudes[2] == states.abs().flatten().sort().values[-3].item()
    assert found.median == pytest.approx(states.abs().median().item())
    assert found.ratio == pytest.approx(900.0 / found.median)
    with pytest.raises(ValueError, match="at least k = 3"):
        massive_activations(states[:1, :2], k=3)
