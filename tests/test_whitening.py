"""IterNorm group whitening against a float64 NumPy restatement, the ZCA it converges to, and its
running statistics, gradients, checkpoints and dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from isotune.norms.whitening import IterNormWhitening


def correlated_batch(n: int, d: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    mixing = torch.randn(d, d, generator=generator, dtype=torch.float64)
    scales = torch.linspace(0.3, 3.0, d, dtype=torch.float64)
    points = torch.randn(n, d, generator=generator, dtype=torch.float64) @ (mixing * scales) + 1.5
    return points.to(dtype)


def numpy_iternorm(x: np.ndarray, group_size: int, iterations: int, eps: float = 1e-5):
    """IterNorm's training-mode forward, group by group, as in the paper's Algorithm 1.
    Returns the output, the group means and the whitening matrices."""
    n, d = x.shape
    out = np.empty_like(x)
    means, whitenings = [], []
    for start in range(0, d, group_size):
        group = x[:, start : start + group_size]
        mean = group.mean(axis=0)
        centred = group - mean
        sigma = centred.T @ centred / n + eps * np.eye(group_size)
        trace = np.trace(sigma)
        sigma_n = sigma / trace
        p = np.eye(group_size)
        for _ in range(iterations):
            p = 1.5 * p - 0.5 * np.linalg.matrix_power(p, 3) @ sigma_n
        whitening = p / np.sqrt(trace)
        out[:, start : start + group_size] = centred @ whitening.T
        means.append(mean)
        whitenings.append(whitening)
    return out, np.stack(means), np.stack(whitenings)


def test_training_forward_and_running_statistics_match_numpy_at_five_iterations():
    x = correlated_batch(32, 12)
    layer = IterNormWhitening(12, group_size=4)
    out = layer(x)
    expected, means, whitenings = numpy_iternorm(x.numpy(), group_size=4, iterations=5)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-10, atol=1e-10)
    # One update from zero mean and identity with momentum 0.1 (float32 buffers).
    np.testing.assert_allclose(layer.running_mean.numpy(), 0.1 * means, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        layer.running_whitening.numpy(), 0.9 * np.eye(4) + 0.1 * whitenings, rtol=1e-5, atol=1e-6
    )
    out32 = IterNormWhitening(12, group_size=4)(x.float())
    assert out32.dtype == torch.float32
    np.testing.assert_allclose(out32.detach().numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-9), (torch.float32, 1e-4)])
def test_many_iterations_on_many_points_give_zca_with_identity_covariance(dtype, tolerance):
    x = correlated_batch(4000, 16)
    out = IterNormWhitening(16, group_size=8, iterations=50)(x.to(dtype)).double()
    with np.errstate(all="ignore"):  # the released form's rounding errors grow to NaN by T=50
        assert not np.isfinite(numpy_iternorm(x.numpy(), group_size=8, iterations=50)[0]).all()
    for start in (0, 8):
        group = x[:, start : start + 8].numpy()
        centred = group - group.mean(axis=0)
        values, vectors = np.linalg.eigh(centred.T @ centred / len(group) + 1e-5 * np.eye(8))
        assert values[-1] / values[0] > 10
        zca = centred @ (vectors / np.sqrt(values)) @ vectors.T
        whitened = out[:, start : start + 8].numpy()
        np.testing.assert_allclose(whitened, zca, atol=tolerance)
        covariance = whitened.T @ whitened / len(whitened)
        np.testing.assert_allclose(covariance, np.eye(8), atol=1e-4)  # eps / variance off 1
    assert abs(out[:, 0] @ out[:, 8] / 4000) > 0.05  # groups are whitened, not the whole vector


def test_five_iterations_whiten_the_dominant_directions_only():
    x = correlated_batch(4000, 8)
    out = IterNormWhitening(8, group_size=8)(x).detach().numpy()
    variances = np.linalg.eigvalsh(np.cov(x.numpy().T))
    whitened = np.linalg.eigvalsh(np.cov(out.T))
    assert variances[-1] / variances[0] > 100  # a spread of over 100 ...
    assert whitened[-1] / whitened[0] < variances[-1] / variances[0] / 10  # ... shrinks tenfold
    assert whitened[-1] == pytest.approx(1.0, abs=0.01)


def test_eval_mode_uses_the_running_statistics_and_leaves_them_unchanged():
    first, second = correlated_batch(32, 12, seed=1), correlated_batch(32, 12, seed=2)
    layer = IterNormWhitening(12, group_size=4, momentum=1.0)
    layer(first)
    _, means, whitenings = numpy_iternorm(first.numpy(), group_size=4, iterations=5)
    layer.eval()
    state = {name: buffer.clone() for name, buffer in layer.named_buffers()}
    out = layer(second).numpy()
    for group in range(3):
        start = 4 * group
        block = second[:, start : start + 4].numpy()
        expected = (block - means[group]) @ whitenings[group].T
        np.testing.assert_allclose(out[:, start : start + 4], expected, rtol=1e-5, atol=1e-5)
    for name, buffer in layer.named_buffers():
        assert torch.equal(buffer, state[name])


def test_before_training_eval_mode_is_the_identity():
    layer = IterNormWhitening(12, group_size=4).eval()
    x = correlated_batch(5, 12, dtype=torch.float32)
    assert torch.equal(layer(x), x)


@pytest.mark.parametrize("group_size", [8, 384])  # full rank groups; one rank-deficient group
def test_gradients_are_finite_for_a_batch_of_16_in_384_dimensions(group_size):
    x = correlated_batch(16, 384, dtype=torch.float32).requires_grad_(True)
    out = IterNormWhitening(384, group_size=group_size)(x)
    weights = torch.randn(16, 384, generator=torch.Generator().manual_seed(0))
    (out * weights).sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert x.grad.abs().sum() > 0


def test_gradient_through_the_batch_statistics_passes_gradcheck():
    layer = IterNormWhitening(4, group_size=2, iterations=3, affine=True)
    x = correlated_batch(6, 4).requires_grad_(True)
    assert torch.autograd.gradcheck(layer, (x,))


def test_affine_scales_and_shifts_the_whitened_output():
    x = correlated_batch(32, 12)
    layer = IterNormWhitening(12, group_size=4, affine=True)
    with torch.no_grad():
        layer.weight.fill_(2.0)
        layer.bias.fill_(-1.0)
    expected, _, _ = numpy_iternorm(x.numpy(), group_size=4, iterations=5)
    np.testing.assert_allclose(layer(x).detach().numpy(), 2 * expected - 1, atol=1e-10)


def test_state_dict_round_trip_restores_every_buffer_and_parameter():
    layer = IterNormWhitening(12, group_size=4, affine=True)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
    for seed in range(3):
        layer(correlated_batch(32, 12, seed=seed, dtype=torch.float32))
    state = layer.state_dict()
    assert set(state) == {
        "running_mean",
        "running_whitening",
        "num_batches_tracked",
        "weight",
        "bias",
    }
    assert state["num_batches_tracked"].item() == 3
    restored = IterNormWhitening(12, group_size=4, affine=True)
    restored.load_state_dict(state)
    for name, value in restored.state_dict().items():
        assert torch.equal(value, state[name]), name
    probe = correlated_batch(8, 12, seed=9, dtype=torch.float32)
    assert torch.equal(restored.eval()(probe), layer.eval()(probe))


@pytest.mark.parametrize(("batches", "tracked"), [(0, 0), (2, 1)])
def test_checkpoint_without_the_counter_loads_with_whether_it_learned(batches, tracked):
    layer = IterNormWhitening(12, group_size=4)
    for seed in range(batches):
        layer(correlated_batch(32, 12, seed=seed, dtype=torch.float32))
    state = layer.state_dict()
    del state["num_batches_tracked"]  # as written before the counter existed
    restored = IterNormWhitening(12, group_size=4)
    restored.load_state_dict(state)
    assert restored.num_batches_tracked.item() == tracked  # the count is lost, not whether any
    assert torch.equal(restored.running_whitening, layer.running_whitening)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_statistics_stay_float32_under_half_casts_and_the_output_keeps_the_input_dtype(dtype):
    layer = IterNormWhitening(12, group_size=4, affine=True).to(dtype)
    assert layer.running_mean.dtype == torch.float32
    assert layer.running_whitening.dtype == torch.float32
    assert layer.weight.dtype == dtype
    x = correlated_batch(32, 12)
    out = layer(x.to(dtype))
    assert out.dtype == dtype
    expected, _, _ = numpy_iternorm(x.to(dtype).double().numpy(), group_size=4, iterations=5)
    np.testing.assert_allclose(out.float().detach().numpy(), expected, atol=0.02)


def test_under_bf16_autocast_the_statistics_are_float32():
    x = correlated_batch(32, 12, dtype=torch.float32)
    reference = IterNormWhitening(12, group_size=4)(x)
    layer = IterNormWhitening(12, group_size=4)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = layer(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, reference)


def test_a_batch_of_one_uses_the_running_statistics_and_leaves_them_unchanged():
    layer = IterNormWhitening(12, group_size=4, momentum=1.0)
    layer(correlated_batch(32, 12, dtype=torch.float32))
    state = {name: buffer.clone() for name, buffer in layer.named_buffers()}
    single = correlated_batch(1, 12, seed=3, dtype=torch.float32)
    out = layer(single)
    for name, buffer in layer.named_buffers():
        assert torch.equal(buffer, state[name])
    assert torch.equal(out, layer.eval()(single))


def test_a_non_finite_batch_leaves_the_running_statistics_unchanged():
    layer = IterNormWhitening(12, group_size=4)
    layer(correlated_batch(32, 12, dtype=torch.float32))
    state = {name: buffer.clone() for name, buffer in layer.named_buffers()}
    bad = correlated_batch(32, 12, seed=4, dtype=torch.float32)
    bad[5, 7] = float("nan")
    layer(bad)
    for name, buffer in layer.named_buffers():
        assert torch.equal(buffer, state[name])


def test_bad_configuration_and_input_are_rejected():
    with pytest.raises(ValueError, match=r"group_size=5 does not divide num_features=384"):
        IterNormWhitening(384, group_size=5)
    with pytest.raises(ValueError, match="iterations must be an integer >= 1"):
        IterNormWhitening(12, group_size=4, iterations=0)
    with pytest.raises(ValueError, match="eps"):
        IterNormWhitening(12, group_size=4, eps=0.0)
    with pytest.raises(ValueError, match="momentum"):
        IterNormWhitening(12, group_size=4, momentum=0.0)
    layer = IterNormWhitening(12, group_size=4)
    with pytest.raises(ValueError, match=r"shape \(n, 12\), got \(4, 8\)"):
        layer(torch.randn(4, 8))
    with pytest.raises(TypeError, match="floating-point"):
        layer(torch.ones(4, 12, dtype=torch.long))
