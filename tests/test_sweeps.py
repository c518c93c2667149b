"""Sweeps end to end: W&B offline runs, the IsoBN experiment and SLURM configs, and real
multiruns of tiny models, started as a user types them (basic launcher, and the gpus launcher on
CPU slots followed by aggregation)."""

from __future__ import annotations

import itertools
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from isotune.callbacks.isotropy import SHARED_FOLDER
from isotune.record.folder_lock import LOCK_FILE
from isotune.sweeps.runs import find_sweeps, job_id, load_runs
from isotune.tracking.run_names import run_group
from isotune.training.run import train
from tests.conftest import ROOT, compose_train_config


@pytest.fixture
def no_wandb_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login either
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.mark.slow
def test_wandb_runs_offline_one_run_per_job_grouped_over_seeds(
    train_config, tmp_path, no_wandb_credentials
):
    groups = []
    for seed in (1, 2):
        cfg = train_config(
            "logger=wandb", "norm=isobn", f"seed={seed}", output_dir=tmp_path / f"s{seed}"
        )
        groups.append(run_group("minilm", "rte", "isobn", list(cfg.hydra.overrides.task)))
        train(cfg)
    assert groups[0] == groups[1] and "seed" not in groups[0]
    for seed in (1, 2):
        runs = list((tmp_path / f"s{seed}" / "wandb").glob("offline-run-*/run-*.wandb"))
        assert len(runs) == 1, "each job logs into its own run"
        record = runs[0].read_bytes()  # protobuf records: strings are stored verbatim
        for expected in (
            groups[0].encode(),
            f"{groups[0]}-seed{seed}".encode(),  # the run's name
            b"iso/post_norm/iw",
            b"iso/pre_norm/isoscore",
            b"val/accuracy",
            b"best/accuracy",
        ):
            assert expected in record, expected


def test_run_group_leaves_out_the_seed_and_keeps_other_overrides():
    overrides = ["task=rte", "seed=3", "optim.lr=1e-4", "hydra.sweep.dir=x", "norm=isobn"]
    assert run_group("bert", "rte", "isobn", overrides) == "bert-rte-isobn-optim.lr=1e-4"
    assert run_group("bert", "rte", "isobn", ["seed=1"]) == run_group("bert", "rte", "isobn", [])


def test_isobn_glue_experiment_is_the_papers_protocol(tmp_path):
    cfg = compose_train_config(["experiment=isobn_glue"], tmp_path)
    assert cfg.hydra.mode.name == "MULTIRUN"
    params = {key: value.split(",") for key, value in cfg.hydra.sweeper.params.items()}
    assert params["task"] == ["cola", "sst2", "mrpc", "qqp", "mnli", "qnli", "rte"]
    assert params["norm"] == ["none", "isobn"] and params["seed"] == ["1", "2", "3", "4", "5"]
    assert len(list(itertools.product(*params.values()))) == 70
    assert cfg.model.name_or_path == "bert-base-cased"
    assert (cfg.trainer.max_epochs, cfg.data.max_length, cfg.data.batch_size) == (10, 256, 16)
    assert (cfg.optim.lr, cfg.optim.adam_eps, cfg.optim.warmup_ratio) == (5e-5, 1e-6, 0.06)
    assert cfg.callbacks.early_stopping is None


def test_slurm_launcher_composes_with_one_gpu_per_job(tmp_path):
    cfg = compose_train_config(["hydra/launcher=slurm", "trainer=gpu"], tmp_path)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.isotune_launcher.slurm_launcher.IsotuneSlurmLauncher"
    assert (launcher.gpus_per_node, launcher.tasks_per_node, cfg.trainer.devices) == (1, 1, 1)
    assert launcher.array_parallelism > 1 and launcher.jobs_per_gpu == 1  # an array task per job


OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1"}


def tiny_sweep_overrides(tiny_bert, glue_dir) -> list[str]:
    """What every job of a tiny test sweep shares: tiny BERT, fixtures, one short epoch."""
    return [
        f"model.name_or_path={tiny_bert}", "model.pooling=cls", f"paths.glue_dir={glue_dir}",
        "trainer=cpu", "debug=limit", "trainer.max_epochs=1", "logger=none",
        "callbacks.isotropy.figures=false",
        "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
        "data.batch_size=8",
    ]  # fmt: skip


def multirun(working_dir: Path, overrides: list[str]) -> Path:
    """``python train.py -m <overrides>`` run from ``working_dir`` as a user types it (no
    hydra.sweep.dir); the one sweep folder it made."""
    command = [sys.executable, str(ROOT / "train.py"), "-m", *overrides]
    done = subprocess.run(
        command, cwd=working_dir, env=OFFLINE, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (sweep,) = (working_dir / "logs" / "multirun").iterdir()
    return sweep


@pytest.mark.slow
def test_multirun_lands_under_logs_multirun_of_the_working_directory(tmp_path, tiny_bert, glue_dir):
    sweep = multirun(tmp_path, ["seed=1,2", *tiny_sweep_overrides(tiny_bert, glue_dir)])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d-\d{6}", sweep.name)
    # beside the jobs: the lock, Hydra's record and epoch 0's measures the two seeds share
    assert sorted(path.name for path in sweep.iterdir()) == sorted(
        [LOCK_FILE, SHARED_FOLDER, "0", "1", "multirun.yaml"]
    )
    for job_number, seed in ((0, 1), (1, 2)):
        results = json.loads((sweep / str(job_number) / "results.json").read_text())
        assert (results["status"], results["seed"]) == ("completed", seed)
        assert results["output_dir"] == str(sweep / str(job_number))
    # isotune.sweeps.runs numbers a sweep's jobs as Hydra does.
    runs, sweeps = load_runs(sweep), find_sweeps(sweep)
    assert [job_id(run, sweeps) for run in runs] == [(sweep, 0), (sweep, 1)]


@pytest.mark.slow
def test_real_multirun_then_aggregate(tmp_path, tiny_bert, glue_dir):
    sweep = multirun(
        tmp_path,
        [
            "hydra/launcher=gpus", "hydra.launcher.n_jobs=2",
            "task=rte,mrpc", "seed=1,2", "norm=none,batchnorm,isobn",
            *tiny_sweep_overrides(tiny_bert, glue_dir),
        ],
    )  # fmt: skip
    results = [json.loads(path.read_text()) for path in sweep.glob("*/results.json")]
    assert len(results) == 12 and all(r["status"] == "completed" for r in results)
    runs, sweeps = load_runs(sweep), find_sweeps(sweep)
    assert all(job_id(run, sweeps) == (sweep, int(run.job_dir.name)) for run in runs)

    table = subprocess.run(
        [sys.executable, "-m", "isotune.aggregate", str(sweep)],
        cwd=ROOT, env=OFFLINE, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    summary = pd.read_csv(sweep / "results_table.csv")
    for (task, norm), group in itertools.groupby(
        sorted(results, key=lambda r: (r["task"], r["norm"])), key=lambda r: (r["task"], r["norm"])
    ):
        scores = [100 * r["best"][r["primary_metric"]] for r in group]
        row = summary[(summary.task == task) & (summary.norm == norm)].iloc[0]
        assert row["median"] == pytest.approx(statistics.median(scores), abs=0.01)
        assert row["std"] == pytest.approx(statistics.stdev(scores), abs=0.01)
        assert row["n"] == 2
    markdown = (sweep / "results_table.md").read_text()
    assert "rte" in markdown and "mrpc" in markdown and "isobn" in markdown
    isotropy = pd.read_csv(sweep / "isotropy_table.csv")
    assert not isotropy.empty
    assert "Failed or unfinished runs (0)" in table.stdout
