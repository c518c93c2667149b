"""Isotropy penalties against the published IsoScore package, brute force and NumPy restatements,
and their effect when minimised on a small fixed model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from isotune.isotropy import average_cosine, isoscore_star
from isotune.isotropy.penalties import (
    REGULARIZERS,
    ShrinkageCovariance,
    correg_penalty,
    cosreg_penalty,
    istar_penalty,
)
from isotune.model.regularization import VIEWS
from tests.conftest import CONF_DIR

# Every penalty of the registry: a new regularizer joins these tests by joining REGULARIZERS.
PENALTIES = [reg.penalty for reg in REGULARIZERS.values() if reg.penalty is not None]


def cloud(n: int, d: int, seed: int = 0) -> torch.Tensor:
    """Correlated, unequally scaled float64 points with an offset."""
    generator = torch.Generator().manual_seed(seed)
    mixing = torch.randn(d, d, generator=generator, dtype=torch.float64)
    scales = torch.linspace(0.1, 3.0, d, dtype=torch.float64)
    return torch.randn(n, d, generator=generator, dtype=torch.float64) @ (mixing * scales) + 2.0


# I-STAR against the published package (IsoScore 2.0.1)

# (points, dims, zeta, shrinkage target): fewer points than dims, with and without shrinkage; a
# rank-deficient target; the batch covariance alone.
ISTAR_CASES = [
    (50, 8, 0.0, "none"),
    (20, 32, 0.2, "large sample"),
    (10, 32, 0.0, "none"),
    (10, 32, 0.7, "small sample"),
]


def shrinkage_target(kind: str, d: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    return torch.cov(cloud(500 if kind == "large sample" else 12, d, seed=7).T)


def package_istar_and_gradient(X: torch.Tensor, C0: torch.Tensor, zeta: float):
    """The package's differentiable IsoScore* and its gradient. Only the method with
    is_eval=False keeps the graph; gpu_id='cpu' keeps it off cuda:0 where CUDA is visible."""
    istar = pytest.importorskip("IsoScore.IsoScore").istar
    points = X.clone()
    score = istar().IsoScore_star(points, C0, zeta, is_eval=False, gpu_id="cpu")
    score.backward()
    return score.item(), points.grad


@pytest.mark.parametrize(("n", "d", "zeta", "target"), ISTAR_CASES)
def test_istar_penalty_value_and_gradient_match_the_published_package(n, d, zeta, target):
    X = cloud(n, d, seed=n + d)
    C0 = shrinkage_target(target, d)
    # The package has no default target; zeta=0 ignores it, so any (d, d) matrix will do.
    expected, expected_grad = package_istar_and_gradient(
        X, torch.eye(d, dtype=X.dtype) if C0 is None else C0, zeta
    )
    points = X.clone().requires_grad_(True)
    penalty = istar_penalty(points, C0, zeta)
    penalty.backward()
    assert 1 - penalty.item() == pytest.approx(expected, abs=1e-5)
    # The penalty is 1 - IsoScore*, so its gradient is the package's with the sign flipped.
    scale = expected_grad.abs().max().item()
    torch.testing.assert_close(points.grad, -expected_grad, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("penalty", PENALTIES, ids=lambda penalty: penalty.__name__)
def test_penalties_compute_in_float32_under_bf16_autocast_and_keep_gradients(penalty):
    X = cloud(64, 16).float().requires_grad_(True)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        points = X @ torch.eye(16)  # a bf16 activation, as the encoder's under autocast
        assert points.dtype == torch.bfloat16
        value = penalty(points)
    assert value.dtype == torch.float32
    value.backward()
    assert torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0
    assert value.item() == pytest.approx(penalty(points.detach().float()).item(), abs=1e-6)


def test_istar_penalty_with_zeta_one_is_the_target_alone():
    X = cloud(30, 6)
    assert istar_penalty(X, torch.eye(6, dtype=X.dtype), zeta=1.0).item() == pytest.approx(0.0)
    anisotropic = torch.diag(torch.tensor([9.0, 1, 1, 1, 1, 1], dtype=X.dtype))
    assert istar_penalty(X, anisotropic, zeta=1.0).item() == pytest.approx(
        1 - isoscore_star(cloud(2, 6), anisotropic, zeta=1.0).item()
    )


# CosReg and Cor-Reg against direct restatements


def brute_force_cosreg(X: np.ndarray) -> float:
    """The released formula over every ordered pair of distinct non-zero points, one at a time."""
    points = [x for x in X if np.linalg.norm(x) > 0]
    total = 0.0
    for a, b in itertools.permutations(points, 2):
        total += a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    return total / len(points) ** 2


def numpy_correg(X: np.ndarray) -> float:
    """isoIntentBERT's loss_covariance: Frobenius norm of the correlation matrix minus I."""
    return float(np.linalg.norm(np.corrcoef(X.T) - np.eye(X.shape[1])))


def test_cosreg_penalty_matches_all_pairs():
    X = cloud(40, 12).numpy()
    assert cosreg_penalty(torch.from_numpy(X)).item() == pytest.approx(
        brute_force_cosreg(X), rel=1e-10
    )
    # The released N^2 denominator: the all-pairs mean cosine times (N - 1) / N.
    assert cosreg_penalty(torch.from_numpy(X)).item() == pytest.approx(
        average_cosine(torch.from_numpy(X)) * 39 / 40, rel=1e-10
    )


def test_cosreg_penalty_leaves_out_zero_vectors_with_finite_gradients():
    X = cloud(10, 5)
    X[3] = 0.0
    points = X.clone().requires_grad_(True)
    penalty = cosreg_penalty(points)
    assert penalty.item() == pytest.approx(brute_force_cosreg(X.numpy()), rel=1e-10)
    penalty.backward()
    assert torch.isfinite(points.grad).all() and points.grad[3].abs().sum() == 0


def test_correg_penalty_matches_numpy_corrcoef():
    for X in (cloud(40, 12), cloud(8, 20, seed=3)):
        assert correg_penalty(X).item() == pytest.approx(numpy_correg(X.numpy()), rel=1e-9)
    independent = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    assert correg_penalty(independent).item() == pytest.approx(0.0, abs=1e-7)
    collinear = torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    assert correg_penalty(collinear).item() == pytest.approx(2**0.5, rel=1e-6)


def test_correg_penalty_treats_a_constant_dimension_as_uncorrelated():
    X = cloud(20, 6)
    with_constant = torch.cat([X, torch.full((20, 1), 3.0, dtype=X.dtype)], dim=1)
    points = with_constant.clone().requires_grad_(True)
    penalty = correg_penalty(points)
    assert penalty.item() == pytest.approx(numpy_correg(X.numpy()), rel=1e-9)
    penalty.backward()
    assert torch.isfinite(points.grad).all() and points.grad[:, 6].abs().sum() == 0


# Bad input and the registry


@pytest.mark.parametrize("penalty", PENALTIES, ids=lambda penalty: penalty.__name__)
def test_penalties_reject_fewer_than_two_points_and_wrong_dims(penalty):
    with pytest.raises(ValueError, match=rf"{penalty.__name__} needs .* got shape \(1, 4\)"):
        penalty(torch.randn(1, 4))
    with pytest.raises(ValueError, match=r"got shape \(2, 3, 4\)"):
        penalty(torch.randn(2, 3, 4))


def test_istar_penalty_rejects_zeta_outside_the_unit_interval_and_a_mismatched_target():
    with pytest.raises(ValueError, match="zeta must lie in"):
        istar_penalty(torch.randn(8, 4), torch.eye(4), zeta=1.5)
    with pytest.raises(ValueError, match="zeta must lie in"):
        istar_penalty(torch.randn(8, 4), torch.eye(4), zeta=-0.1)
    with pytest.raises(ValueError, match=r"C0 must have shape \(4, 4\)"):
        istar_penalty(torch.randn(8, 4), torch.eye(3), zeta=0.2)


def test_registry_names_each_option_with_its_penalty_and_default_view():
    """The released options keep their penalty and view; any option added has both, and a
    conf/reg file of its name."""
    released = {
        "none": (None, None),
        "istar": (istar_penalty, "tokens"),
        "correg": (correg_penalty, "sentence"),
        "cosreg": (cosreg_penalty, "tokens"),
    }
    options = {name: (reg.penalty, reg.view) for name, reg in REGULARIZERS.items()}
    assert {name: options.get(name) for name in released} == released
    for name, (penalty, view) in options.items():
        assert name == "none" or (callable(penalty) and view in VIEWS), name
    assert sorted(options) == sorted(path.stem for path in (CONF_DIR / "reg").glob("*.yaml"))


# The shrinkage covariance


def test_shrinkage_covariance_of_streamed_chunks_equals_numpy_cov():
    X = cloud(250, 7) + 100.0  # a large mean: the pairwise update must not lose precision to it
    accumulator = ShrinkageCovariance(7, max_points=1000)
    for chunk in torch.split(X, [1, 90, 60, 99]):
        accumulator.update(chunk)
    assert accumulator.num_points == 250 and not accumulator.full
    covariance = accumulator.covariance()
    assert covariance.dtype == torch.float32
    np.testing.assert_allclose(covariance.numpy(), np.cov(X.numpy().T), rtol=1e-5, atol=1e-6)


def kept_rows_of_second_chunk(seed: int) -> tuple[list[int], ShrinkageCovariance]:
    """Feed 60 zero rows, then the 60 unit vectors, with room for 100: the covariance's diagonal
    is non-zero exactly on the unit vectors kept."""
    accumulator = ShrinkageCovariance(60, max_points=100, seed=seed)
    accumulator.update(torch.zeros(60, 60))
    accumulator.update(torch.eye(60))
    accumulator.update(torch.ones(5, 60))  # after the budget: ignored
    kept = accumulator.covariance().diagonal().nonzero().flatten().tolist()
    return kept, accumulator


def test_shrinkage_covariance_keeps_a_seeded_subset_of_the_chunk_that_crosses_the_budget():
    kept, accumulator = kept_rows_of_second_chunk(seed=0)
    assert accumulator.num_points == 100 and accumulator.full and len(kept) == 40
    rows = np.vstack([np.zeros((60, 60)), np.eye(60)[kept]])
    np.testing.assert_allclose(accumulator.covariance().numpy(), np.cov(rows.T), atol=1e-7)
    assert kept_rows_of_second_chunk(seed=0)[0] == kept
    assert kept_rows_of_second_chunk(seed=1)[0] != kept
    assert kept != list(range(40))  # not the first rows: a chunk is not cut by position


def test_shrinkage_covariance_rejects_bad_input():
    with pytest.raises(ValueError, match="max_points=1"):
        ShrinkageCovariance(4, max_points=1)
    accumulator = ShrinkageCovariance(4, max_points=10)
    with pytest.raises(ValueError, match=r"shape \(n, 4\), got \(3, 5\)"):
        accumulator.update(torch.randn(3, 5))
    with pytest.raises(ValueError, match="NaN or inf"):
        accumulator.update(torch.tensor([[0.0, 1.0, float("nan"), 2.0]]))
    accumulator.update(torch.randn(1, 4))
    with pytest.raises(ValueError, match="has 1 row"):
        accumulator.covariance()


# Behaviour: minimising each penalty moves the geometry the way it claims


def trained_points(penalty, weight: float, steps: int = 50) -> torch.Tensor:
    """Fit a linear map of fixed inputs to minimise ``weight * penalty`` alone; its output."""
    torch.manual_seed(0)
    inputs = torch.randn(64, 16)
    layer = nn.Linear(16, 8)
    with torch.no_grad():  # start anisotropic and off-centre, with room to move either way
        layer.weight.mul_(torch.linspace(0.3, 2.0, 8)[:, None])
        layer.bias.fill_(0.5)
    optimizer = torch.optim.Adam(layer.parameters(), lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        (weight * penalty(layer(inputs))).backward()
        optimizer.step()
    with torch.no_grad():
        return layer(inputs)


@pytest.mark.slow
def test_minimising_istar_raises_isoscore_star_and_its_negation_lowers_it():
    def score(points):
        return isoscore_star(points, zeta=0.2).item()

    start = score(trained_points(istar_penalty, 1.0, steps=0))
    more = score(trained_points(istar_penalty, 1.0))
    less = score(trained_points(istar_penalty, -1.0))
    assert 0.2 < start < 0.8
    assert more > start + 0.15 and less < start - 0.15


def test_minimising_cosreg_lowers_the_mean_cosine():
    start = average_cosine(trained_points(cosreg_penalty, 1.0, steps=0))
    assert start > 0.1
    # The lowest mean cosine of 64 points is -1/63: the trained points sit near it.
    assert abs(average_cosine(trained_points(cosreg_penalty, 1.0))) < 0.02


def test_minimising_correg_lowers_the_correlation_between_dimensions():
    def mean_abs_correlation(points):
        correlation = np.corrcoef(points.numpy().T)
        return np.abs(correlation[~np.eye(8, dtype=bool)]).mean()

    start = mean_abs_correlation(trained_points(correg_penalty, 1.0, steps=0))
    assert start > 0.1
    assert mean_abs_correlation(trained_points(correg_penalty, 1.0)) < start / 4
