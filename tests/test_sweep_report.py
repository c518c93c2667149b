"""The sweep report from two synthetic sweep folders with answers worked out by hand: paired
statistics per configuration and task, the across-task summary, isotropy against the score, the
figures and the data behind them, duplicates, failed and running runs, W&B offline."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from matplotlib import image

from isotune.sweeps import aggregate, comparisons
from isotune.sweeps.comparisons import Configuration
from isotune.sweeps.figures import POOLED, isotropy_vs_score_data, scores_data
from isotune.sweeps.report import status_markdown
from isotune.sweeps.runs import SEARCH_SWEEPER, Run, Sweep
from tests.helpers.fake_runs import write_run

T_975_4DF = 2.7764451051977987  # Student's t table, 4 degrees of freedom
BASELINE = {"rte": [80, 82, 81, 79, 83], "mrpc": [70, 75, 72, 71, 74]}  # norm=none, seeds 1-5
DIFFERENCES = {  # configuration - baseline, percentage points, seeds 1-5 (None: no completed run)
    ("isobn", "rte"): [1, 2, 3, 4, 5],  # better on every seed by varied margins
    ("batchnorm", "rte"): [0, 0, 0, 0, 0],  # equal on every seed: degenerate
    ("isobn", "mrpc"): [2, -1, 4, -3, 5],  # straddles 0
    ("batchnorm", "mrpc"): [1, 2, 2, None, None],  # seed 4 still running, seed 5 failed
}
PRETRAINED = {"log_iw": -6.0, "isoscore": 0.05, "avg_cosine": 0.6, "n_dominant": 3.0}
STALE_SCORE = 0.99  # an older duplicate of isobn/rte/seed 1: the later run replaces it


def score(norm: str, task: str, seed: int) -> float | None:
    """Dev accuracy in percent."""
    base = BASELINE[task][seed - 1]
    return base if norm == "none" else _plus(base, DIFFERENCES[norm, task][seed - 1])


def _plus(base: float, difference: float | None) -> float | None:
    return None if difference is None else base + difference


def isotropy(accuracy: float) -> dict:
    """Per-epoch isotropy of the classifier input; at the best epoch (2) IsoScore is a monotone
    function of the score (rho = 1), the other measures are not."""
    best = {
        "log_iw": -accuracy / 50,
        "isoscore": accuracy / 2,
        "avg_cosine": 0.3,
        "n_dominant": 1.0,
    }
    middle = {key: (PRETRAINED[key] + value) / 2 for key, value in best.items()}
    per_epoch = {
        str(epoch): {f"iso/post_norm/{k}": v for k, v in values.items()}
        for epoch, values in enumerate([PRETRAINED, middle, best])
    }
    return {
        "pretrained": per_epoch["0"],
        "best": per_epoch["2"],
        "final": per_epoch["2"],
        "per_epoch": per_epoch,
    }


def result(norm: str, task: str, seed: int, accuracy: float, finished_at: str) -> dict:
    return {
        "status": "completed",
        "error": None,
        "task": task,
        "model": "minilm",
        "norm": norm,
        "seed": seed,
        "primary_metric": "accuracy",
        "best_epoch": 2,
        "best": {"accuracy": accuracy},
        "isotropy": isotropy(accuracy),
        "finished_at": finished_at,
    }


def write_sweep(sweep: Path, task: str) -> None:
    """``python train.py -m task=<task> norm=none,batchnorm,isobn seed=1,2,3,4,5`` as it ends."""
    sweep.mkdir(parents=True)
    config = {
        "hydra": {
            "sweeper": {
                "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                "params": None,
            },
            "overrides": {
                "task": [
                    f"task={task}",
                    "norm=none,batchnorm,isobn",
                    "seed=1,2,3,4,5",
                    "logger=wandb",
                ]
            },
        }
    }
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(config))
    for n, (norm, seed) in enumerate(
        (n, s) for n in ("none", "batchnorm", "isobn") for s in range(1, 6)
    ):
        overrides = [f"task={task}", f"norm={norm}", f"seed={seed}", "logger=wandb"]
        accuracy = score(norm, task, seed)
        if accuracy is not None:
            outcome = result(norm, task, seed, accuracy / 100, "2026-11-30T09:00:00")
        elif seed == 4:
            outcome = {
                "status": "running",
                "error": None,
                "updated_at": "2026-11-30T09:00:00+00:00",
            }
        else:
            outcome = {"status": "failed", "error": "OutOfMemoryError: CUDA out of memory"}
        write_run(sweep / str(n), overrides, outcome)


@pytest.fixture
def sweeps(tmp_path) -> tuple[Path, Path]:
    """Sweep A: rte, whose isobn seed 1 finished first with a stale score; sweep B: mrpc, and the
    later rerun of that rte job in a folder of its own."""
    a, b = tmp_path / "sweep_a", tmp_path / "sweep_b"
    write_sweep(a, "rte")
    stale = result("isobn", "rte", 1, STALE_SCORE, "2026-11-29T09:00:00")
    (a / "10" / "results.json").write_text(json.dumps({**stale, "overrides": []}))
    write_sweep(b, "mrpc")
    rerun = result("isobn", "rte", 1, score("isobn", "rte", 1) / 100, "2026-12-01T09:00:00")
    write_run(b / "rte-again", ["task=rte", "norm=isobn", "seed=1"], rerun)
    return a, b


def paired_row(result: aggregate.Aggregate, norm: str, task: str):
    rows = result.paired[
        (result.paired.configuration == f"norm={norm}") & (result.paired.task == task)
    ]
    (row,) = rows.itertuples(index=False)
    return row


def test_better_on_every_seed_by_varied_margins(sweeps):
    row = paired_row(aggregate.aggregate(sweeps), "isobn", "rte")
    assert (row.baseline, row.n) == ("norm=none", 5)
    assert row.median_difference == pytest.approx(3) and row.mean_difference == pytest.approx(3)
    # differences 1..5: s^2 = (4 + 1 + 0 + 1 + 4) / 4 = 2.5, standard error sqrt(2.5 / 5)
    half_width = T_975_4DF * math.sqrt(0.5)
    assert (row.t_low, row.t_high) == pytest.approx((3 - half_width, 3 + half_width))
    assert row.excludes_zero is True
    assert row.wilcoxon_p == 0.0625  # all five signs alike: 2 of the 2^5 sign patterns
    # t = 3 / sqrt(0.5) = 3 sqrt(2); with 4 df, p = 1 - s (3 - s^2) / 2, s = t / sqrt(4 + t^2)
    # = 3 / sqrt(11): p = 1 - 36 / (11 sqrt(11))
    assert row.ttest_p == pytest.approx(1 - 36 / (11 * math.sqrt(11)), rel=1e-9)
    assert row.bootstrap_low is None  # five pairs: no bootstrap interval


def test_equal_on_every_seed_is_stated_and_never_nan(sweeps, tmp_path):
    result = aggregate.aggregate(sweeps)
    row = paired_row(result, "batchnorm", "rte")
    assert (row.n, row.median_difference, row.t_low, row.t_high) == (5, 0, 0, 0)
    assert row.excludes_zero is False and row.wilcoxon_n == 0
    assert row.note == "Equal to the baseline on all 5 seeds: p = 1 for both tests."
    aggregate.write_outputs(result, tmp_path / "out")
    report = (tmp_path / "out" / "sweep_report.md").read_text()
    line = next(
        line
        for line in report.splitlines()
        if line.startswith("| norm=batchnorm | norm=none | rte |")
    )
    assert "| 5 | +0.00 | +0.00 | [+0.00, +0.00] | 1 | 1 | 1 / 1 |" in line
    assert "Equal to the baseline on all 5 seeds" in line
    assert not re.search(r"\bnan\b", report, re.IGNORECASE)


def test_straddling_zero_and_a_missing_seed(sweeps):
    result = aggregate.aggregate(sweeps)
    straddle = paired_row(result, "isobn", "mrpc")
    assert straddle.t_low < 0 < straddle.t_high and straddle.excludes_zero is False
    assert straddle.mean_difference == pytest.approx(1.4)
    assert straddle.wilcoxon_p == 14 / 32  # worked out in tests/test_statistics.py
    missing = paired_row(result, "batchnorm", "mrpc")
    assert missing.n == 3 and missing.unpaired_seeds == "4 5"
    assert "Seeds without a pair, left out: 4, 5." in missing.note


def test_holm_counts_every_comparison_with_a_pair(sweeps):
    result = aggregate.aggregate(sweeps)
    # Wilcoxon p: isobn/rte 0.0625, batchnorm/mrpc 2 / 2^3 = 0.25, isobn/mrpc 0.4375, and
    # batchnorm/rte equal to its baseline on every seed: p = 1, still one of the 4 questions;
    # times 4, 3, 2, 1 = 0.25, 0.75, 0.875, 1; running maximum 0.25, 0.75, 0.875, 1
    holm = {(r.configuration, r.task): r.wilcoxon_p_holm for r in result.paired.itertuples()}
    assert holm == pytest.approx(
        {
            ("norm=batchnorm", "rte"): 1.0,
            ("norm=isobn", "rte"): 0.25,
            ("norm=batchnorm", "mrpc"): 0.75,
            ("norm=isobn", "mrpc"): 0.875,
        }
    )
    assert set(result.paired["holm_family"]) == {
        "every configuration against its baseline on every task of the folder (4)"
    }
    report = result.sweep_report({})
    assert "Holm-adjusted p over one family, the 4 comparisons (configuration × task)" in report
    assert (
        "With 3 non-zero pairs the smallest two-sided Wilcoxon p is 0.25, so 'not significant' "
        "there is not 'no effect'." in report
    )


def test_across_tasks_counts_the_tasks_beaten(sweeps):
    across = aggregate.aggregate(sweeps).across.set_index("configuration")
    # isobn medians: rte 84 (81 84 84 83 88), mrpc 74 (72 74 76 68 79); none: 81 and 72
    assert across.loc["norm=isobn", "mean_of_medians"] == pytest.approx(79)
    assert across.loc["norm=isobn", "baseline_mean_of_medians"] == pytest.approx(76.5)
    assert across.loc["norm=isobn", "difference"] == pytest.approx(2.5)
    assert across.loc["norm=isobn", ["tasks_better", "tasks_worse", "tasks_equal"]].tolist() == [
        2,
        0,
        0,
    ]
    # batchnorm: rte median difference 0 (equal), mrpc 2 (better)
    assert across.loc[
        "norm=batchnorm", ["tasks_better", "tasks_equal", "tasks_compared"]
    ].tolist() == [1, 1, 2]


def test_two_folders_count_the_latest_of_a_duplicate_and_list_it(sweeps, tmp_path, capsys):
    a, b = sweeps
    out = tmp_path / "combined"
    assert aggregate.main([str(a), str(b), "--out", str(out)]) == 0
    result = aggregate.aggregate(sweeps)
    scores = result.scores.set_index(["configuration", "task", "seed"])["score"]
    assert scores["norm=isobn", "rte", 1] == pytest.approx(81)  # not the stale 99
    assert len(result.scores) == 28  # 2 tasks x 3 norms x 5 seeds, less 2 unfinished
    ((label, runs),) = result.duplicates
    assert label == "norm=isobn task=rte seed=1"
    assert [run.job_dir for run in runs] == [a / "10", b / "rte-again"]
    report = (out / "sweep_report.md").read_text()
    assert f"- norm=isobn task=rte seed=1: {a / '10'}, {b / 'rte-again'}" in report
    assert sorted(p.name for p in out.glob("*.csv")) == [
        "across_tasks.csv", "failed_runs.csv", "isotropy_table.csv", "isotropy_vs_score.csv",
        "paired_statistics.csv", "paired_statistics_learned.csv", "results_table.csv",
    ]  # fmt: skip
    assert not (a / "sweep_report.md").exists()


def test_report_lists_failed_and_running_runs_with_the_rerun_command(sweeps, tmp_path):
    _, b = sweeps
    result = aggregate.aggregate(sweeps)
    aggregate.write_outputs(result, tmp_path)
    report = (tmp_path / "sweep_report.md").read_text()
    assert f"- {b / '9'}: failed: OutOfMemoryError: CUDA out of memory" in report
    assert f"- {b / '8'}: running, last update " in report
    assert f"    python -m isotune.rerun {b}" in report
    assert "28 completed and counted, 1 duplicate(s) not counted, 2 failed or unfinished" in report
    (shared,) = [line for line in report.splitlines() if "Every configuration shares" in line]
    assert "`model=minilm`" in shared and "logger" not in shared  # logger=wandb: bookkeeping


def test_isotropy_against_the_score_is_perfectly_monotone(sweeps):
    correlations = aggregate.aggregate(sweeps).correlations
    isoscore = correlations[correlations.measure == "isoscore"].set_index(["task", "configuration"])
    assert isoscore["rho"].tolist() == pytest.approx([1.0] * len(isoscore))
    assert isoscore.loc[("rte", POOLED), "n"] == 15
    assert isoscore.loc[("rte", "norm=isobn"), "p"] == pytest.approx(2 / 120)  # exact, 5 runs
    assert isoscore.loc[("mrpc", "norm=batchnorm"), "n"] == 3
    constant = correlations[correlations.measure == "avg_cosine"]
    assert constant["rho"].isna().all() and (constant["note"] == "x constant: rho undefined.").all()


def test_figures_are_png_files_drawn_from_the_tables_numbers(sweeps, tmp_path):
    result = aggregate.aggregate(sweeps)
    _, figures, report_path = aggregate.write_outputs(result, tmp_path)
    kinds = ("scores", "isotropy_epochs", "isotropy_vs_score")
    assert sorted(figures) == sorted(f"{kind}_{task}" for kind in kinds for task in ("mrpc", "rte"))
    for path in figures.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _ = image.imread(path).shape
        assert height > 100 and width > 100
        assert f"![{path.stem}]({path.name})" in report_path.read_text()

    medians = scores_data(result.scores).groupby(["configuration", "task"])["median"].first()
    summary = result.summary.set_index(["configuration", "task"])["median"]
    assert medians.to_dict() == pytest.approx(summary.drop(index="avg", level="task").to_dict())

    table = result.isotropy.set_index(["configuration", "task", "measure"])
    curves = result.curves
    assert len(curves) == 2 * 3 * 4 * 3  # tasks x configurations x measures x epochs
    for row in curves[curves.epoch.isin([0, 2])].itertuples(index=False):
        column = "pretrained" if row.epoch == 0 else "finetuned"
        assert row.median == pytest.approx(
            table.loc[(row.configuration, row.task, f"iso/post_norm/{row.measure}"), column]
        )

    points, correlations = isotropy_vs_score_data(result.scores, result.isotropy_runs, ["isoscore"])
    assert points["isotropy"].tolist() == pytest.approx((points["score"] / 200).tolist())
    assert correlations.equals(
        result.correlations[result.correlations.measure == "isoscore"].reset_index(drop=True)
    )


def test_a_configuration_leaves_out_bookkeeping_and_its_baseline_the_changed_axis_options():
    overrides = [
        "task=rte", "seed=2", "norm=isobn", "norm.beta=0.3", "reg=istar", "reg.weight=-1",
        "optim.lr=1e-4", "logger=wandb", "hydra/launcher=gpus", "hydra.launcher.n_jobs=2",
        "paths.glue_dir=/data", "ckpt_path=x", "intervention=istar_less",
    ]  # fmt: skip
    recorded = {**result("isobn", "rte", 2, 0.8, ""), "reg": "istar", "reg_weight": -1.0}
    config = Configuration.of(Run(Path("r/results.json"), {**recorded, "overrides": overrides}))
    axes = ("model", "norm", "reg", "reg_weight")
    assert [config.value(axis) for axis in axes] == ["minilm", "isobn", "istar", "-1.0"]
    assert config.overrides == ("norm.beta=0.3", "optim.lr=1e-4")
    baseline = config.with_values(comparisons.baseline_values())
    assert [baseline.value(axis) for axis in axes] == ["minilm", "none", "none", "0.0"]
    assert baseline.overrides == ("optim.lr=1e-4",)  # norm.beta went with norm=isobn
    assert config.with_values({"norm": "isobn"}) == config
    older = Configuration.of(Run(Path("r/results.json"), result("none", "rte", 2, 0.8, "")))
    assert (older.value("reg"), older.value("reg_weight")) == ("none", "0.0")  # before reg existed


def test_another_baseline_is_chosen_by_its_axis_value(sweeps):
    result = aggregate.aggregate(sweeps, baseline=["norm=batchnorm"])
    pairs = {(r.configuration, r.task): r for r in result.paired.itertuples(index=False)}
    assert {r.baseline for r in pairs.values()} == {"norm=batchnorm"}
    assert sorted(pairs) == [
        ("norm=isobn", "mrpc"), ("norm=isobn", "rte"), ("norm=none", "mrpc"), ("norm=none", "rte"),
    ]  # fmt: skip
    # none against batchnorm on rte: the same scores, so every difference is 0
    assert pairs["norm=none", "rte"].n == 5 and pairs["norm=none", "rte"].wilcoxon_p == 1.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--baseline", "nrom=none"], "--baseline 'nrom=none' is not AXIS=VALUE with one of"),
        (["--measures", "isoscroe"], "--measures isoscroe: no run recorded these"),
    ],
)
def test_a_mistyped_option_is_one_clear_error(sweeps, arguments, message, capsys):
    assert aggregate.main([str(sweeps[0]), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_a_sweep_without_a_completed_run_still_gets_its_report(tmp_path):
    sweep = tmp_path / "sweep"
    write_run(sweep / "0", ["task=rte"], {"status": "failed", "error": "ValueError: bad"})
    write_run(sweep / "1", ["task=mrpc"], {"status": "running", "updated_at": "2026-11-30T09:00"})
    assert aggregate.main([str(sweep)]) == 0
    report = (sweep / "sweep_report.md").read_text()
    assert "No completed runs." in report and "No figures: no completed run." in report
    assert f"- {sweep / '0'}: failed: ValueError: bad" in report
    assert f"- {sweep / '1'}: running, last update " in report


@pytest.mark.slow
def test_wandb_summary_run_offline_holds_the_tables_and_figures(sweeps, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login either
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "out"
    assert (
        aggregate.main([*map(str, sweeps), "--out", str(out), "--wandb", "--wandb-project", "p"])
        == 0
    )
    (record,) = out.glob("wandb/offline-run-*/run-*.wandb")
    data = record.read_bytes()  # protobuf records: strings are stored verbatim
    for expected in (b"sweep_a", b"summary-sweep_a", b"aggregate", b"table/paired_statistics"):
        assert expected in data, expected
    assert b"table/results_table" in data and b"figure/isotropy_vs_score_rte" in data
    (saved,) = out.glob("wandb/offline-run-*/files/sweep_report.md")
    assert saved.read_text() == (out / "sweep_report.md").read_text()


def missing_section(sweepers: list[str]) -> str:
    """The report's "Missing runs" section for sweeps with these sweepers and no job missing."""
    sweeps = [
        Sweep(Path(f"logs/multirun/{i}"), {"hydra": {"sweeper": {"_target_": target}}})
        for i, target in enumerate(sweepers)
    ]
    text = status_markdown([], [], [], sweeps, [], datetime.now(timezone.utc))
    return text.split("## Missing runs (0)\n\n")[1].split("\n\n")[0].strip()


def test_missing_runs_of_a_search_point_at_its_trials_not_at_none():
    """A search's jobs are what its study asked, so none can be counted missing; the section
    says where they are listed instead of "None." above a line that says they are unknown."""
    basic = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
    assert missing_section([basic]) == "None."
    search = missing_section([SEARCH_SWEEPER])
    assert search.startswith("- logs/multirun/0: a search: its jobs are the trials its study")
    assert "trials.csv" in search and "None" not in search
    both = missing_section([SEARCH_SWEEPER, basic]).splitlines()
    assert both[0].startswith("- logs/multirun/0: a search") and both[1:] == [
        "None in the other folders."
    ]
    other = missing_section(["hydra_plugins.hydra_ax_sweeper.ax_sweeper.AxSweeper"])
    assert other.endswith("has no fixed list of jobs")


def test_a_report_made_again_with_nothing_changed_is_left_as_it_was(sweeps, tmp_path):
    """The 'checked <time>' line alone rewrote sweep_report.md, so regenerating a carried
    folder dirtied the checkout (issue 52, item 3)."""
    first = aggregate.aggregate(sweeps, now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    report_path = aggregate.write_outputs(first, tmp_path)[2]
    text, written = report_path.read_text(), report_path.stat().st_mtime_ns
    later = aggregate.aggregate(sweeps, now=datetime(2026, 1, 2, tzinfo=timezone.utc))
    aggregate.write_outputs(later, tmp_path)
    assert report_path.read_text() == text and report_path.stat().st_mtime_ns == written
    assert "(checked 2026-01-01T00:00:00+00:00)" in text
