"""The geometry analysis end to end: a tiny BERT fine-tuned for one epoch, analysed in-process and
through ``python analyze.py``; report, tables, figures and their contents; clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from isotune.analysis.config_checks import check_analyze_config
from isotune.analysis.experiments import (
    METHODS,
    SETTINGS,
    isotropy_by_layer,
    local_structure,
    sentence_view,
)
from isotune.analysis.figures import FIGURES
from isotune.analysis.geometry import LayerVectors
from isotune.analysis.report import (
    TABLES,
    intruder_dimensions_markdown,
    new_directions_markdown,
)
from isotune.analysis.run import analyze
from isotune.analysis.verdicts import judge, judge_outliers
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.isotropy import layer_profile, measure_all
from isotune.record.kept_checkpoint import FIX_KEPT_MODEL
from isotune.tracking.metric_keys import POST_NORM, PRE_NORM
from isotune.training.config_checks import SEED_RANGE
from isotune.training.run import train
from tests.conftest import CONF_DIR, ROOT, compose_config, compose_train_config, tiny_run_overrides
from tests.helpers.analysis import SMALL

NUM_HIDDEN_LAYERS = 2  # the tiny BERT of conftest


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


@pytest.mark.slow
def test_writes_the_report_tables_and_figures(analysis):
    folder, summary = analysis
    for name in TABLES:
        assert (folder / f"{name}.csv").is_file() and (folder / f"{name}.md").is_file()
    report = (folder / "report.md").read_text()
    for name in FIGURES:
        assert (folder / f"{name}.png").stat().st_size > 1000
        assert f"]({name}.png)" in report
    for statement in ("T1", "T2", "T3", "T4", "T5", "O1", "O2"):
        assert f"| {statement} |" in report
        assert summary["verdicts"][statement]["outcome"] in ("supported", "mixed", "not supported")
    assert json.loads((folder / "analysis.json").read_text()) == summary
    directions = report.split("## Directions fine-tuning made dominant")[1]
    for view, counts in summary["new_directions"].items():
        assert f"| {view} | {counts['new']} of 10 |" in directions
    intruders = summary["intruder_dimensions"]
    assert f"{intruders['total']} in {intruders['matrices_with_intruders']} of" in directions


@pytest.mark.slow
def test_outlier_table_summary_and_report_agree(analysis):
    """The per-dimension table, the summary O1/O2 read and the report tell one story: ratios,
    ranks, outlier flags, the overlap, the best dimension and the full model's score."""
    folder, summary = analysis
    table = pd.read_csv(folder / "outlier_dimensions.csv")
    outliers = summary["outlier_dimensions"]
    hidden = summary["hidden_size"]
    assert len(table) == 2 * hidden and set(table.model) == {"pretrained", "finetuned"}
    for model in ("pretrained", "finetuned"):
        rows = table[table.model == model]
        ratio = rows.variance / rows.variance.mean()
        np.testing.assert_allclose(rows.variance_ratio, ratio, rtol=1e-9)
        assert rows.dim[rows.outlier].tolist() == sorted(outliers[model])
        assert sorted(rows.variance_rank) == list(range(1, hidden + 1))
        assert (rows.tabulated == (rows.outlier | (rows.variance_rank <= 10))).all()
        assert rows.score.between(0, 1).all() and rows.train_accuracy.between(0.5, 1).all()
    kept = [dim for dim in outliers["pretrained"] if dim in outliers["finetuned"]]
    assert outliers["kept"] == kept
    fine = table[table.model == "finetuned"]
    best = fine.loc[fine.score.idxmax()]
    assert outliers["best_dimension"]["dim"] == best.dim
    assert outliers["full_score"] == summary["finetuned_dev"]["accuracy"]
    report = (folder / "report.md").read_text()
    assert "## Outlier dimensions (Rudman, Chen & Eickhoff 2023)" in report
    assert "](outlier_variances.png)" in report and "](one_dimension.png)" in report


def outlier_summary(**values) -> dict:
    """A summary of the outlier experiment, as ``outlier_experiment`` returns it."""
    summary = {
        "pretrained": [3, 7],
        "finetuned": [3, 7, 9],
        "kept": [3, 7],
        "survival": 1.0,
        "full_score": 0.8,
        "baseline_score": 0.5,
        "best_outlier": {"dim": 3, "score": 0.7, "variance_ratio": 9.0, "recovery": 2 / 3},
        "best_dimension": {"dim": 3, "score": 0.7, "variance_ratio": 9.0, "recovery": 2 / 3},
    }
    return {**summary, **values}


THRESHOLDS = OmegaConf.create({"outlier_survival": 0.5, "one_dimension_share": 0.5})
WEAK = {"dim": 3, "score": 0.6, "variance_ratio": 9.0, "recovery": 1 / 3}
STRONG_PLAIN = {"dim": 40, "score": 0.75, "variance_ratio": 1.2, "recovery": 5 / 6}


@pytest.mark.parametrize(
    ("values", "o1", "o2"),
    [
        ({}, "supported", "supported"),
        ({"kept": [3], "survival": 0.5}, "supported", "supported"),
        ({"kept": [3], "survival": 0.34, "pretrained": [3, 7, 8]}, "mixed", "supported"),
        ({"kept": [], "survival": 0.0}, "not supported", "supported"),
        ({"pretrained": [], "kept": [], "survival": None}, "not supported", "supported"),
        ({"best_outlier": WEAK, "best_dimension": STRONG_PLAIN}, "supported", "mixed"),
        ({"best_outlier": WEAK, "best_dimension": WEAK}, "supported", "not supported"),
        ({"finetuned": [], "best_outlier": None}, "supported", "mixed"),
        ({"full_score": 0.5}, "supported", "not supported"),
    ],
)
def test_outlier_verdicts_follow_their_rules(values, o1, o2):
    first, second = judge_outliers(outlier_summary(**values), THRESHOLDS)
    assert (first.statement, first.outcome) == ("O1", o1)
    assert (second.statement, second.outcome) == ("O2", o2)


def test_direction_tables_list_the_new_ranks_and_the_matrices_with_most_intruders():
    new = pd.DataFrame(
        {
            "rank": [1, 2, 3, 1, 2, 3],
            "variance_ratio": [0.5, 0.2, 0.1, 0.4, 0.3, 0.05],
            "max_abs_cos": [0.9, 0.3, 0.2, 0.95, 0.8, 0.7],
            "new": [False, True, True, False, False, False],
            "view": ["tokens"] * 3 + ["sentence"] * 3,
        }
    )
    assert new_directions_markdown(new).splitlines()[2:] == [
        "| tokens | 2 of 3 | 2, 3 | 0.3 | 0.2 |",
        "| sentence | 0 of 3 | - | 0 | 0.7 |",
    ]
    intruders = pd.DataFrame(
        {
            "matrix": ["a", "b", "c", "d"],
            "intruders": [1, 3, 0, 1],
            "min_max_abs_cos": [0.4, 0.1, 0.9, 0.2],
        }
    )
    assert intruder_dimensions_markdown(intruders, most=2).splitlines()[2:] == [
        "| `b` | 3 | 0.1 |",
        "| `d` | 1 | 0.2 |",
    ]
    none = intruders.assign(intruders=0)
    assert intruder_dimensions_markdown(none) == "No weight matrix has an intruder dimension."


@pytest.mark.slow
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
    assert (
        varied[["isoscore", "effective_rank", "anisotropy", "twonn", "mle_id"]].notna().all().all()
    )
    local = pd.read_csv(folder / "local_structure.csv")
    assert len(local) == 2 * (NUM_HIDDEN_LAYERS + 1) * 2
    assert ((local.purity >= local.majority - 1e-9) & (local.purity <= 1)).all()


@pytest.mark.slow
def test_enhancement_keeps_the_checkpoints_metric_and_raises_isotropy(analysis, checkpoint):
    folder, summary = analysis
    table = pd.read_csv(folder / "enhancement.csv").set_index(["setting", "method"])
    assert sorted(set(table.index.get_level_values("method"))) == sorted(METHODS)
    recorded = torch.load(checkpoint, weights_only=True)["isotune_history"][-1]
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


@pytest.mark.slow
def test_outputs_name_the_sentence_views_pre_norm_and_post_norm(analysis):
    folder, summary = analysis
    enhancement = pd.read_csv(folder / "enhancement.csv")
    views = enhancement.groupby("setting").view.unique().map(list).to_dict()
    assert views == {
        "finetuned_head": [POST_NORM],
        "pretrained_probe": [PRE_NORM],
        "finetuned_probe": [POST_NORM],
    }
    assert "| setting | view | method |" in (folder / "enhancement.md").read_text()
    # cls pooling: the verdicts read the last layer's `sentence` view, the pre_norm vector itself
    assert summary["sentence_view"] == "sentence"
    assert summary["verdicts"]["T1"]["evidence"].startswith("tokens: log I(W) ")
    assert "; sentence: log I(W) " in summary["verdicts"]["T1"]["evidence"]
    report = (folder / "report.md").read_text()
    assert f"- `pretrained_probe`: linear probe on the pre-trained `{PRE_NORM}` vectors" in report
    for name in ("pooled", "classifier_input", "classifier input"):  # the analysis's old names
        for output in ("report.md", "analysis.json", *(f"{table}.csv" for table in TABLES)):
            assert name not in (folder / output).read_text()


def test_pooler_pooling_measures_and_judges_the_pre_norm_view():
    generator = torch.Generator().manual_seed(0)

    def layer_vectors(scale: float) -> LayerVectors:
        def points(n: int) -> torch.Tensor:
            return torch.randn(n, 6, generator=generator) * torch.linspace(1, scale, 6)

        layers = range(NUM_HIDDEN_LAYERS + 1)
        return LayerVectors(
            tokens=[points(40) for _ in layers],
            sentences=[points(20) for _ in layers],
            pre_norm=points(20),
            post_norm=points(20),
        )

    vectors = {"pretrained": layer_vectors(1.0), "finetuned": layer_vectors(30.0)}
    layers = isotropy_by_layer(vectors, "pooler", dominant_factor=10.0, seed=0)
    pre_norm = layers[layers.view == PRE_NORM]  # the pooler output: last layer only
    assert pre_norm[["model", "layer", "n"]].values.tolist() == [
        ["pretrained", NUM_HIDDEN_LAYERS, 20],
        ["finetuned", NUM_HIDDEN_LAYERS, 20],
    ]
    expected = [measure_all(v.pre_norm)["log_iw"] for v in vectors.values()]
    assert pre_norm.log_iw.tolist() == pytest.approx(expected)
    # Per layer also the layer profile's anisotropy and intrinsic dimensions, before and after.
    for model, layer_vectors_of in vectors.items():
        rows = layers[(layers.model == model) & (layers.view == "tokens")]
        profiles = [layer_profile(points) for points in layer_vectors_of.tokens]
        for name in ("anisotropy", "twonn", "twonn_microscope", "mle_id"):
            assert rows[name].tolist() == pytest.approx([p[name] for p in profiles]), name
    assert sentence_view("pooler") == PRE_NORM and sentence_view("mean") == "sentence"

    token_type = torch.arange(40) % 2
    local = local_structure(
        vectors,
        {"token_type": token_type, "frequency": token_type},
        OmegaConf.create({"max_points": 40, "n_clusters": 2, "folds": 2}),
        seed=0,
    )
    enhancement = pd.DataFrame(
        [
            {"setting": setting, "method": method, "log_iw": -1.0, "accuracy": 0.5}
            for setting in SETTINGS
            for method in METHODS
        ]
    )
    task = TaskSpec.from_config(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "task/rte.yaml")))
    tables = {"isotropy_by_layer": layers, "local_structure": local, "enhancement": enhancement}
    thresholds = OmegaConf.create({"local_change": 0.05, "metric_tolerance": 0.01})
    t1, _, t3, *_ = judge(tables, task, PRE_NORM, NUM_HIDDEN_LAYERS, thresholds)
    pre, fine = expected
    assert f"; {PRE_NORM}: log I(W) {pre:.4g} → {fine:.4g}" in t1.evidence
    assert f"; {PRE_NORM}: " in t3.evidence


@pytest.mark.slow
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
        (lambda tmp: tmp / "missing.ckpt", "missing.ckpt does not exist"),
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


def test_a_run_folder_with_a_link_leading_out_is_refused_before_its_checkpoint_is_read(
    tmp_path, glue_dir
):
    """analyze.py reads a kept model with predict.py's loader: a checkpoint a link brings into
    the run folder from elsewhere is another's, refused before it is read."""
    elsewhere = tmp_path / "someone" / "best.ckpt"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"not read")
    best = tmp_path / "run" / "checkpoints" / "best.ckpt"
    best.parent.mkdir(parents=True)
    best.symlink_to(elsewhere)
    cfg = compose_analyze_config([f"ckpt_path={best}", f"paths.glue_dir={glue_dir}"], tmp_path)
    with pytest.raises(
        IsotuneError, match=r"lead out of it: .*What analyze.py reads .*Fix: replace each link"
    ):
        analyze(cfg)


def test_bad_values_are_listed_in_one_message_before_the_checkpoint_loads(tmp_path):
    """seed=-3 would fail in numpy's generator, local.folds=1 in scikit-learn, after both models
    ran over the dev set; the checkpoint here does not exist, so the check ran before it loaded."""
    bad = [
        "seed=-3",
        "local.folds=1",
        "data.dev_examples=0",
        "directions.matrices=some",
        "outliers.search=fast",
        "verdict.outlier_survival=1.5",
    ]
    cfg = compose_analyze_config([f"ckpt_path={tmp_path / 'missing.ckpt'}", *bad], tmp_path)
    with pytest.raises(IsotuneError) as refused:
        analyze(cfg)
    header, *lines = str(refused.value).splitlines()
    assert header.startswith("Invalid config values; set each on the command line (key=value)")
    assert lines == [
        f"  seed=-3: must be {SEED_RANGE}",
        "  data.dev_examples=0: must be null (all of it) or an integer >= 1",
        "  directions.matrices='some': must be one of ['adapted', 'all']",
        "  local.folds=1: must be an integer >= 2",
        "  outliers.search='fast': must be one of ['exact', 'grid']",
        "  verdict.outlier_survival=1.5: must be a number in [0, 1]",
    ]


def test_the_analysis_defaults_and_the_documented_settings_pass_the_check(tmp_path):
    for overrides in ([], ["data.dev_examples=null", "enhance.abtt_components=0", "seed=7"]):
        check_analyze_config(compose_analyze_config(overrides, tmp_path))


@pytest.mark.slow
def test_a_checkpoint_it_cannot_read_names_a_fix_that_works_for_analyze(
    checkpoint, glue_dir, tmp_path
):
    """analyze.py has no resume= and needs a ckpt_path: its messages say which one."""
    empty, run_folder = tmp_path / "empty.ckpt", checkpoint.parent.parent
    empty.write_bytes(b"")
    messages = []
    for path in (empty, run_folder):
        cfg = compose_analyze_config([f"ckpt_path={path}", f"paths.glue_dir={glue_dir}"], tmp_path)
        with pytest.raises(IsotuneError) as refused:
            analyze(cfg)
        messages.append(str(refused.value))
    assert messages[0].endswith(f"Fix: {FIX_KEPT_MODEL}.") and "resume" not in messages[0]
    assert messages[1].startswith(f"ckpt_path={run_folder} is a folder, not a checkpoint file.")
    fix = messages[1].split("Fix: ")[1].split(" or ")[0].rstrip(".")  # the first it names
    overrides = [fix, f"paths.glue_dir={glue_dir}", "data.dev_examples=16", *SMALL]
    summary = analyze(compose_analyze_config(overrides, tmp_path / "fixed"))
    assert Path(summary["checkpoint"]).parent == checkpoint.parent


@pytest.mark.slow
def test_missing_glue_file_is_one_clear_error(checkpoint, tmp_path):
    overrides = [f"ckpt_path={checkpoint}", f"paths.glue_dir={tmp_path}"]
    cfg = compose_analyze_config(overrides, tmp_path)
    with pytest.raises(IsotuneError, match=rf"GLUE_DIR={tmp_path} has no RTE/dev.tsv"):
        analyze(cfg)
