"""The reg and intervention axes end to end: every option composes and trains (bf16 autocast
included), I-STAR moves IsoScore* the way its weight says, Sigma_S is the covariance of the seeded
training subset and resumes exactly, bad input gets one message, presets and tables key on them."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import torch
from hydra.errors import MissingConfigException
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import OmegaConf

from isotune.errors import IsotuneError
from isotune.isotropy.penalties import REGULARIZERS
from isotune.model.classifier import SCHEDULES
from isotune.model.regularization import MEASURES, Regularization
from isotune.sweeps import aggregate
from isotune.sweeps.runs import basic_sweep_jobs
from isotune.training.config_checks import check_train_config
from isotune.training.fit import model_and_data
from isotune.training.run import train
from tests.conftest import compose_train_config
from tests.helpers.config_checks import problems
from tests.helpers.fake_runs import completed, write_run
from tests.helpers.presets import options, preset
from tests.helpers.resume import kill_and_resume, load


def plain(node) -> dict:
    return OmegaConf.to_container(node, resolve=True)


def metrics_rows(folder) -> list[dict]:
    with open(folder / "csv" / "metrics.csv") as file:
        return list(csv.DictReader(file))


# reg option: (weight, view, hidden-state indices of the tiny 2-layer model's X)
REGS = {
    "none": (0.0, None, ()),
    "istar": (-1.0, "tokens", (1, 2)),  # every layer but the embeddings, as released
    "correg": (0.04, "sentence", ()),
    "cosreg": (1.0, "tokens", (2,)),  # the last layer, as released
}


def test_every_reg_option_is_described():
    assert sorted(REGS) == options("reg"), "describe the new conf/reg option in REGS above"


@pytest.mark.parametrize("name", options("intervention"))
def test_every_intervention_composes_to_the_preset_its_files_state(name, tmp_path):
    cfg = compose_train_config([f"intervention={name}"], tmp_path)
    check_train_config(cfg)
    assert (cfg.norm.name, cfg.reg.name, cfg.reg.weight) == preset(name)


@pytest.mark.parametrize(
    ("typed", "reg", "weight"),
    [
        (["intervention=istar_less"], "istar", -0.1),  # the preset's own weight
        (["intervention=istar_less", "reg=cosreg"], "cosreg", 1.0),  # CosReg's, not I-STAR's -0.1
        (["intervention=correg", "reg=istar"], "istar", -1.0),  # I-STAR's, not Cor-Reg's 0.04
        (["intervention=istar_more", "reg=correg"], "correg", 0.04),
        (["intervention=istar_less", "reg=none"], "none", 0.0),  # the baseline: no weight
        (["intervention=istar_less", "reg.weight=0.5"], "istar", 0.5),  # typed: it wins
        (["intervention=istar_less", "reg=cosreg", "reg.weight=0.3"], "cosreg", 0.3),
        (["reg=istar", "intervention=istar_more"], "istar", 0.1),  # the order typed is no matter
    ],
)
def test_a_reg_chosen_beside_a_preset_brings_its_own_weight(typed, reg, weight, tmp_path):
    cfg = compose_train_config(typed, tmp_path)
    check_train_config(cfg)
    assert (cfg.reg.name, cfg.reg.weight) == (reg, weight)


def test_a_weight_for_reg_none_is_refused_naming_the_penalties():
    (line,) = problems("reg=none", "reg.weight=0.5")
    penalties = ", ".join(f"reg={name}" for name in REGULARIZERS if name != "none")
    assert line.strip() == (
        f"reg.weight=0.5: reg=none has no penalty to weigh; choose one ({penalties}) or leave "
        "reg.weight out"
    )
    assert "reg=istar, reg=correg, reg=cosreg" in penalties  # the released ones, and any new
    (line,) = problems("intervention=istar_less", "reg=none", "reg.weight=-0.1")
    assert line.strip().startswith("reg.weight=-0.1: reg=none has no penalty to weigh")


@pytest.mark.parametrize("name", options("reg"))
def test_every_reg_option_composes_and_builds_its_view(name, tmp_path):
    cfg = compose_train_config([f"reg={name}"], tmp_path)
    check_train_config(cfg)
    weight, view, layers = REGS[name]
    assert (cfg.reg.name, cfg.reg.weight) == (name, weight)
    regularization = Regularization((32, 32, 32), **plain(cfg.reg))
    assert (regularization.view, regularization.layers) == (view, layers)
    assert regularization.active == (name != "none")
    assert regularization.needs_hidden_states == (view == "tokens")  # else not asked of the encoder
    assert (regularization.shrinkage is not None) == (name == "istar")


@pytest.mark.slow
@pytest.mark.parametrize("name", options("intervention"))
def test_every_intervention_trains_under_bf16_autocast_and_logs_its_terms(
    name, train_config, tmp_path
):
    norm, reg, weight = preset(name)
    cfg = train_config(
        f"intervention={name}",
        "debug=limit",
        "trainer.max_epochs=1",
        "trainer.precision=bf16-mixed",
    )
    assert (cfg.norm.name, cfg.reg.name, cfg.reg.weight) == (norm, reg, weight)
    results = train(cfg)
    assert results["status"] == "completed" and results["steps"] == 4
    assert (results["norm"], results["reg"], results["reg_weight"]) == (norm, reg, weight)
    assert 0 <= results["isotropy"]["final"]["iso/post_norm/isoscore_star"] <= 1
    steps = [row for row in metrics_rows(tmp_path) if row["train/loss_step"]]
    assert len(steps) == 4
    for row in steps:
        total, task = float(row["train/loss_step"]), float(row["train/loss_task_step"])
        if reg == "none":
            assert "train/loss_reg_step" not in row and total == task
        else:
            added = float(row["train/loss_reg_step"])
            assert total == pytest.approx(task + added, abs=1e-5)
            value = float(row[f"train/reg_{MEASURES[reg][0]}_step"])
            if reg == "istar":  # loss_reg = weight x (1 - IsoScore*)
                assert added == pytest.approx(weight * (1 - value), abs=1e-5)
            else:
                assert added == pytest.approx(weight * value, abs=1e-5)


@pytest.mark.slow
def test_istar_weight_moves_isoscore_star_of_the_regularized_view(train_config, tmp_path):
    """The last layer's tokens, regularized by I-STAR and measured by the callback's fixed rule
    on the probe set: +10 ends more isotropic than 0, -10 less."""
    final = {}
    for weight in (10, 0, -10):
        results = train(
            train_config(
                "reg=istar",
                f"reg.weight={weight}",
                "reg.layers=last",
                "callbacks.isotropy.token_layers=[-1]",
                "debug=limit",
                "trainer.max_epochs=1",
                output_dir=tmp_path / str(weight),
            )
        )
        final[weight] = results["isotropy"]["final"]["iso/layer-1_tokens/isoscore_star"]
    assert final[10] > final[0] + 0.05 and final[-10] < final[0] - 0.05


@pytest.mark.parametrize(
    ("include_padding", "sample", "seed_offset"),
    [(False, "epoch", 3), (True, "epoch", 3), (False, "fixed", 0)],
)
def test_sigma_s_is_the_covariance_of_the_seeded_training_subset(
    train_config, include_padding, sample, seed_offset
):
    cfg = train_config(
        "reg=istar",
        "reg.shrinkage_examples=8",
        f"reg.include_padding={include_padding}",
        f"reg.shrinkage_sample={sample}",
    )
    model, datamodule = model_and_data(cfg)  # as a run builds them
    model.train()
    model.refresh_shrinkage(datamodule, epoch=3)
    assert model.training and model.encoder.training  # modes given back
    assert not model.regularization.needs_shrinkage(3) and model.regularization.needs_shrinkage(4)

    # Restated: 8 training examples chosen by the run's seed (plus the epoch, 3, when a fresh
    # subset is drawn every epoch, as released), every layer but the embeddings.
    dataset = datamodule.dataset("train")
    generator = torch.Generator().manual_seed(cfg.seed + seed_offset)
    chosen = torch.randperm(len(dataset), generator=generator)[:8]
    batch = datamodule.collate([dataset[i] for i in chosen.tolist()])
    model.eval()
    with torch.no_grad():
        states = model.encoder(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
            output_hidden_states=True,
        ).hidden_states
    keep = torch.ones_like(batch["attention_mask"]) if include_padding else batch["attention_mask"]
    rows = torch.cat([layer[keep.bool()] for layer in states[1:]])
    assert len(rows) == 2 * int(keep.sum())
    expected = np.cov(rows.double().numpy(), rowvar=False)
    actual = model.regularization.shrinkage.covariance
    assert actual.dtype == torch.float32
    np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-4, atol=1e-6)


RUN = ("reg=istar", "reg.shrinkage_examples=16", "debug=limit", "trainer.max_epochs=3", "seed=7")
SIGMA_S = "regularization.shrinkage.covariance"


@pytest.mark.slow
def test_sigma_s_is_checkpointed_and_a_resumed_run_repeats_the_uninterrupted_one(
    train_config, tmp_path
):
    full, resumed, full_dir, killed_dir, resumed_dir = kill_and_resume(train_config, tmp_path, *RUN)
    interrupted = load(killed_dir / "checkpoints" / "last.ckpt")["state_dict"]
    assert interrupted["regularization.shrinkage.epoch"].item() == 1  # computed at epoch 1's start
    assert interrupted[SIGMA_S].shape == (32, 32) and interrupted[SIGMA_S].diagonal().min() > 0

    assert resumed["steps"] == full["steps"] == 12
    assert resumed["history"] == full["history"]
    assert resumed["isotropy"]["per_epoch"] == full["isotropy"]["per_epoch"]
    expected = load(full_dir / "checkpoints" / "last.ckpt")["state_dict"]
    actual = load(resumed_dir / "checkpoints" / "last.ckpt")["state_dict"]
    assert expected["regularization.shrinkage.epoch"].item() == 2
    assert not torch.equal(expected[SIGMA_S], interrupted[SIGMA_S])  # recomputed every epoch
    assert actual.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(actual[name], tensor), name


# -- bad input ----------------------------------------------------------------------------------
def test_unknown_reg_lists_the_choices(tmp_path):
    with pytest.raises(MissingConfigException) as raised:
        compose_train_config(["reg=isotar"], tmp_path)
    message = str(raised.value)
    assert "Could not find 'reg/isotar'" in message
    assert "Available options in 'reg':\n\tcorreg\n\tcosreg\n\tistar\n\tnone" in message


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["reg=istar", "reg.zeta=1.5"], "reg.zeta=1.5: must be a number in [0, 1]"),
        (["reg=istar", "reg.zeta=-0.1"], "reg.zeta=-0.1: must be a number in [0, 1]"),
        (["reg=istar", "reg.weight=abc"], "reg.weight='abc': must be a finite number"),
        (["reg=cosreg", "reg.view=cls"], "reg.view='cls': must be one of ['tokens', 'sentence']"),
        (["reg=istar", "reg.layers=first"], "reg.layers='first': must be all, last, or hidden"),
        (["reg=istar", "reg.layers=[]"], "reg.layers=[]: must be all, last, or hidden"),
        (
            ["reg=istar", "reg.shrinkage_points=1"],
            "reg.shrinkage_points=1: must be an integer >= 2",
        ),
        (
            ["reg=istar", "reg.shrinkage_sample=once"],
            "reg.shrinkage_sample='once': must be one of ['epoch', 'fixed']",
        ),
        (["reg=cosreg", "reg.include_padding=2"], "reg.include_padding=2: must be true or false"),
        (
            ["optim.schedule=cosine"],
            "optim.schedule='cosine': must be one of ['linear', 'constant']",
        ),
        (["norm=whitening", "norm.group_size=0"], "norm.group_size=0: must be an integer >= 1"),
    ],
)
def test_bad_reg_and_schedule_values_are_named_with_their_range(overrides, line):
    (reported,) = problems(*overrides)
    assert reported.strip().startswith(line)


def test_a_layer_the_model_does_not_have_is_one_clear_error(train_config, tmp_path):
    message = (
        r"reg.layers=\[1, 3\] names hidden states \[3\] the model does not have: it has 3 "
        r"\(0 = the embeddings, 2 = the last layer.*Use indices in \[-3, 2\], all or last\."
    )
    with pytest.raises(IsotuneError, match=message):
        train(train_config("reg=istar", "reg.layers=[1,3]"))
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "failed"
    model = Regularization((32, 32, 32), name="cosreg", weight=1.0, layers=[-3, -1])
    assert model.layers == (0, 2)  # negative indices count from the end


def test_a_whitening_group_size_that_does_not_divide_the_hidden_size_is_one_clear_error(
    train_config,
):
    message = (
        r"norm=whitening does not fit .* \(hidden size 32\): IterNormWhitening group_size=5 does "
        r"not divide num_features=32; choose a divisor of 32 below the batch size"
    )
    with pytest.raises(IsotuneError, match=message):
        train(train_config("norm=whitening", "norm.group_size=5"))


# -- presets, schedule, tables and groups -------------------------------------------------------
def test_istar_sst2_is_the_released_protocol_in_one_job(tmp_path, gpu_visible):
    cfg = compose_train_config(["experiment=istar_sst2"], tmp_path)
    check_train_config(cfg)
    assert cfg.hydra.mode is None and cfg.hydra.sweeper.params is None  # one run, no sweep
    assert (cfg.task.name, cfg.model.name, cfg.trainer.precision) == ("sst2", "bert", "bf16-mixed")
    reg = (cfg.reg.name, cfg.reg.weight, cfg.reg.zeta, cfg.reg.layers, cfg.reg.include_padding)
    assert reg == ("istar", -5.0, 0.2, "all", True)
    assert (cfg.data.batch_size, cfg.trainer.max_epochs) == (32, 4)
    assert (cfg.optim.lr, cfg.optim.warmup_ratio, cfg.optim.schedule) == (1e-5, 0.0, "constant")


def test_interventions_preset_sweeps_every_intervention_over_four_tasks_and_five_seeds(
    tmp_path, gpu_visible
):
    cfg = compose_train_config(["experiment=interventions"], tmp_path)
    params = cfg.hydra.sweeper.params
    jobs = basic_sweep_jobs([f"{key}={value}" for key, value in params.items()])
    assert len(jobs) == len(options("intervention")) * 4 * 5
    assert cfg.hydra.mode == RunMode.MULTIRUN
    chosen = [dict(override.split("=") for override in job) for job in jobs]
    assert len({tuple(sorted(job.items())) for job in chosen}) == len(jobs)  # all different
    assert sorted({job["intervention"] for job in chosen}) == options("intervention")
    assert sorted({job["task"] for job in chosen}) == ["cola", "mrpc", "rte", "stsb"]
    assert sorted({job["seed"] for job in chosen}) == ["1", "2", "3", "4", "5"]
    for job in (jobs[0], jobs[-1]):
        job_cfg = compose_train_config(["experiment=interventions", *job], tmp_path)
        check_train_config(job_cfg)
        intervention = preset(dict(o.split("=") for o in job)["intervention"])
        assert (job_cfg.norm.name, job_cfg.reg.name, job_cfg.reg.weight) == intervention
        assert job_cfg.trainer.precision == "bf16-mixed"


def test_constant_schedule_keeps_the_rate_after_warmup_and_linear_decays_it():
    rates = {}
    for name, schedule in SCHEDULES.items():
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        scheduler = schedule(optimizer, 2, 10)
        rates[name] = []
        for _ in range(10):
            rates[name].append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
    assert rates["constant"] == [0.0, 0.5] + [1.0] * 8
    assert rates["linear"] == pytest.approx(
        [0.0, 0.5, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
    )


def test_wandb_group_names_norm_and_reg_with_its_weight(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cfg = compose_train_config(["logger=wandb", "intervention=istar_less", "seed=3"], tmp_path)
    logger = instantiate(cfg.logger.wandb)
    assert logger._wandb_init["group"] == "minilm-rte-none-istar-0.1"
    assert logger._wandb_init["name"] == "minilm-rte-none-istar-0.1-seed3"
    cfg = compose_train_config(["logger=wandb", "intervention=isobn"], tmp_path)
    assert instantiate(cfg.logger.wandb)._wandb_init["group"] == "minilm-rte-isobn"


def test_tables_key_on_norm_and_reg_with_its_weight(tmp_path):
    """An intervention sweep's runs: each configuration is its norm and reg (with weight), the
    baseline is norm=none reg=none, and a run written before reg existed counts as reg=none."""
    scores = {("none", "none", 0.0): 0.60, ("none", "istar", -1.0): 0.65}
    scores |= {("none", "istar", 1.0): 0.55, ("isobn", "none", 0.0): 0.62}
    for (norm, reg, weight), score in scores.items():
        for seed in (1, 2):
            result = completed("minilm", norm, "rte", seed, score + seed / 100)
            intervention = {"istar": f"istar_{'less' if weight < 0 else 'more'}"}.get(reg, norm)
            if reg != "none":  # older runs have neither field
                result |= {"reg": reg, "reg_weight": weight}
            overrides = [f"intervention={intervention}", "task=rte", f"seed={seed}"]
            write_run(tmp_path / f"{intervention}-{seed}", overrides, result)
    summary = aggregate.aggregate([tmp_path]).summary
    baseline = "norm=none reg=none reg_weight=0.0"
    assert summary["configuration"].tolist() == [  # rows: norm, then reg, by their registries
        baseline,
        "norm=none reg=istar reg_weight=-1.0",
        "norm=none reg=istar reg_weight=1.0",
        "norm=isobn reg=none reg_weight=0.0",
    ]
    assert summary["baseline"].tolist()[1:] == [baseline] * 3 and pd.isna(summary["baseline"][0])
    assert summary["delta_vs_baseline"].tolist()[1:] == pytest.approx([5.0, -5.0, 2.0])


def test_a_run_recorded_with_reg_none_and_a_weight_is_the_baseline(tmp_path):
    """`intervention=istar_less reg=none` trained before the weight was tied to its penalty
    recorded `reg: none, reg_weight: -0.1`: the aggregate reads it as the baseline, paired with
    the I-STAR runs, not as a configuration of its own."""
    for seed in (1, 2):
        result = completed("minilm", "none", "rte", seed, 0.6 + seed / 100)
        result |= {"reg": "none", "reg_weight": -0.1}
        overrides = ["intervention=istar_less", "reg=none", "task=rte", f"seed={seed}"]
        write_run(tmp_path / f"none-{seed}", overrides, result)
        result = completed("minilm", "none", "rte", seed, 0.65 + seed / 100)
        result |= {"reg": "istar", "reg_weight": -0.1}
        write_run(tmp_path / f"istar-{seed}", ["intervention=istar_less", f"seed={seed}"], result)
    summary = aggregate.aggregate([tmp_path]).summary
    baseline = "reg=none reg_weight=0.0"  # norm=none throughout: not named
    assert summary["configuration"].tolist() == [baseline, "reg=istar reg_weight=-0.1"]
    assert summary["baseline"].tolist()[1] == baseline
    assert summary["delta_vs_baseline"].tolist()[1] == pytest.approx(5.0)
