"""The adaptation axis: what each mode trains, the encoder's mode throughout, small and exactly
resumable checkpoints that the analysis loads, each mode's learning rate, and clear errors."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

import lightning as L
import pandas as pd
import pytest
import torch
import yaml
from omegaconf import open_dict
from torch import nn

from isotune.analysis.directions import (
    adapted_matrices,
    intruder_dimensions,
    linear_weights,
    new_dominant_directions,
)
from isotune.analysis.run import analyze
from isotune.errors import IsotuneError
from isotune.model.adaptation import ADAPTATIONS, eval_mode, lora_targets, parameter_counts
from isotune.model.encoders import load_encoder
from isotune.training.config_checks import check_train_config
from isotune.training.run import train
from tests.conftest import CONF_DIR, compose_config, compose_train_config, tiny_run_overrides
from tests.helpers.analysis import SMALL, analyzed_model
from tests.helpers.resume import kill_and_resume, load

ADAPTER = re.compile(r"\.lora_[AB]\.default\.weight$")
ALWAYS_TRAINED = ("encoder.pooler.", "norm.", "head.")  # with pooling=pooler and norm=batchnorm
RUN = ("model.pooling=pooler", "norm=batchnorm", "debug=limit")  # 2 epochs of 4 steps
QV = [  # LoRA's default targets of the tiny BERT (and RoBERTa)
    f"encoder.layer.{layer}.attention.self.{projection}"
    for layer in (0, 1)
    for projection in ("query", "value")
]


class Watch(L.Callback):
    """The parameters when fitting starts and ends, and every module's mode at each training
    step's encoder pass and when training ends (after the isotropy callback's last pass)."""

    last: Watch | None = None  # built from the config by train(); the test reads the last one

    def __init__(self) -> None:
        Watch.last = self
        self.start: dict[str, torch.Tensor] = {}
        self.end: dict[str, torch.Tensor] = {}
        self.step_modes: list[dict[str, bool]] = []
        self.end_modes: dict[str, bool] = {}
        self._hook = None

    def on_fit_start(self, trainer, module) -> None:
        self.start = {name: p.detach().clone() for name, p in module.named_parameters()}

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self._hook = module.encoder.register_forward_pre_hook(
            lambda *_: self.step_modes.append(modes(module))
        )

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self._hook.remove()

    def on_train_end(self, trainer, module) -> None:
        self.end = {name: p.detach().clone() for name, p in module.named_parameters()}
        self.end_modes = modes(module)


def modes(module: nn.Module) -> dict[str, bool]:
    return {name: submodule.training for name, submodule in module.named_modules()}


def watched(cfg):
    with open_dict(cfg):
        cfg.callbacks.watch = {"_target_": f"{__name__}.Watch"}
    return cfg


def in_encoder_body(name: str) -> bool:
    return name.startswith("encoder.") and not name.startswith("encoder.pooler")


class Run(NamedTuple):
    folder: Path
    results: dict
    watch: Watch


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_bert, glue_dir) -> dict[str, Run]:
    """One run of each mode, watched: two epochs of four steps, pooling=pooler, norm=batchnorm."""
    done = {}
    for mode in ADAPTATIONS:
        folder = tmp_path_factory.mktemp(mode)
        overrides = [*tiny_run_overrides(tiny_bert, glue_dir), f"adapt={mode}", *RUN, "logger=none"]
        results = train(watched(compose_train_config(overrides, folder)))
        done[mode] = Run(folder, results, Watch.last)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lora", "frozen"])
def test_only_adapters_pooler_norm_and_head_train_and_the_encoder_keeps_its_mode(mode, runs):
    folder, results, watch = runs[mode]
    changed = {name for name, p in watch.start.items() if not torch.equal(p, watch.end[name])}
    expected = {
        name
        for name in watch.start
        if name.startswith(ALWAYS_TRAINED) or (mode == "lora" and ADAPTER.search(name))
    }
    assert changed == expected  # every other parameter is bit-identical after 8 steps
    adapters = {name for name in expected if ADAPTER.search(name)}
    assert adapters == (
        {f"encoder.{m}.lora_{ab}.default.weight" for m in QV for ab in "AB"}
        if mode == "lora"
        else set()
    )
    assert results["adapt"] == mode
    sizes = {name: p.numel() for name, p in watch.start.items()}
    assert results["parameters"] == {
        "trainable": sum(sizes[name] for name in expected),
        "total": sum(sizes.values()),
        "trainable_fraction": sum(sizes[name] for name in expected) / sum(sizes.values()),
    }
    # LoRA trains with the encoder's dropout on; a frozen encoder is in eval mode throughout,
    # also after the isotropy callback's passes. The pooler, norm and head train in both.
    assert len(watch.step_modes) == 8
    for recorded in [*watch.step_modes, watch.end_modes]:
        body = {recorded[name] for name in recorded if in_encoder_body(name)}
        assert body == {mode == "lora"}
        assert recorded["encoder.pooler"] and recorded["norm"] and recorded["head"]
    state = load(folder / "checkpoints" / "last.ckpt")["state_dict"]
    assert state["norm.num_batches_tracked"].item() == 8  # statistics updated at every step


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lora", "frozen"])
def test_checkpoints_hold_what_trains_and_load_back_with_the_pretrained_weights(
    mode, runs, tiny_bert
):
    path = runs[mode].folder / "checkpoints" / "last.ckpt"
    full_size = (runs["full"].folder / "checkpoints" / "last.ckpt").stat().st_size
    # The tiny model's checkpoint is mostly bookkeeping (~35 kB); MiniLM's shrinks 200-fold.
    assert path.stat().st_size < 0.35 * full_size
    state = load(path)["state_dict"]
    assert {name for name in state if name.startswith("encoder.")} == {
        *(f"encoder.{m}.lora_{ab}.default.weight" for m in QV for ab in "AB" if mode == "lora"),
        "encoder.pooler.dense.weight",
        "encoder.pooler.dense.bias",
    }
    model = analyzed_model(path)  # as analyze.py loads it
    assert model.adaptation == mode
    loaded = model.encoder.state_dict()
    for name, tensor in load_encoder(str(tiny_bert)).state_dict().items():
        if not name.startswith("pooler."):  # the pooler trained; everything else is as downloaded
            head, _, leaf = name.rpartition(".")
            adapted = f"{head}.base_layer.{leaf}"  # a LoRA layer keeps the weight it wraps here
            assert torch.equal(loaded[adapted if adapted in loaded else name], tensor), name
    for name, tensor in state.items():
        assert torch.equal(model.state_dict()[name], tensor), name


@pytest.mark.slow
def test_a_resumed_lora_run_repeats_the_uninterrupted_one(train_config, tmp_path):
    run = ("adapt=lora", "norm=isobn", "debug=limit", "trainer.max_epochs=3", "seed=7")
    full, resumed, full_dir, _, resumed_dir = kill_and_resume(train_config, tmp_path, *run)
    assert resumed["steps"] == full["steps"] == 12
    assert resumed["history"] == full["history"]
    assert resumed["isotropy"]["per_epoch"] == full["isotropy"]["per_epoch"]
    expected = load(full_dir / "checkpoints" / "last.ckpt")["state_dict"]
    actual = load(resumed_dir / "checkpoints" / "last.ckpt")["state_dict"]
    assert actual.keys() == expected.keys()
    assert any(ADAPTER.search(name) for name in actual)
    for name, tensor in expected.items():
        assert torch.equal(actual[name], tensor), name


@pytest.mark.slow
def test_analysis_of_a_lora_checkpoint_finds_changed_directions_only_in_adapted_matrices(
    runs, glue_dir, tmp_path
):
    cfg = compose_config(
        "analyze",
        [
            f"ckpt_path={runs['lora'].folder}/checkpoints/last.ckpt",
            f"paths.glue_dir={glue_dir}",
            "data.max_length=128",
            "directions.k=4",
            "directions.matrices=all",  # every matrix: the unadapted ones must not have moved
            *SMALL,
        ],
        tmp_path,
    )
    summary = analyze(cfg)
    assert json.loads((tmp_path / "analysis.json").read_text())["adapt"] == summary["adapt"]
    assert summary["adapt"] == "lora"
    assert set(summary["new_directions"]) == {"tokens", "sentence"}
    new = pd.read_csv(tmp_path / "new_directions.csv")
    assert new.groupby("view")["rank"].apply(list).to_dict() == {
        "sentence": [1, 2, 3, 4],
        "tokens": [1, 2, 3, 4],
    }
    intruders = pd.read_csv(tmp_path / "intruder_dimensions.csv").set_index("matrix")
    assert summary["intruder_dimensions"]["matrices"] == len(intruders) == 12  # 6 per block
    adapted = intruders.loc[QV]
    fixed = intruders.drop(index=QV)
    assert (fixed["intruders"] == 0).all() and (fixed["min_max_abs_cos"] > 0.999999).all()
    assert (adapted["min_max_abs_cos"] < 0.999999).all()  # their singular vectors moved


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["full", "lora"])
def test_intruders_are_counted_by_default_in_the_matrices_lora_adapts(mode, runs):
    """The released code's set: the LoRA checkpoint's own targets, and for full fine-tuning the
    architecture's default targets, so that both compare on the same matrices."""
    model = analyzed_model(runs[mode].folder / "checkpoints" / "last.ckpt")
    assert sorted(adapted_matrices(model)) == QV
    assert sorted(linear_weights(model.encoder, adapted_matrices(model))) == QV
    assert len(linear_weights(model.encoder)) == 12


def test_default_targets_are_the_attention_projections_and_never_the_pooler(
    tiny_bert, tiny_roberta
):
    for folder in (tiny_bert, tiny_roberta):
        assert lora_targets(load_encoder(str(folder)), None) == QV
    dense = lora_targets(load_encoder(str(tiny_bert)), ["dense"])
    assert len(dense) == 6 and "pooler.dense" not in dense


def test_a_target_module_that_matches_nothing_is_one_clear_error(train_config):
    cfg = train_config("adapt=lora", "adapt.target_modules=[query,querry]")
    message = r"entries \['querry'\] match no module .* linear layers: \[.*'attention\.self\.query'"
    with pytest.raises(IsotuneError, match=message):
        train(cfg)


def test_a_family_without_default_targets_asks_for_them(tiny_bert):
    encoder = load_encoder(str(tiny_bert))
    encoder.config.model_type = "ernie"
    message = r"family 'ernie'.*adapt.target_modules=.*linear layers \[.*'attention.self.query'"
    with pytest.raises(IsotuneError, match=message):
        lora_targets(encoder, None)


def test_lora_without_peft_is_one_clear_error(train_config, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "peft", None)  # as if not installed: importing it fails
    with pytest.raises(IsotuneError, match=r"adapt=lora needs the peft package.*pip install peft"):
        train(train_config("adapt=lora"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed" and results["adapt"] == "lora"


@pytest.mark.parametrize(
    ("overrides", "lr"),
    [
        ([], 5e-5),
        (["adapt=lora"], 5e-4),
        (["adapt=frozen"], 1e-3),
        (["adapt=lora", "optim.lr=1e-4"], 1e-4),  # the command line wins
        (["adapt=frozen", "experiment=isobn_glue"], 5e-5),  # and so does an experiment's optim.lr
    ],
)
def test_each_mode_brings_its_learning_rate_and_an_override_wins(overrides, lr, tmp_path):
    assert compose_train_config(overrides, tmp_path).optim.lr == lr


def test_every_adapt_config_names_its_registry_key_and_composes(tmp_path):
    names = {
        path.stem: yaml.safe_load(path.read_text())["adapt"]["name"]
        for path in (CONF_DIR / "adapt").glob("*.yaml")
    }
    assert names == {key: key for key in ADAPTATIONS}
    assert list(ADAPTATIONS) == ["full", "lora", "frozen"]
    lora = compose_train_config(["adapt=lora"], tmp_path).adapt
    assert (lora.r, lora.alpha, lora.dropout, lora.target_modules) == (8, 16, 0.1, None)


def test_the_adaptation_experiment_sweeps_three_modes_two_norms_four_tasks_five_seeds(tmp_path):
    cfg = compose_train_config(["experiment=adaptation"], tmp_path)
    params = cfg.hydra.sweeper.params
    assert params.adapt == "full,lora,frozen" and params.norm == "none,isobn"
    assert params.task == "rte,mrpc,stsb,cola" and params.seed == "1,2,3,4,5"
    # optim.lr is not set there, so each mode's own applies
    assert compose_train_config(["experiment=adaptation", "adapt=lora"], tmp_path).optim.lr == 5e-4


def test_adapt_values_out_of_range_are_listed_in_one_error(tmp_path):
    cfg = compose_train_config(
        ["adapt=lora", "adapt.r=0", "adapt.dropout=1.0", "adapt.target_modules=[]"], tmp_path
    )
    with pytest.raises(IsotuneError) as error:
        check_train_config(cfg)
    message = str(error.value)
    assert "adapt.r=0: must be an integer >= 1" in message
    assert "adapt.dropout=1.0: must be a number in [0, 1)" in message
    assert "adapt.target_modules=[]: must be null or a list of module names" in message
    assert "adapt.alpha" not in message


def test_eval_mode_gives_every_submodule_its_own_mode_back():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(), nn.Linear(2, 2)))
    model[1].eval()
    with eval_mode(model):
        assert not any(module.training for module in model.modules())
    assert [module.training for module in model.modules()] == [True, True, False, False, False]


def test_parameter_counts_count_what_requires_grad():
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))  # 8 and 3 parameters
    model[0].requires_grad_(False)
    assert parameter_counts(model) == {"trainable": 3, "total": 11, "trainable_fraction": 3 / 11}


def test_new_dominant_directions_flag_a_direction_that_became_dominant():
    generator = torch.Generator().manual_seed(0)
    scales = torch.tensor([10.0, 8.0, 6.0, 4.0] + [1.0] * 12)  # dominant axes e0..e3
    pretrained = torch.randn(2000, 16, generator=generator) * scales
    finetuned = pretrained.clone()
    finetuned[:, 9] *= 20  # e9 (variance ~400) is now the top direction; then e0, e1, e2
    table = new_dominant_directions(pretrained, finetuned, k=4, threshold=0.5)
    assert table["rank"].tolist() == [1, 2, 3, 4]
    assert table["new"].tolist() == [True, False, False, False]
    assert table.loc[0, "max_abs_cos"] < 0.1 and table.loc[1:, "max_abs_cos"].min() > 0.9
    assert table.loc[0, "variance_ratio"] == pytest.approx(
        400 / (400 + 100 + 64 + 36 + 16 + 11), abs=0.03
    )
    same = new_dominant_directions(pretrained, pretrained, k=4, threshold=0.5)
    assert not same["new"].any() and same["max_abs_cos"].min() > 0.999


def test_intruder_dimensions_flag_a_large_update_off_the_pretrained_singular_vectors():
    pretrained = torch.diag(torch.linspace(10, 1, 64))  # left singular vectors: the axes
    off_axis = torch.ones(64) / 8  # |cos| 1/8 to every axis
    finetuned = pretrained + 100 * torch.outer(off_axis, torch.eye(64)[5])
    table = intruder_dimensions({"m": pretrained}, {"m": finetuned}, k=3, threshold=0.5)
    assert table.to_dict("records")[0]["intruders"] == 1
    assert table.loc[0, "min_max_abs_cos"] < 0.3  # the update's direction, tilted towards e5
    unchanged = intruder_dimensions({"m": pretrained}, {"m": pretrained}, k=3, threshold=0.5)
    assert unchanged.loc[0, "intruders"] == 0 and unchanged.loc[0, "min_max_abs_cos"] > 0.999


def test_linear_weights_of_a_lora_layer_are_its_base_plus_the_scaled_update(tiny_bert):
    from isotune.model.adaptation import lora

    encoder = load_encoder(str(tiny_bert))
    pretrained = linear_weights(encoder)
    lora(encoder, r=2, alpha=8, dropout=0.0, target_modules=["query"])
    query = encoder.encoder.layer[0].attention.self.query
    nn.init.normal_(query.lora_B["default"].weight)
    weights = linear_weights(encoder)
    assert weights.keys() == pretrained.keys() and len(weights) == 12  # pooler left out
    update = 4.0 * query.lora_B["default"].weight @ query.lora_A["default"].weight  # alpha / r = 4
    name = "encoder.layer.0.attention.self.query"
    torch.testing.assert_close(weights[name], pretrained[name] + update)
    other = "encoder.layer.0.attention.self.key"
    assert torch.equal(weights[other], pretrained[other])
