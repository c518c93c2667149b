"""Outlier and rogue dimensions against NumPy restatements, the released code's rule and analytic
cases (``isotune.isotropy.outliers``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from isotune.isotropy import (
    average_cosine,
    cosine_contributions,
    dimension_variances,
    measure_outliers,
    outlier_dimensions,
    overlap,
    rogue_dimensions,
)


def cloud_with_outliers(seed: int = 0) -> tuple[torch.Tensor, list[int]]:
    """600 points in 40 dimensions, with dimensions 7, 21 and 3 stretched so that their variances
    stand at about 36, 25 and 16 times the others' (a mean near 2: all three are outliers), and a
    common offset, as pre-trained sentence vectors have."""
    generator = torch.Generator().manual_seed(seed)
    points = torch.randn(600, 40, generator=generator, dtype=torch.float64)
    for dim, scale in ((7, 6.0), (21, 5.0), (3, 4.0)):
        points[:, dim] *= scale
    return points + 0.5, [7, 21, 3]


def released_variances_and_principal(points: np.ndarray) -> tuple[np.ndarray, int]:
    """What the released analysis.py computes (max_var_predict): np.var and its argmax."""
    var = np.var(points, axis=0)
    return var, int(np.argmax(var))


def test_outliers_are_the_papers_rule_on_the_released_codes_variances():
    points, stretched = cloud_with_outliers()
    var, principal = released_variances_and_principal(points.numpy())
    found = outlier_dimensions(points)
    np.testing.assert_allclose(found.variances.numpy(), var, rtol=1e-12)
    np.testing.assert_allclose(dimension_variances(points.float()).numpy(), var, rtol=1e-5)
    assert found.principal == principal == 7
    expected = [int(d) for d in np.argsort(-var) if var[d] >= 5 * var.mean()]
    assert list(found.indices) == expected == stretched
    assert found.count == 3
    assert found.variance_share == pytest.approx(var[stretched].sum() / var.sum())
    assert found.max_ratio == pytest.approx(var.max() / var.mean())


def test_the_factor_moves_the_threshold():
    points, _ = cloud_with_outliers()
    var = np.var(points.numpy(), axis=0)
    for factor in (2.0, 5.0, 15.0, 30.0):
        chosen = outlier_dimensions(points, factor).indices
        assert sorted(chosen) == sorted(np.flatnonzero(var >= factor * var.mean()).tolist())
    assert outlier_dimensions(points, 100.0).indices == ()


def test_an_isotropic_or_constant_cloud_has_no_outliers():
    generator = torch.Generator().manual_seed(1)
    assert outlier_dimensions(torch.randn(5000, 30, generator=generator)).count == 0
    constant = outlier_dimensions(torch.ones(10, 4))
    assert constant.indices == () and math.isnan(constant.variance_share)
    assert math.isnan(constant.max_ratio)


@pytest.mark.parametrize("factor", [0, -1.0, math.nan, math.inf])
def test_a_factor_that_is_not_positive_and_finite_is_refused(factor):
    with pytest.raises(ValueError, match="factor must be a finite number > 0"):
        outlier_dimensions(torch.randn(10, 4), factor)


def test_cosine_contributions_equal_a_loop_over_pairs_and_add_up_to_the_average_cosine():
    points, _ = cloud_with_outliers()
    points = points[:60]
    points[5] = 0.0  # a zero vector has no direction: it takes part in no pair
    units = [p / np.linalg.norm(p) for p in points.numpy() if np.linalg.norm(p) > 0]
    pairs = [np.multiply(u, v) for i, u in enumerate(units) for j, v in enumerate(units) if i != j]
    expected = np.mean(pairs, axis=0)
    contributions = cosine_contributions(points)
    np.testing.assert_allclose(contributions.numpy(), expected, rtol=1e-10, atol=1e-14)
    assert contributions.sum().item() == pytest.approx(average_cosine(points), rel=1e-10)


def test_rogue_dimensions_are_the_largest_contributions():
    points, _ = cloud_with_outliers()
    points[:, 30] += 8.0  # a large common offset: dimension 30 dominates every cosine
    rogue = rogue_dimensions(points, k=3)
    contributions = cosine_contributions(points).numpy()
    top = np.argsort(-np.abs(contributions))[:3]
    assert rogue.top[0] == 30 and list(rogue.top) == top.tolist()
    assert rogue.cosine == pytest.approx(contributions[top].sum())
    # Every contribution is positive here, so the share is the paper's: of the average cosine.
    assert (contributions > 0).all()
    assert rogue.share == pytest.approx(contributions[top].sum() / contributions.sum())
    assert contributions[30] / contributions.sum() > 0.8  # one offset makes most of the cosine


def test_rogue_share_is_of_the_contributions_sizes_so_a_centred_space_has_one():
    # Centred: the average cosine is about 0, and a share of it would explode; of sum |CC_i|
    # the share stays in [k/d, 1].
    points, _ = cloud_with_outliers()
    centred = points - points.mean(dim=0)
    rogue = rogue_dimensions(centred, k=3)
    sizes = np.abs(cosine_contributions(centred).numpy())
    assert abs(rogue.average_cosine) < 0.01
    assert rogue.share == pytest.approx(np.sort(sizes)[::-1][:3].sum() / sizes.sum())
    assert 3 / 40 <= rogue.share <= 1
    assert math.isnan(rogue_dimensions(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), k=1).share)
    with pytest.raises(ValueError, match=r"k must lie in \[1, 2\]"):
        rogue_dimensions(torch.randn(5, 2), k=3)


def test_overlap_counts_what_survives():
    found = overlap([7, 21, 3], [3, 7, 9, 11])
    assert found.kept == (7, 3)
    assert found.jaccard == pytest.approx(2 / 5)
    assert found.survival == pytest.approx(2 / 3)
    assert overlap([1, 2], [1, 2]).jaccard == 1.0
    assert overlap([1], []).survival == 0.0
    assert math.isnan(overlap([], [4]).survival)
    assert math.isnan(overlap([], []).jaccard)


def test_measure_outliers_scalars():
    points, _ = cloud_with_outliers()
    measured = measure_outliers(points, factor=5.0, k=2)
    assert measured.scalars == {
        "n_outliers": 3.0,
        "outlier_var_share": measured.outliers.variance_share,
        "max_var_ratio": measured.outliers.max_ratio,
        "rogue_cosine": measured.rogue.cosine,
        "rogue_share": measured.rogue.share,
    }
    assert len(measured.rogue.top) == 2


def test_bad_input_is_refused_as_by_the_isotropy_measures():
    with pytest.raises(ValueError, match="NaN or inf"):
        outlier_dimensions(torch.tensor([[1.0, math.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        cosine_contributions(torch.randn(5))
