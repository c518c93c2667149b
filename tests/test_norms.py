"""IsoBN against an independent float64 NumPy restatement of shared/docs/isobn.md."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from isotune.norms import IsoBN, build_norm

D = 6


def reference_ema(batches: list[np.ndarray], m: float) -> tuple[np.ndarray, np.ndarray]:
    """Closed form of the moving averages after t updates from zero: sum_k m (1-m)^(t-k) b_k."""
    t = len(batches)
    cov = np.zeros((D, D))
    std = np.zeros(D)
    for k, batch in enumerate(batches, start=1):
        centred = batch - batch.mean(axis=0)
        weight = m * (1 - m) ** (t - k)
        cov += weight * centred.T @ centred / len(batch)
        std += weight * np.sqrt((centred**2).mean(axis=0))
    return cov, std


def reference_scale(cov: np.ndarray, std: np.ndarray, eps=1e-3, beta=0.5) -> np.ndarray:
    """Per-dimension factor c * a, written out with explicit loops."""
    a = np.empty(D)
    for i in range(D):
        g = 0.0
        for j in range(D):
            rho = np.clip(cov[i, j] / (std[i] * std[j]), -1, 1)
            g += rho**2
        a[i] = (g / D * std[i] + eps) ** (-beta)
    c = np.sqrt(np.trace(cov) / (sum(cov[i, i] * a[i] ** 2 for i in range(D)) + eps))
    return c * a


def random_batches(count: int, n: int = 16, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(D, D)) * np.linspace(0.2, 3.0, D)  # correlated, unequal scales
    return [rng.normal(size=(n, D)) @ mixing + 1.5 for _ in range(count)]


def run_training(layer: IsoBN, batches: list[np.ndarray]) -> torch.Tensor:
    layer.train()
    out = None
    for batch in batches:
        out = layer(torch.tensor(batch, dtype=torch.float32))
    return out


def test_statistics_equal_closed_form_moving_average():
    batches = random_batches(7)
    layer = IsoBN(D, momentum=0.05)
    run_training(layer, batches)
    cov, std = reference_ema(batches, 0.05)
    np.testing.assert_allclose(layer.run_cov.numpy(), cov, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(layer.run_std.numpy(), std, rtol=1e-4, atol=1e-6)
    assert layer.num_batches_tracked.item() == 7


def test_output_matches_reference_scale_in_training_and_eval():
    batches = random_batches(5)
    layer = IsoBN(D, momentum=0.1, eps=1e-3, beta=0.5)
    out = run_training(layer, batches)
    cov, std = reference_ema(batches, 0.1)
    scale = reference_scale(cov, std)
    np.testing.assert_allclose(out.numpy(), batches[-1] * scale, rtol=1e-4)
    layer.eval()
    probe = random_batches(1, seed=9)[0]
    np.testing.assert_allclose(
        layer(torch.tensor(probe, dtype=torch.float32)).numpy(), probe * scale, rtol=1e-4
    )


@pytest.mark.parametrize("beta", [0.0, 0.25, 1.0])
def test_beta_and_eps_are_exposed(beta):
    batches = random_batches(3)
    layer = IsoBN(D, momentum=0.3, eps=1e-2, beta=beta)
    run_training(layer, batches)
    cov, std = reference_ema(batches, 0.3)
    np.testing.assert_allclose(
        layer.scale().numpy(), reference_scale(cov, std, 1e-2, beta), rtol=1e-4
    )


def test_total_variance_of_running_covariance_is_preserved():
    layer = IsoBN(D, eps=1e-3)
    run_training(layer, random_batches(20))
    scale = layer.scale().double()
    variances = layer.run_cov.double().diagonal()
    scaled_total = (scale**2 * variances).sum()
    # Exact up to eps: c^2 = trace / (sum a^2 var + eps).
    assert scaled_total == pytest.approx(variances.sum().item(), rel=1e-3)


def test_eval_mode_uses_frozen_statistics():
    layer = IsoBN(D)
    run_training(layer, random_batches(4))
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    layer.eval()
    for batch in random_batches(3, seed=5):
        layer(torch.tensor(batch, dtype=torch.float32))
    for key, value in layer.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_scale_carries_no_gradient_fixed_diagonal_map():
    layer = IsoBN(D)
    run_training(layer, random_batches(3))
    h = torch.tensor(random_batches(1, seed=3)[0], dtype=torch.float32, requires_grad=True)
    weights = torch.randn(16, D)
    (layer(h) * weights).sum().backward()
    # d out / d h is diag(scale) with the scale computed after this step's update.
    expected = weights * layer.scale()
    torch.testing.assert_close(h.grad, expected)


def test_state_dict_round_trip_restores_identical_outputs():
    layer = IsoBN(D, bias_correction=True)
    run_training(layer, random_batches(6))
    assert set(layer.state_dict()) == {"run_cov", "run_std", "num_batches_tracked"}
    restored = IsoBN(D, bias_correction=True)
    restored.load_state_dict(layer.state_dict())
    layer.eval()
    restored.eval()
    probe = torch.randn(10, D)
    torch.testing.assert_close(restored(probe), layer(probe), rtol=0, atol=0)


def test_bias_correction_divides_by_one_minus_decay_power():
    batches = random_batches(3)
    layer = IsoBN(D, momentum=0.05, bias_correction=True)
    run_training(layer, batches)
    cov, std = reference_ema(batches, 0.05)
    correction = 1 - 0.95**3
    np.testing.assert_allclose(
        layer.scale().numpy(), reference_scale(cov / correction, std / correction), rtol=1e-4
    )
    corrected_cov, corrected_std = layer.statistics()
    np.testing.assert_allclose(corrected_cov.numpy(), cov / correction, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(corrected_std.numpy(), std / correction, rtol=1e-4)


def test_batch_of_one_and_fresh_layer_give_no_nan():
    layer = IsoBN(D)
    single = torch.randn(1, D)
    layer.train()
    out = layer(single)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, single)  # no statistics yet: identity
    assert layer.num_batches_tracked.item() == 0
    layer.eval()
    torch.testing.assert_close(layer(single), single)
    run_training(layer, random_batches(2))
    layer.train()
    stats = layer.run_cov.clone()
    assert torch.isfinite(layer(single)).all()
    assert torch.equal(layer.run_cov, stats)


def test_constant_dimension_gives_no_nan():
    batch = torch.randn(16, D)
    batch[:, 2] = 3.0
    layer = IsoBN(D)
    layer.train()
    assert torch.isfinite(layer(batch)).all()


def test_statistics_stay_float32_under_autocast():
    layer = IsoBN(D)
    batches = random_batches(3)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        for batch in batches:
            out = layer(torch.tensor(batch, dtype=torch.bfloat16))
    assert layer.run_cov.dtype == torch.float32 and out.dtype == torch.bfloat16
    cov, _ = reference_ema([b.astype(np.float32) for b in batches], 0.05)
    # bf16 inputs carry ~3 significant digits; the statistics are computed in float32 from them.
    np.testing.assert_allclose(layer.run_cov.numpy(), cov, rtol=5e-2, atol=5e-2)


def test_rejects_wrong_shape_and_bad_arguments():
    with pytest.raises(ValueError, match=r"\(n, 6\)"):
        IsoBN(D)(torch.randn(4, 5))
    with pytest.raises(ValueError, match="momentum"):
        IsoBN(D, momentum=0.0)


def test_build_norm_variants():
    assert isinstance(build_norm("none", 8), nn.Identity)
    batchnorm = build_norm("batchnorm", 8, momentum=0.2, eps=1e-4)
    assert isinstance(batchnorm, nn.BatchNorm1d) and batchnorm.momentum == 0.2
    batch = torch.randn(32, 8) * 5 + 2
    out = batchnorm.train()(batch)
    torch.testing.assert_close(out.mean(0), torch.zeros(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.std(0, unbiased=False), torch.ones(8), atol=1e-3, rtol=0)
    isobn = build_norm("isobn", 8, beta=0.3)
    assert isinstance(isobn, IsoBN) and isobn.beta == 0.3
    with pytest.raises(ValueError, match="Unknown norm 'layernorm'"):
        build_norm("layernorm", 8)
