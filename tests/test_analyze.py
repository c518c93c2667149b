"""The geometry analysis end to end: a tiny BERT fine-tuned for one epoch, analysed in-process and
through ``python analyze.py``; report, tables, figures and their contents; clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from isotune.analysis.run import FIGURES, METHODS, TABLES, analyze
from isotune.errors import IsotuneError
from isotune.training import train
from tests.conftest import ROOT, compose_config, compose_train_config, tiny_run_overrides

NUM_HIDDEN_LAYERS = 2  # the tiny BERT of conftest
SMALL = [
    "tokens.max_tokens=300",
    "local.max_points=200",
    "local.n_clusters=4",
    "enhance.n_clusters=3",
    "enhance.abtt_components=2",
    "enhance.cluster_components=1",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_bert, glue_dir) -> Path:
    """last.ckpt of a tiny BERT fine-tuned on the RTE fixture for one epoch."""
    folder = tmp_path_factory.mktemp("run")
    cfg = compose_train_config(
        [
            *tiny_run_overrides(tiny_bert, glue_dir),
            "trainer.max_epochs=1",
            "callbacks.isotropy=null",
            "logger=none",
        ],
        folder,
    )
    train(cfg)
    # What Hydra saves for a train.py run; the analysis reads data.max_length from it.
    (folder / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.masked_copy(cfg, ["data"]), folder / ".hydra" / "config.yaml")
    return folder / "checkpoints" / "last.ckpt"


def compose_analyze_config(overrides: list[str], output_dir: Path) -> DictConfig:
    return compose_config("analyze", overrides, output_dir)


@pytest.fixture(scope="module")
def analysis(tmp_path_factory, checkpoint, glue_dir) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("analysis")
    cfg = compose_analyze_config(
        [f"ckpt_path={checkpoint}", f"paths.glue_dir={glue_dir}", "data.dev_examples=null", *SMALL],
        folder,
    )
    return folder, analyze(cfg)


def test_writes_the_report_tables_and_figures(analysis):
    folder, summary = analysis
    for name in TABLES:
        assert (folder / f"{name}.csv").is_file() and (folder / f"{name}.md").is_file()
    report = (folder / "report.md").read_text()
    for name in FIGURES:
        assert (folder / f"{name}.png").stat().st_size > 1000
        assert f"]({name}.png)" in report
    for statement in ("T1", "T2", "T3", "T4", "T5"):
        assert f"| {statement} |" in report
        assert summary["verdicts"][statement]["outcome"] in ("supported", "mixed", "not supported")
    assert json.loads((folder / "analysis.json").read_text()) == summary


def test_measures_every_layer_of_both_models(analysis):
    folder, summary = analysis
    table = pd.read_csv(folder / "isotropy_by_layer.csv")
    assert summary["num_layers"] == NUM_HIDDEN_LAYERS + 1
    for (model, view), rows in table.groupby(["model", "view"]):
        assert model in ("pretrained", "finetuned") and view in ("tokens", "sentence")
        assert sorted(rows.layer) == list(range(NUM_HIDDEN_LAYERS + 1))
    tokens = table[table.view == "tokens"]
    assert (tokens.n == summary["tokens"]).all() and summary["tokens"] == 300
    assert (table[table.view == "sentence"].n == 24).all()  # all of the fixture's dev set
    assert table[["iw", "log_iw", "avg_cosine"]].notna().all().all()
    # With cls pooling, layer 0 is the [CLS] embedding, the same for every example: no variance.
    varied = table[(table.view == "tokens") | (table.layer > 0)]
    assert varied[["isoscore", "effective_rank"]].notna().all().all()
    local = pd.read_csv(folder / "local_structure.csv")
    assert len(local) == 2 * (NUM_HIDDEN_LAYERS + 1) * 2
    assert ((local.purity >= local.majority - 1e-9) & (local.purity <= 1)).all()


def test_enhancement_keeps_the_checkpoints_metric_and_raises_isotropy(analysis, checkpoint):
    folder, summary = analysis
    table = pd.read_csv(folder / "enhancement.csv").set_index(["setting", "method"])
    assert sorted(set(table.index.get_level_values("method"))) == sorted(METHODS)
    recorded = torch.load(checkpoint, weights_only=False)["isotune_history"][-1]
    assert table.loc[("finetuned_head", "none"), "accuracy"] == pytest.approx(recorded["accuracy"])
    assert summary["finetuned_dev"]["accuracy"] == pytest.approx(recorded["accuracy"])
    for setting in ("finetuned_head", "pretrained_probe", "finetuned_probe"):
        before = table.loc[(setting, "none")]
        for method in METHODS[1:]:  # the tiny model's vectors are nearly parallel (cosine ~1)
            after = table.loc[(setting, method)]
            assert after.log_iw > before.log_iw and after.avg_cosine < before.avg_cosine
        # IsoScore ignores translation; whether ABTT raises it depends on the spectrum (see
        # test_enhance), which a randomly initialised model does not fix.
        assert table.loc[(setting, "zero_mean"), "isoscore"] == pytest.approx(before.isoscore)


def test_cli_writes_its_own_folder_and_logs_everything_to_wandb(checkpoint, glue_dir, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "WANDB_API_KEY"}
    result = subprocess.run(
        [
            sys.executable,
            "analyze.py",
            f"ckpt_path={checkpoint}",
            f"paths.glue_dir={glue_dir}",
            "data.dev_examples=16",
            "data.train_examples=32",
            *SMALL,
            "logger=wandb",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=ROOT,
        env={**env, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "run"
    summary = json.loads((folder / "analysis.json").read_text())
    assert summary["dev_examples"] == 16 and summary["train_examples"] == 32
    assert "# Fine-tuning and the geometry" in (folder / "report.md").read_text()
    assert (folder / ".hydra" / "config.yaml").is_file()
    assert f"Output directory: {folder}" in result.stdout + result.stderr
    (run,) = (folder / "wandb").glob("offline-run-*")
    files = run / "files"
    assert (files / "report.md").read_text() == (folder / "report.md").read_text()
    assert len(list((files / "media" / "images").rglob("*.png"))) == len(FIGURES)
    assert len(list((files / "media" / "table").rglob("*.json"))) == len(TABLES)


@pytest.mark.parametrize(
    ("make_path", "message"),
    [
        (lambda tmp: tmp / "missing.ckpt", "is not a file"),
        (lambda tmp: tmp / "broken.ckpt", "Cannot read"),
    ],
)
def test_unreadable_checkpoint_is_one_clear_error(tmp_path, glue_dir, make_path, message):
    (tmp_path / "broken.ckpt").write_bytes(b"not a checkpoint")
    cfg = compose_analyze_config(
        [f"ckpt_path={make_path(tmp_path)}", f"paths.glue_dir={glue_dir}"], tmp_path / "out"
    )
    with pytest.raises(IsotuneError, match=message):
        analyze(cfg)


def test_missing_glue_file_is_one_clear_error(checkpoint, tmp_path):
    overrides = [f"ckpt_path={checkpoint}", f"paths.glue_dir={tmp_path}"]
    cfg = compose_analyze_config(overrides, tmp_path)
    with pytest.raises(IsotuneError, match=rf"GLUE_DIR={tmp_path} has no RTE/dev.tsv"):
        analyze(cfg)
