"""Failed runs told from worse ones: the trivial predictor per metric, the verdict in results.json
and the console, its counts and separate statistics in the aggregate, and the figures' markers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from matplotlib.collections import PathCollection
from torchmetrics import PearsonCorrCoef

from isotune.data import GLUEDataModule
from isotune.data.metrics import build_metrics, compute_scores
from isotune.model.encoders import load_tokenizer
from isotune.sweeps import aggregate
from isotune.sweeps.figures import FAILED_LABEL, scores_data, scores_figure
from isotune.sweeps.summary import summarize_sweep
from isotune.training.recording import scored_examples
from isotune.training.run import train
from isotune.training.trivial import TrivialScore, learned, trivial_score
from tests.conftest import write_glue_dir
from tests.helpers.config_checks import problems
from tests.helpers.fake_runs import completed, write_multirun, write_run
from tests.helpers.tasks import load_task


def test_the_majority_class_scores_its_share_and_its_f1_only_when_positive():
    rte = trivial_score(load_task("rte"), [0] * 5 + [1] * 7)
    assert rte == TrivialScore("majority class (not_entailment)", "accuracy", pytest.approx(7 / 12))
    # MRPC is judged by F1 of the positive class: 0 when the majority is negative ...
    assert trivial_score(load_task("mrpc"), [0] * 7 + [1] * 5).score == 0.0
    # ... and 2p / (1 + p) for a positive share p: precision p, recall 1.
    p = 7 / 12
    assert trivial_score(load_task("mrpc"), [1] * 7 + [0] * 5).score == pytest.approx(
        2 * p / (1 + p)
    )
    tie = trivial_score(load_task("rte"), [1, 0, 1, 0])
    assert tie.predictor == "majority class (entailment)"  # a tie: the lower class id


def test_a_constant_scores_0_correlation_on_stsb():
    stsb = trivial_score(load_task("stsb"), [0.5, 1.0, 4.5, 2.0])
    assert (stsb.metric, stsb.score) == ("pearson", 0.0)  # undefined (NaN) counts as 0
    assert stsb.predictor == "mean of the dev labels (2)"


def test_a_constant_scores_exactly_0_correlation_where_float_noise_gave_a_tiny_one():
    """Issue 70 item 6: the running mean of 1,500 copies of a mean label is not quite that label,
    and torchmetrics scored the constant from the noise (7.9e-08 here, -1.65e-07 on a dev set);
    the docs promise 0. A collapsed run, scored batch by batch, scores 0 too; a prediction that
    varies scores as torchmetrics scores it."""
    labels = torch.tensor([(i * 0.37) % 5 for i in range(1500)])
    assert trivial_score(load_task("stsb"), labels).score == 0.0
    collapsed = build_metrics(["pearson", "spearmanr"], 1)
    for batch in labels.split(64):
        collapsed.update(torch.full_like(batch, 2.49), batch)
    assert compute_scores(collapsed) == {"pearson": 0.0, "spearmanr": 0.0, "combined_score": 0.0}
    varied, reference = build_metrics(["pearson"], 1), PearsonCorrCoef()
    for metric in (varied, reference):
        metric.update(labels + torch.sin(labels), labels)
    assert compute_scores(varied)["pearson"] == float(reference.compute())


def test_a_collapsed_cola_run_is_not_above_its_trivial_predictor():
    """Matthews correlation of a constant is 0/0, scored 0 as scikit-learn does: a run that
    predicts the majority class everywhere, scored batch by batch as validation scores it, is
    not above the trivial predictor."""
    labels = torch.tensor([1] * 30 + [0] * 13)
    trivial = trivial_score(load_task("cola"), labels)
    metric = build_metrics(["matthews_correlation"], 2)
    for batch in labels.split(16):
        metric.update(torch.ones_like(batch), batch)
    collapsed = compute_scores(metric)
    assert trivial.score == collapsed["matthews_correlation"] == 0.0
    assert learned(collapsed, trivial, margin=0.0) is False


def test_learned_means_above_the_trivial_score_by_more_than_the_margin():
    trivial = TrivialScore("majority class (not_entailment)", "accuracy", 0.527)
    assert learned({"accuracy": 0.527}, trivial, 0.0) is False  # Mosbach et al.: not above
    assert learned({"accuracy": 0.53}, trivial, 0.0) is True
    assert learned({"accuracy": 0.53}, trivial, 0.01) is False
    assert learned({"accuracy": float("nan")}, trivial, 0.0) is False
    assert learned({}, trivial, 0.0) is None  # no epoch finished
    assert learned({"accuracy": 1.0}, trivial, 0.99) is False  # the widest margin: in [0, 1)
    for margin in (-1, 1, 2.0):
        with pytest.raises(ValueError, match=rf"^failure\.margin={margin}: must be a number in"):
            learned({"accuracy": 0.6}, trivial, margin)


MARGIN_RANGE = (
    "must be a number in [0, 1), in the metric's units (0.01 is one point; no score beats the "
    "trivial one by 1 or more, so every run would read FAILED TO LEARN)"
)


@pytest.mark.parametrize(
    ("margin", "meant"),
    [
        ("2.0", "; 2 looks like points: failure.margin=0.02"),
        ("1", "; 1 looks like points: failure.margin=0.01"),
        ("50", "; 50 looks like points: failure.margin=0.5"),
        ("-0.1", ""),
        ("1000", ""),
        ("nan", ""),
    ],
)
def test_a_margin_outside_0_to_1_is_refused_with_the_value_meant_where_it_looks_like_points(
    margin, meant
):
    (line,) = problems(f"failure.margin={margin}")
    assert line == f"  failure.margin={margin}: {MARGIN_RANGE}{meant}"


def test_the_margin_and_the_seeds_are_checked_before_a_run_starts():
    seeds = "must be an integer from 0 to 2**32 - 1 = 4294967295 (the seeds numpy takes)"
    assert problems("failure.margin=-0.1", "seed_init=abc", "seed_data=1.5") == [
        f"  failure.margin=-0.1: {MARGIN_RANGE}",
        f"  seed_init='abc': {seeds} (default: seed)",
        f"  seed_data=1.5: {seeds} (default: seed)",
    ]
    assert problems("seed=abc") == [f"  seed='abc': {seeds}"]  # once, not thrice


def verdict(result: dict, score: float, learned_: bool | None) -> dict:
    """A completed fake run judged against a majority class of 0.53 (no verdict: None)."""
    if learned_ is None:
        return result  # written before runs recorded a verdict
    trivial = {"predictor": "majority class (not_entailment)", "metric": "accuracy", "score": 0.53}
    return {**result, "trivial": trivial, "margin": 0.0, "learned": learned_}


# (norm, seed): (score, learned). isobn: one of three failed; whitening: all failed;
# batchnorm: older runs without a verdict.
FAKE = {
    ("none", 1): (0.57, True),
    ("none", 2): (0.59, True),
    ("none", 3): (0.55, True),
    ("isobn", 1): (0.60, True),
    ("isobn", 2): (0.62, True),
    ("isobn", 3): (0.53, False),
    ("whitening", 1): (0.53, False),
    ("whitening", 2): (0.53, False),
    ("whitening", 3): (0.52, False),
    ("batchnorm", 1): (0.58, None),
    ("batchnorm", 2): (0.60, None),
    ("batchnorm", 3): (0.56, None),
}


@pytest.fixture
def judged_sweep(tmp_path) -> Path:
    for (norm, seed), (score, learned_) in FAKE.items():
        result = verdict(completed("minilm", norm, "rte", seed, score), score, learned_)
        write_run(tmp_path / f"{norm}-{seed}", [f"norm={norm}", f"seed={seed}"], result)
    return tmp_path


def test_the_aggregate_counts_failed_runs_and_compares_the_runs_that_learned(judged_sweep):
    result = aggregate.aggregate([judged_sweep])
    counts = result.failures.set_index("configuration")
    assert counts.loc["norm=isobn", ["n", "failed", "unknown"]].tolist() == [3, 1, 0]
    assert counts.loc["norm=whitening", ["n", "failed", "unknown"]].tolist() == [3, 3, 0]
    assert counts.loc["norm=batchnorm", ["n", "failed", "unknown"]].tolist() == [3, 0, 3]
    summary = result.summary.set_index("configuration")
    # Over all runs, and beside it over the runs that learned (unknown ones kept).
    assert summary.loc["norm=isobn", "median"] == pytest.approx(60.0)
    assert summary.loc["norm=isobn", "median_learned"] == pytest.approx(61.0)
    assert summary.loc["norm=isobn", "n_learned"] == 2
    assert summary.loc["norm=whitening", "n_learned"] == 0
    assert summary.loc["norm=batchnorm", "n_learned"] == 3
    paired = result.paired.set_index("configuration")
    learned_only = result.paired_learned.set_index("configuration")
    assert paired.loc["norm=isobn", "n"] == 3 and learned_only.loc["norm=isobn", "n"] == 2
    assert learned_only.loc["norm=isobn", "median_difference"] == pytest.approx(3.0)  # 3, 3
    # Every whitening run failed: over all runs the difference stands with a note; over the runs
    # that learned there is none, and the row says why.
    assert paired.loc["norm=whitening", "note"].startswith("All 3 runs of the configuration")
    assert learned_only.loc["norm=whitening", "n"] == 0
    assert learned_only.loc["norm=whitening", "median_difference"] is None
    assert learned_only.loc["norm=whitening", "note"] == (
        "All 3 runs of the configuration failed to learn: no difference."
    )
    report = result.results()
    assert "60.00 ± 4.73 (n=3, 1 failed)" in report
    assert "## Results over the runs that learned" in report and "all 3 failed" in report


def test_the_sweep_report_and_its_figure_mark_failed_runs(judged_sweep, tmp_path):
    assert aggregate.main([str(judged_sweep), "--out", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "sweep_report.md").read_text()
    assert "| norm=whitening | rte | 3 of 3 (all) |" in report
    assert "| norm=batchnorm | rte | 0 of 3; 3 without a verdict (older runs) |" in report
    assert "runs are paired by `seed`" in report
    scores = aggregate.aggregate([judged_sweep]).scores
    figure = scores_figure(scores_data(scores[scores["task"] == "rte"]), "rte", "accuracy")
    axis = figure.axes[0]
    dots = [c for c in axis.collections if isinstance(c, PathCollection)]  # not the median bars
    hollow = [c for c in dots if len(c.get_facecolors()) == 0]
    assert sum(len(c.get_offsets()) for c in hollow) == 4  # isobn's seed 3, whitening's three
    assert FAILED_LABEL in axis.get_legend_handles_labels()[1]


@pytest.mark.slow
def test_a_run_that_cannot_learn_is_marked_failed_in_results_json_and_the_aggregate(
    train_config, tmp_path, caplog
):
    """A learning rate too small to move the tiny model, on a dev set of 22 of 24 one class: the
    best epoch cannot be above the majority class."""
    glue = write_glue_dir(tmp_path / "glue")
    dev = (glue / "RTE" / "dev.tsv").read_text().splitlines()
    rows = [row.split("\t") for row in dev[1:]]
    labels = ["entailment" if int(i) % 12 == 0 else "not_entailment" for i, *_ in rows]
    lines = [dev[0]] + [
        "\t".join([*row[:-1], label]) for row, label in zip(rows, labels, strict=True)
    ]
    (glue / "RTE" / "dev.tsv").write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    caplog.set_level("INFO", logger="isotune.training.run")
    results = train(
        train_config("optim.lr=1e-12", f"paths.glue_dir={glue}", "seed=3", output_dir=run_dir)
    )
    assert json.loads((run_dir / "results.json").read_text()) == results
    assert results["trivial"] == {
        "predictor": "majority class (not_entailment)",
        "metric": "accuracy",
        "score": pytest.approx(22 / 24),
    }
    assert results["margin"] == 0.0 and results["learned"] is False
    assert (results["seed"], results["seed_init"], results["seed_data"]) == (3, 3, 3)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Best dev")]
    assert line.endswith("majority class (not_entailment): 0.9167; FAILED TO LEARN (margin 0)")
    result = aggregate.aggregate([run_dir])
    assert result.failures[["n", "failed"]].values.tolist() == [[1, 1]]
    assert "(n=1, 1 failed)" in result.results() and "all 1 failed" in result.results()


def test_a_sweep_ends_saying_how_many_of_its_runs_failed_to_learn(tmp_path):
    write_multirun(tmp_path, ["seed=1,2"])
    for job, (seed, learned_) in enumerate(((1, True), (2, False))):
        result = verdict(completed("minilm", "none", "rte", seed, 0.6), 0.6, learned_)
        write_run(tmp_path / str(job), [f"seed={seed}"], result)
    text = summarize_sweep(tmp_path).text
    assert text.splitlines()[1:-1] == [  # the last line: the disk the sweep folder uses
        "1 of the 2 completed runs failed to learn (not above their dev set's trivial "
        f"predictor); the aggregate sets them apart: python -m isotune.aggregate {tmp_path}"
    ]


@pytest.mark.slow
def test_a_run_validating_on_part_of_dev_is_judged_against_the_majority_of_that_part(
    train_config, tmp_path
):
    """debug=limit scores the 2 longest batches of dev: here its 8 longest examples, all
    entailment, though dev's majority (16 of 24) is not_entailment. The trivial predictor is of
    those 8 (accuracy 1: no run is above it), not of all 24 (0.667, which a constant
    entailment prediction on the 8 would beat and read "learned")."""
    glue = write_glue_dir(tmp_path / "glue")
    dev = (glue / "RTE" / "dev.tsv").read_text().splitlines()
    long = " ".join(["the cat sat on the mat"] * 5)
    lines = [dev[0]]
    for row in (line.split("\t") for line in dev[1:]):
        entailment = int(row[0]) % 3 == 0
        first = f"{long} {row[1]}" if entailment else row[1]
        label = "entailment" if entailment else "not_entailment"
        lines.append("\t".join([row[0], first, row[2], label]))
    (glue / "RTE" / "dev.tsv").write_text("\n".join(lines) + "\n")
    cfg = train_config(
        "debug=limit", "trainer.max_epochs=1", "data.eval_batch_size=4", f"paths.glue_dir={glue}"
    )
    results = train(cfg)
    assert results["trivial"] == {
        "predictor": "majority class (entailment)",
        "metric": "accuracy",
        "score": 1.0,
    }
    assert results["learned"] is False
    assert results["dev_examples"] == {"scored": 8, "of": 24}


def test_the_scored_examples_are_the_batches_lightnings_limit_keeps_on_every_process(
    tiny_bert, glue_dir
):
    """Validation's batches are dev sorted by length, 4 examples each here (6 batches); a limit
    keeps the first of them (an int: that many; a fraction: that share), on each process of its
    own share (dealt round-robin)."""
    task = load_task("rte")
    datamodule = GLUEDataModule(
        task, load_tokenizer(str(tiny_bert)), glue_dir=str(glue_dir), eval_batch_size=4
    )
    lengths = datamodule.dataset(task.primary_split).lengths
    longest = sorted(range(24), key=lambda i: -lengths[i])  # ties in index order, as validation's

    def scored(limit: int | float, processes: int = 1) -> list[int]:
        trainer = SimpleNamespace(limit_val_batches=limit, world_size=processes)
        return scored_examples(datamodule, task.primary_split, trainer)

    assert scored(1.0) == list(range(24))  # the default: all of dev
    assert scored(2) == sorted(longest[:8])  # debug=limit
    assert scored(0.5) == sorted(longest[:12])  # 3 of 6 batches
    assert scored(0.4) == sorted(longest[:8])  # 2.4 batches: 2
    assert scored(1, processes=2) == sorted(longest[:8])  # each process its first batch
