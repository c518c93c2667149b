"""IsoBN against an independent float64 NumPy restatement of the released code plus edge rules."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from isotune.norms.registry import NORMS, IsoBN, build_norm, statistics_never_updated
from isotune.norms.whitening import IterNormWhitening
from isotune.training.run import train
from tests.conftest import CONF_DIR

D = 6


def reference_ema(batches: list[np.ndarray], m: float) -> tuple[np.ndarray, np.ndarray]:
    """Closed form of the moving averages after t updates from zero: sum_k m (1-m)^(t-k) b_k."""
    t = len(batches)
    d = batches[0].shape[1]
    cov = np.zeros((d, d))
    std = np.zeros(d)
    for k, batch in enumerate(batches, start=1):
        centred = batch - batch.mean(axis=0)
        weight = m * (1 - m) ** (t - k)
        cov += weight * centred.T @ centred / len(batch)
        std += weight * np.sqrt((centred**2).mean(axis=0))
    return cov, std


def reference_scale(cov: np.ndarray, std: np.ndarray, eps=1e-3, beta=0.5) -> np.ndarray:
    """Per-dimension factor c * a, written out with explicit loops.

    Edge rule: dimensions without variance are left out of every sum and mean, and keep factor 1.
    """
    active = [i for i in range(len(std)) if std[i] > 0 and cov[i, i] > 0]
    a = np.ones(len(std))
    for i in active:
        g = 0.0
        for j in active:
            rho = np.clip(cov[i, j] / (std[i] * std[j]), -1, 1)
            g += rho**2
        a[i] = (g / len(active) * std[i] + eps) ** (-beta)
    trace = sum(cov[i, i] for i in active)
    c = np.sqrt(trace / (sum(cov[i, i] * a[i] ** 2 for i in active) + eps))
    return np.array([c * a[i] if i in active else 1.0 for i in range(len(std))])


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
    assert set(layer.state_dict()) == {
        "run_cov",
        "run_std",
        "num_batches_tracked",
        "num_batches_skipped",
    }
    restored = IsoBN(D, bias_correction=True)
    restored.load_state_dict(layer.state_dict())
    layer.eval()
    restored.eval()
    probe = torch.randn(10, D)
    torch.testing.assert_close(restored(probe), layer(probe), rtol=0, atol=0)


def test_checkpoint_without_skip_counter_still_loads():
    layer = IsoBN(D)
    run_training(layer, random_batches(3))
    state = layer.state_dict()
    del state["num_batches_skipped"]  # as written before the counter existed
    restored = IsoBN(D)
    restored.load_state_dict(state)
    assert restored.num_batches_skipped.item() == 0
    assert torch.equal(restored.run_cov, layer.run_cov)


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


def test_constant_batch_passes_through_unchanged():
    # Zero total variance: the released formula gives c = 0, an all-zero output.
    layer = IsoBN(D).train()
    batch = torch.full((8, D), 3.0)
    torch.testing.assert_close(layer(batch), batch, rtol=0, atol=0)
    assert layer.num_batches_tracked.item() == 1 and not layer.run_cov.any()
    torch.testing.assert_close(layer.scale(), torch.ones(D), rtol=0, atol=0)


def test_dimension_that_never_varied_is_neutral_and_left_out():
    batches = random_batches(5)
    for k, batch in enumerate(batches):
        batch[:, 2] = 3.0 + k  # constant within every batch, so its running std stays 0
    layer = IsoBN(D, momentum=0.1)
    run_training(layer, batches)
    cov, std = reference_ema(batches, 0.1)
    scale = layer.scale()
    assert std[2] == 0 and scale[2].item() == 1.0  # the released rule gave c * eps^-beta
    np.testing.assert_allclose(scale.numpy(), reference_scale(cov, std), rtol=1e-4)
    # The other dimensions are scaled exactly as IsoBN on them alone would scale them.
    others = [i for i in range(D) if i != 2]
    alone = IsoBN(D - 1, momentum=0.1)
    run_training(alone, [batch[:, others] for batch in batches])
    torch.testing.assert_close(scale[others], alone.scale())
    # In eval, variation the layer never saw is passed through, not amplified.
    layer.eval()
    probe = torch.randn(4, D)
    torch.testing.assert_close(layer(probe)[:, 2], probe[:, 2], rtol=0, atol=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_batch_leaves_statistics_unchanged_and_is_counted(bad):
    batches = random_batches(6)
    clean = batches[:3] + batches[4:]
    layer = IsoBN(D, momentum=0.1, bias_correction=True)
    run_training(layer, batches[:3])
    poisoned = torch.tensor(batches[3], dtype=torch.float32)
    poisoned[0, 0] = bad
    out = layer(poisoned)
    # The output is still computed (so the loss shows the problem), with the unchanged statistics.
    assert not torch.isfinite(out[0, 0])
    cov, std = reference_ema(batches[:3], 0.1)
    before = reference_scale(cov / (1 - 0.9**3), std / (1 - 0.9**3))
    np.testing.assert_allclose(out[1:].numpy(), batches[3][1:] * before, rtol=1e-4)
    run_training(layer, batches[4:])
    assert layer.num_batches_tracked.item() == 5 and layer.num_batches_skipped.item() == 1
    cov, std = reference_ema(clean, 0.1)
    np.testing.assert_allclose(layer.run_cov.numpy(), cov, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(layer.run_std.numpy(), std, rtol=1e-4, atol=1e-6)
    # Bias correction counts the 5 applied updates only.
    after = reference_scale(cov / (1 - 0.9**5), std / (1 - 0.9**5))
    layer.eval()
    probe = random_batches(1, seed=9)[0]
    np.testing.assert_allclose(
        layer(torch.tensor(probe, dtype=torch.float32)).numpy(), probe * after, rtol=1e-4
    )


def test_skipped_batches_are_reported_when_training_mode_ends(caplog):
    layer = IsoBN(D).train()
    poisoned = torch.randn(8, D)
    poisoned[3, 1] = float("nan")
    with caplog.at_level(logging.WARNING, logger="isotune.norms.registry"):
        layer(poisoned)
        assert not caplog.records  # no host-device sync in the training step
        layer.eval()
        assert [r.getMessage() for r in caplog.records] == [
            "IsoBN has skipped 1 training batch(es) with NaN or inf values so far; its running "
            "statistics ignore them."
        ]
        caplog.clear()
        layer.train()
        layer(torch.randn(8, D))
        layer.eval()
        assert not caplog.records  # nothing new to report
        layer.train()
        layer(poisoned)
        layer(poisoned)
        layer.eval()
        assert len(caplog.records) == 1 and "skipped 3 training batch(es)" in caplog.text
    restored = IsoBN(D)
    restored.load_state_dict(layer.state_dict())
    assert restored.num_batches_skipped.item() == 3


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


@pytest.mark.parametrize("cast", [nn.Module.half, lambda m: m.to(dtype=torch.bfloat16)])
def test_dtype_casts_keep_float32_statistics_with_identical_values(cast):
    layer = IsoBN(D)
    run_training(layer, random_batches(4))
    before = {name: value.clone() for name, value in layer.state_dict().items()}
    cast(layer)
    for name, value in layer.state_dict().items():
        assert value.dtype == before[name].dtype and torch.equal(value, before[name]), name


def test_device_moves_still_apply_to_the_statistics():
    layer = IsoBN(D).to(device="meta", dtype=torch.bfloat16)
    for name in ("run_cov", "run_std"):
        buffer = getattr(layer, name)
        assert (buffer.device.type, buffer.dtype) == ("meta", torch.float32), name


def test_bf16_module_trains_like_float32_on_the_same_batches():
    half, full = IsoBN(D).to(torch.bfloat16), IsoBN(D)
    for batch in random_batches(5):
        h = torch.tensor(batch, dtype=torch.bfloat16)
        out_half, out_full = half.train()(h), full.train()(h.float())
        assert out_half.dtype == torch.bfloat16
        torch.testing.assert_close(out_half, out_full.to(torch.bfloat16))
    for name in ("run_cov", "run_std"):
        assert getattr(half, name).dtype == torch.float32, name
        torch.testing.assert_close(getattr(half, name), getattr(full, name))
    restored = IsoBN(D).to(torch.bfloat16)
    restored.load_state_dict(half.state_dict())
    probe = torch.randn(10, D, dtype=torch.bfloat16)
    torch.testing.assert_close(restored.eval()(probe), half.eval()(probe), rtol=0, atol=0)


@pytest.mark.slow
def test_bf16_true_training_run_with_isobn_completes(train_config, tmp_path):
    results = train(
        train_config(
            "task=rte",
            "norm=isobn",
            "trainer.precision=bf16-true",
            "debug=limit",
            "trainer.max_epochs=1",
        )
    )
    assert results["status"] == "completed" and results["steps"] == 4
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert state["head.weight"].dtype == torch.bfloat16
    assert state["norm.run_cov"].dtype == torch.float32 and state["norm.run_cov"].any()
    assert state["norm.num_batches_tracked"].item() == 4


def test_rejects_wrong_shape_and_bad_arguments():
    with pytest.raises(ValueError, match=r"\(n, 6\)"):
        IsoBN(D)(torch.randn(4, 5))
    with pytest.raises(TypeError, match=r"floating-point input, got torch\.int64"):
        IsoBN(D)(torch.ones(4, D, dtype=torch.long))
    with pytest.raises(ValueError, match=r"IsoBN momentum must be a number in \(0, 1\], got 0\.0"):
        IsoBN(D, momentum=0.0)
    with pytest.raises(ValueError, match=r"IsoBN eps must be a finite number > 0, got -0\.001"):
        IsoBN(D, eps=-1e-3)
    with pytest.raises(ValueError, match=r"eps must be a finite number > 0, got 0\.0"):
        IsoBN(D, eps=0.0)
    with pytest.raises(ValueError, match=r"IsoBN beta must be a finite number >= 0, got -0\.5"):
        IsoBN(D, beta=-0.5)
    with pytest.raises(ValueError, match=r"IsoBN bias_correction must be true or false, got 1"):
        IsoBN(D, bias_correction=1)


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
    unknown = "no_such_norm"  # no registry name: any real norm (layernorm, ...) may join NORMS
    assert unknown not in NORMS
    with pytest.raises(ValueError, match=f"Unknown norm '{unknown}'"):
        build_norm(unknown, 8)


def configured_norm(name: str, num_features: int = 8) -> nn.Module:
    """The norm as ``norm=<name>`` builds it, with its config's options."""
    options = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "norm" / f"{name}.yaml"))
    return build_norm(options.pop("name"), num_features, **options)


@pytest.mark.parametrize("name", [name for name, norm in NORMS.items() if norm.min_batch_size > 1])
def test_each_norm_learns_from_the_smallest_batch_it_declares_and_not_below(name):
    norm, smallest = configured_norm(name).train(), NORMS[name].min_batch_size
    assert statistics_never_updated(norm)
    too_small = torch.randn(smallest - 1, 8)
    if NORMS[name].smaller_batch_raises:
        with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
            norm(too_small)
        norm = configured_norm(name).train()  # BatchNorm1d counted the batch before raising
    else:
        norm(too_small)
        assert statistics_never_updated(norm)
    norm(torch.randn(smallest, 8))
    assert not statistics_never_updated(norm)


WITH_STATISTICS = {
    "isobn": lambda: IsoBN(D),
    "batchnorm": lambda: nn.BatchNorm1d(D),
    "whitening": lambda: IterNormWhitening(D, group_size=3),
}


@pytest.mark.parametrize("make", WITH_STATISTICS.values(), ids=WITH_STATISTICS)
def test_statistics_never_updated_until_a_batch_is_folded_in(make):
    norm = make()
    assert statistics_never_updated(norm)
    norm.eval()(torch.randn(16, D))  # eval mode leaves the statistics as they are
    assert statistics_never_updated(norm)
    norm.train()(torch.randn(16, D))
    assert not statistics_never_updated(norm)
    restored = make()
    restored.load_state_dict(norm.state_dict())
    assert not statistics_never_updated(restored)  # the count is saved in checkpoints


@pytest.mark.parametrize("name", ["isobn", "whitening"])
def test_a_non_finite_batch_is_not_counted_as_folded_in(name):
    poisoned = torch.randn(16, D)
    poisoned[2, 3] = float("nan")
    norm = WITH_STATISTICS[name]().train()
    norm(poisoned)
    assert statistics_never_updated(norm)


def test_norms_without_running_statistics_are_never_reported():
    assert not statistics_never_updated(configured_norm("none"))
    assert not statistics_never_updated(nn.BatchNorm1d(D, track_running_stats=False))
