"""Training end to end with tiny random models on GLUE-format fixtures: results, resume, faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf

from hydra_plugins.isotune_launcher.command_line import check_list_settings, list_settings
from isotune.data.glue_format import FILE_NAMES
from isotune.errors import IsotuneError, NonFiniteLossError
from isotune.model.classifier import GLUEClassifier
from isotune.norms.registry import NORMS
from isotune.prediction.writer import SIDECAR_SUFFIX
from isotune.training.run import train
from tests.conftest import ROOT, tiny_run_overrides
from tests.helpers.cli import run_cli, run_script
from tests.helpers.stops import run_one_epoch

EXPECTED_OUTPUTS = [
    "results.json",
    "checkpoints/last.ckpt",
    "checkpoints/best.ckpt",
    "csv/metrics.csv",
]


def read_results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "norm", "metrics"),
    [
        ("rte", "isobn", {"accuracy", "loss"}),
        ("mrpc", "batchnorm", {"f1", "accuracy", "combined_score", "loss"}),
        ("stsb", "none", {"pearson", "spearmanr", "combined_score", "loss"}),
        ("cola", "isobn", {"matthews_correlation", "loss"}),
    ],
)
def test_tiny_bert_trains_and_records_results(train_config, tmp_path, task, norm, metrics):
    cfg = train_config(f"task={task}", f"norm={norm}", "write_test_predictions=true")
    results = train(cfg)
    assert results == read_results(tmp_path)
    assert results["status"] == "completed" and results["error"] is None
    assert (results["task"], results["norm"], results["seed"], results["model"]) == (
        task,
        norm,
        1,
        "minilm",
    )
    assert set(results["best"]) == metrics and set(results["final"]) == metrics
    assert [entry["epoch"] for entry in results["history"]] == [1, 2]
    # The dev scores' rows carry val/epoch, the dashboards' axis, counted as the history is.
    scores = pd.read_csv(tmp_path / "csv" / "metrics.csv").dropna(subset=["val/loss"])
    assert scores["val/epoch"].tolist() == [1, 2]
    best = max(results["history"], key=lambda entry: entry[results["primary_metric"]])
    assert results["best_epoch"] == best["epoch"]
    assert results["steps"] == 2 * (64 // 8) and results["wall_time_s"] > 0
    for name in EXPECTED_OUTPUTS:
        assert (tmp_path / name).is_file(), name
    written = tmp_path / "predictions" / f"{FILE_NAMES[task]}.tsv"  # as GLUE's server names it
    predictions = written.read_text().splitlines()
    assert predictions[0] == "index\tprediction" and len(predictions) == 11
    assert (written.parent / f"{written.name}{SIDECAR_SUFFIX}").is_file()


def test_hyperparameters_are_logged_once_as_the_whole_config(train_config, monkeypatch):
    logged = []
    log_hyperparams = CSVLogger.log_hyperparams

    def record(self, params, *args, **kwargs):
        logged.append(params)
        return log_hyperparams(self, params, *args, **kwargs)

    monkeypatch.setattr(CSVLogger, "log_hyperparams", record)
    cfg = train_config("debug=limit", "trainer.max_epochs=1")
    train(cfg)
    configs = [params for params in logged if params]  # Lightning adds the datamodule's empty {}
    assert len(configs) == 1  # not the model's hparams again
    assert set(configs[0]) == {*cfg, "provenance"}  # and where the run came from
    assert configs[0]["optim"] == OmegaConf.to_container(cfg.optim)


@pytest.mark.slow
def test_tiny_bert_learns_the_fixture_signal(train_config, tmp_path):
    results = train(
        train_config("task=rte", "norm=isobn", "trainer.max_epochs=10", "optim.lr=3e-3")
    )
    # The label is a polar word in sentence 2; chance is 0.5 on the 24 balanced dev examples.
    assert results["best"]["accuracy"] >= 0.75
    assert results["history"][-1]["loss"] < results["history"][0]["loss"]
    assert results["trivial"]["score"] == 0.5 and results["learned"] is True


def test_tiny_roberta_trains_with_fresh_pooler(train_config, tiny_roberta, tmp_path):
    cfg = train_config(
        "model=roberta",
        f"model.name_or_path={tiny_roberta}",
        "model.pooling=pooler",
        "norm=isobn",
        "task=mrpc",
    )
    results = train(cfg)
    assert results["status"] == "completed" and results["model"] == "roberta"
    assert set(results["best"]) >= {"f1", "accuracy"}


@pytest.mark.slow
def test_isobn_statistics_are_saved_and_resume_continues_at_the_right_step(
    train_config, tmp_path, monkeypatch
):
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    run_one_epoch(lambda: train(train_config("norm=isobn", output_dir=first_dir)), monkeypatch)
    checkpoint = torch.load(first_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 8
    stats = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith("norm.")}
    assert stats["norm.num_batches_tracked"].item() == 8 and stats["norm.run_cov"].abs().sum() > 0

    model = GLUEClassifier.load_from_checkpoint(first_dir / "checkpoints" / "last.ckpt")
    assert torch.equal(model.norm.run_cov, stats["norm.run_cov"])

    cfg = train_config(
        "norm=isobn", f"ckpt_path={first_dir}/checkpoints/last.ckpt", output_dir=second_dir
    )
    results = train(cfg)
    assert results["steps"] == 16
    assert [entry["epoch"] for entry in results["history"]] == [1, 2]  # history carried over
    resumed = torch.load(second_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["state_dict"]["norm.num_batches_tracked"].item() == 16


@pytest.mark.parametrize("pooling", ["cls", "mean", "pooler"])
def test_every_weight_the_sentence_vector_uses_trains_and_an_unused_pooler_does_not(
    train_config, pooling
):
    cfg = train_config(f"model.pooling={pooling}")
    model = GLUEClassifier(task=cfg.task, model=cfg.model, norm=cfg.norm, optim=cfg.optim)
    fixed = {name for name, p in model.named_parameters() if not p.requires_grad}
    pooler = {"encoder.pooler.dense.weight", "encoder.pooler.dense.bias"}
    assert fixed == (set() if pooling == "pooler" else pooler)


@pytest.mark.parametrize("norm", list(NORMS))
def test_weight_decay_spares_the_norm_and_every_gain_or_bias_by_where_it_lives(train_config, norm):
    """Each norm (whitening with its affine gain on) under weight decay: every parameter of the
    sentence vector's norm and every 1-D parameter goes undecayed, every other matrix decays; a
    matrix a norm might learn is spared too, as it lives in the norm."""
    options = ["norm.affine=true"] if norm == "whitening" else []
    cfg = train_config(f"norm={norm}", *options, "optim.weight_decay=0.01")
    model = GLUEClassifier(task=cfg.task, model=cfg.model, norm=cfg.norm, optim=cfg.optim)
    model.norm.register_parameter("mixing", torch.nn.Parameter(torch.eye(2)))  # a learnt matrix
    model._trainer = SimpleNamespace(estimated_stepping_batches=10)  # what the schedule reads
    decayed, spared = (
        group["params"] for group in model.configure_optimizers()["optimizer"].param_groups
    )
    names = {id(p): name for name, p in model.named_parameters()}
    spared_names = {names[id(p)] for p in spared}
    assert {f"norm.{name}" for name, _ in model.norm.named_parameters()} <= spared_names
    trained = {name: p for name, p in model.named_parameters() if p.requires_grad}
    assert {name for name, p in trained.items() if p.dim() == 1} <= spared_names
    assert {names[id(p)] for p in decayed} == {
        name for name, p in trained.items() if p.dim() >= 2 and not name.startswith("norm.")
    }
    assert all(p.dim() >= 2 for p in decayed) and decayed


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_trains_isobn_with_istar_and_rank_zero_writes_results(
    tmp_path, tiny_bert, glue_dir
):
    """trainer=ddp as a user runs it (Lightning starts the second process), on two CPU
    processes: no parameter may go without a gradient (DDP stops on one), and results.json is
    written by rank 0 alone, which measures isotropy."""
    overrides = [o for o in tiny_run_overrides(tiny_bert, glue_dir) if o != "trainer=cpu"]
    ddp_on_cpu = [
        "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true"
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *overrides, *ddp_on_cpu,
         "model.pooling=mean", "norm=isobn", "reg=istar", "reg.shrinkage_examples=32"],
        cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "logs" / "runs").iterdir()
    results = read_results(run)
    assert results["status"] == "completed" and results["norm"] == "isobn"
    assert results["steps"] == 2 * 64 // (8 * 2)  # two epochs of the 64 examples over 2 ranks
    assert set(results["isotropy"]["per_epoch"]) == {"0", "1", "2"}
    assert not list(run.glob("*.partial"))


def test_nan_loss_stops_the_run_with_a_failed_status(train_config, tmp_path, monkeypatch):
    def nan_loss(self, logits, labels):
        return logits.sum() * float("nan")

    monkeypatch.setattr(GLUEClassifier, "loss", nan_loss)
    with pytest.raises(NonFiniteLossError, match="loss became nan at step 0"):
        train(train_config())
    results = read_results(tmp_path)
    assert results["status"] == "failed"
    assert results["error"].startswith("NonFiniteLossError: The training loss became nan")


def test_model_not_available_offline_is_one_clear_error(train_config, tmp_path):
    with pytest.raises(
        IsotuneError,
        match=r"Model 'no-such-org/no-such-model' is not available.*model.name_or_path=DIR",
    ):
        train(train_config("model.name_or_path=no-such-org/no-such-model"))
    assert read_results(tmp_path)["status"] == "failed"


@pytest.mark.slow
def test_cli_reports_a_missing_model_without_a_traceback(tmp_path, glue_dir):
    result = run_cli(
        "model=roberta", "task=mrpc", f"paths.glue_dir={glue_dir}", f"hydra.run.dir={tmp_path}/run"
    )
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "Model 'roberta-base' is not available" in output and "model=minilm" in output
    assert "Traceback" not in output
    assert json.loads((tmp_path / "run" / "results.json").read_text())["status"] == "failed"


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("GLUE_DIR"), reason="GLUE_DIR is not set (the real GLUE files)"
)
def test_packaged_minilm_on_real_rte(tmp_path):
    result = run_cli(
        "norm=isobn",
        "debug=limit",
        "trainer.limit_train_batches=3",
        "trainer.max_epochs=1",
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (
        results["status"] == "completed" and results["model"] == "minilm" and results["steps"] == 3
    )
    assert 0.0 <= results["best"]["accuracy"] <= 1.0
    assert f"Output directory: {tmp_path}/run" in result.stdout + result.stderr


@pytest.mark.parametrize("key", sorted(list_settings()))
def test_a_list_setting_typed_as_a_sweep_is_refused_with_the_bracketed_list(key):
    # Unbracketed, Hydra reads it as a sweep of its own settings and stops with "Sweeping over
    # Hydra's configuration is not supported", without the fix.
    with pytest.raises(IsotuneError) as raised:
        check_list_settings(["-m", "seed=1,2", f"{key}=a,b"])
    message = str(raised.value)
    assert message.startswith(f"{key}=a,b: a list setting typed without brackets is a sweep")
    assert message.endswith(f"Fix: type the list in brackets, quoted for the shell: '{key}=[a,b]'.")


def test_the_list_settings_are_the_sweepers_and_launchers_lists_each_fixed_as_typed():
    assert list_settings() >= {
        "hydra.sweeper.arms",
        "hydra.sweeper.tasks",
        "hydra.sweeper.seeds",
        "hydra.sweeper.report_seeds",
        "hydra.launcher.gpus",
    }
    assert "hydra.sweeper.n_trials" not in list_settings()  # a number: no list to offer
    with pytest.raises(IsotuneError, match=r"shell: '\+\+hydra\.sweeper\.seeds=\[1,2,3\]'\.$"):
        check_list_settings(["++hydra.sweeper.seeds=range(1,4)"])
    check_list_settings(["hydra.sweeper.arms=[none,isobn]", "hydra.sweeper.seeds=[1,2]"])
    check_list_settings(["norm=none,isobn", "hydra.sweeper.n_trials=10,20"])  # Hydra's to judge


@pytest.mark.slow
def test_train_py_refuses_an_unbracketed_list_setting_before_hydra_with_the_fix(tmp_path):
    result = run_script(
        "train.py", "-m", "study=isotropy_cpu", "hydra.sweeper.arms=none,isobn", cwd=tmp_path
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Error: hydra.sweeper.arms=none,isobn: a list setting")
    assert "Fix: type the list in brackets, quoted for the shell: " in result.stderr
    assert "'hydra.sweeper.arms=[none,isobn]'" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no sweep folder made


def test_validate_alone_reports_scores_without_adding_an_epoch(train_config, tmp_path):
    import lightning as L

    from isotune.data import GLUEDataModule
    from isotune.model.encoders import load_tokenizer

    cfg = train_config("trainer.max_epochs=1")
    train(cfg)
    model = GLUEClassifier.load_from_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert len(model.history) == 1
    datamodule = GLUEDataModule(
        model.task, load_tokenizer(cfg.model.name_or_path), glue_dir=cfg.paths.glue_dir
    )
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    scores = trainer.validate(model, datamodule=datamodule, verbose=False)
    assert scores[0]["val/accuracy"] == pytest.approx(model.history[0]["accuracy"])
    assert len(model.history) == 1
