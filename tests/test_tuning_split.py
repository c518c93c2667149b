"""Issue 53 item 3: data that tunes apart from data that reports. A tuning split carved from train
(stratified, its own seed, the dev set's size by default), the tuning runs of a search or study
evaluating on it and the report runs on dev, each record saying which."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from hydra_plugins.isotune_launcher._hydra_search import check_tuning_split
from isotune.data import GLUEDataModule, load_split
from isotune.data.reading import TaskSplits
from isotune.data.tuning_split import (
    REGRESSION_BINS,
    RULE_CHANGE,
    carve_tuning_split,
    split_size,
    tuning_split_of,
)
from isotune.errors import IsotuneError
from isotune.model.encoders import load_tokenizer
from isotune.training.run import train
from tests.conftest import compose_train_config
from tests.helpers.searches import SMALL, FakeLauncher, make_search, weight_score
from tests.helpers.studies import SMALL_STUDY, RecordingLauncher, refused_study, study_sweeper
from tests.helpers.tasks import load_task

LABELS = [0] * 60 + [1] * 30 + [2] * 10  # unbalanced, so that stratification shows
SHARED_GLUE = os.environ.get("GLUE_DIR")


def split_groups(texts, split) -> list[list[int]]:
    """The groups of identical ``texts`` that ``split`` puts on both sides."""
    groups: dict = {}
    for i, text in enumerate(texts):
        groups.setdefault(text, []).append(i)
    held = set(split.held)
    return [g for g in groups.values() if 0 < sum(i in held for i in g) < len(g)]


def test_the_split_is_stratified_disjoint_deterministic_and_its_seed_is_its_own():
    split = carve_tuning_split(LABELS, 20, seed=0, regression=False)
    assert len(split.held) == 20 and len(split.kept) == 80
    assert set(split.held).isdisjoint(split.kept)
    assert sorted([*split.held, *split.kept]) == list(range(100))
    assert Counter(LABELS[i] for i in split.held) == {0: 12, 1: 6, 2: 2}  # train's shares
    assert carve_tuning_split(LABELS, 20, seed=0, regression=False) == split
    other = carve_tuning_split(LABELS, 20, seed=1, regression=False)
    assert other.held != split.held and other.sha256 != split.sha256
    assert split.describe() == f"tuning split of train (n=20, seed 0, sha256 {split.sha256})"


def test_identical_examples_stay_on_one_side_of_the_split():
    # a made-up table of 40: 8 pairs of identical texts (0 and 30, ..., 7 and 37) and a triple
    # (10, 38, 39) whose labels differ; each seed draws 10 with no group on both sides
    texts = [f"text {i}" for i in range(40)]
    for i in range(8):
        texts[30 + i] = texts[i]
    texts[38] = texts[39] = texts[10]
    labels = [i % 2 for i in range(40)]
    for seed in range(20):
        split = carve_tuning_split(labels, 10, seed, False, texts=texts)
        assert split_groups(texts, split) == [], seed
        assert len(split.held) == 10 and set(split.held).isdisjoint(split.kept)
    # without duplicates the split is drawn as before groups were kept together
    distinct = [f"premise {i}" for i in range(100)]
    assert carve_tuning_split(LABELS, 20, 0, False, texts=distinct) == carve_tuning_split(
        LABELS, 20, 0, False
    )


@pytest.mark.skipif(not SHARED_GLUE, reason="GLUE_DIR is not set (the real GLUE files)")
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_rtes_duplicates_stay_on_one_side_of_its_tuning_split(seed):
    # RTE's train holds rows 459 and 2241, and 420 and 526, twice: split apart at seeds 0, 1, 3
    task = load_task("rte")
    splits = TaskSplits(task, SHARED_GLUE)
    texts = [tuple(example[field] for field in task.text_fields) for example in splits["train"]]
    split = tuning_split_of(splits, None, seed)
    assert split_groups(texts, split) == []
    assert len(split.held) == 277  # the dev set's size, each duplicate pair on one side


def test_a_search_tuned_on_a_split_of_the_older_rule_is_not_continued(tmp_path, glue_dir):
    job = compose_train_config(["task=rte"])
    task = load_task("rte")
    split = tuning_split_of(TaskSplits(task, glue_dir), None, 0)
    run = tmp_path / "trial-0" / "seed-1" / "results.json"
    run.parent.mkdir(parents=True)
    older = f"tuning split of train (n={len(split.held)}, seed 0, sha256 {'0' * 64})"
    for evaluated_on in (split.describe(), "dev", older.replace("seed 0", "seed 7")):
        run.write_text(json.dumps({"status": "completed", "data": {"evaluated_on": evaluated_on}}))
        check_tuning_split(job, ["data.tuning_split=true"], glue_dir, tmp_path)  # continues
    run.write_text(json.dumps({"status": "completed", "data": {"evaluated_on": older}}))
    with pytest.raises(IsotuneError, match="Fix: start the search anew") as refused:
        check_tuning_split(job, ["data.tuning_split=true"], glue_dir, tmp_path)
    message = str(refused.value)
    assert str(run) in message and "0" * 64 in message and split.sha256 in message
    assert RULE_CHANGE in message and "git checkout <commit>" in message


def test_a_regressions_split_holds_each_quantile_bin_in_proportion():
    scores = np.random.default_rng(3).uniform(0, 5, size=103).tolist()
    split = carve_tuning_split(scores, 21, seed=0, regression=True)
    edges = np.quantile(scores, np.linspace(0, 1, REGRESSION_BINS + 1))
    bins = np.clip(np.searchsorted(edges, [scores[i] for i in split.held], "right") - 1, 0, 4)
    assert sorted(Counter(bins.tolist()).values()) in ([4, 4, 4, 4, 5], [4, 4, 4, 5, 4])
    assert len(split.held) == 21 and set(split.held).isdisjoint(split.kept)


@pytest.mark.parametrize(("size", "expected"), [(None, 24), (10, 10), (0.25, 25), (30.0, 30)])
def test_the_size_is_the_dev_sets_a_count_or_a_fraction_of_train(size, expected):
    assert split_size(size, train=100, dev=24) == expected


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (100, "A tuning split of 100 examples (data.tuning_split_size=100) leaves nothing"),
        (None, "A tuning split of 100 examples (the dev set's size) leaves nothing"),
        (0, "data.tuning_split_size=0 is no size of a tuning split"),
        (2.5, "data.tuning_split_size=2.5 is no size of a tuning split"),
    ],
)
def test_a_split_as_large_as_train_or_of_no_size_is_refused(size, message):
    with pytest.raises(IsotuneError, match="Fix:") as refused:
        split_size(size, train=100, dev=100)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("size", "side"), [(5, "missing from the tuning split"), (6, "missing from the remaining")]
)
def test_a_class_missing_from_the_split_or_from_the_remaining_train_is_refused(size, side):
    with pytest.raises(IsotuneError, match=side) as refused:
        carve_tuning_split([0] * 9 + [1], size, 0, False, names=["no", "yes"])
    assert "Class 'yes' (1 of the train examples)" in str(refused.value)
    assert "data.tuning_split=false" in str(refused.value)


def test_a_run_trains_without_the_split_and_evaluates_on_it_whatever_its_seed(glue_dir, tiny_bert):
    task, tokenizer = load_task("rte"), load_tokenizer(str(tiny_bert))
    train_examples = load_split(task, "train", glue_dir)

    def module(seed: int, **options) -> GLUEDataModule:
        datamodule = GLUEDataModule(task, tokenizer, glue_dir=glue_dir, seed=seed, **options)
        datamodule.setup("fit")
        return datamodule

    one, other = module(1, tuning_split=True), module(2, tuning_split=True)
    assert one.split == other.split  # the run's seed draws batches, not the split
    assert len(one.dataset("validation")) == len(load_split(task, "validation", glue_dir)) == 24
    plain = module(1)
    assert plain.data_record() == {
        "trained_on": "train",
        "evaluated_on": "dev",
        "classes": ["entailment", "not_entailment"],
        "label_ids": {"entailment": 0, "not_entailment": 1},
    }
    whole = [feature["input_ids"] for feature in plain.dataset("train").features]
    assert len(whole) == len(train_examples)
    held = [feature["input_ids"] for feature in one.dataset("validation").features]
    kept = [feature["input_ids"] for feature in one.dataset("train").features]
    assert held == [whole[i] for i in one.split.held]
    assert kept == [whole[i] for i in one.split.kept] and len(kept) == len(whole) - 24
    assert one.data_record()["evaluated_on"] == one.split.describe()


def test_a_split_of_own_data_without_a_train_file_is_refused(tmp_path):
    job = compose_train_config(["task=files", f"data.validation_file={tmp_path / 'dev.csv'}"])
    with pytest.raises(IsotuneError, match=r"data\.train_file, which is not set"):
        check_tuning_split(job, ["data.tuning_split=true"], None, tmp_path)


class DataRecordingLauncher(FakeLauncher):
    """The fake launcher of test_search.py, each run's results.json saying what it evaluated on
    as a training run's does: a tuning split when its overrides ask for one, else dev."""

    def __call__(self, jobs: list[list[str]]) -> None:
        super().__call__(jobs)
        for overrides in jobs:
            values = dict(o.split("=", 1) for o in overrides)
            path = self.folder / values["hydra.sweep.subdir"] / "results.json"
            record = json.loads(path.read_text())
            split = values.get("data.tuning_split") == "true"
            record["data"] = {"evaluated_on": "tuning split of train (n=24)" if split else "dev"}
            path.write_text(json.dumps(record))


def test_a_search_tunes_on_the_split_and_reports_on_dev(tmp_path):
    launch = DataRecordingLauncher(tmp_path, weight_score)
    make_search(tmp_path, launch, n_trials=2, tune_on="train_split", **SMALL).run()
    assert any("report/baseline" in job[-1] for job in launch.jobs)
    for job in launch.jobs:
        report = dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"].startswith("report")
        assert ("data.tuning_split=true" in job) is not report, job
        # issue 60 item 5: dev only reports, so no report run picks its epoch on it
        assert ("select_epoch=last" in job) is report, job
    text = (tmp_path / "search_report.md").read_text()
    assert "Trials chosen on: tuning split of train (n=24). Held-out runs report on: dev." in text


def test_tune_on_names_its_choices_and_a_split_for_every_run_is_refused(tmp_path):
    with pytest.raises(IsotuneError, match=r"hydra\.sweeper\.tune_on=train_set is not one of"):
        make_search(tmp_path, FakeLauncher(tmp_path, weight_score), tune_on="train_set").run()
    job = compose_train_config(["data.tuning_split=true"])
    with pytest.raises(IsotuneError, match=r"Fix: drop it and type hydra\.sweeper\.tune_on"):
        check_tuning_split(job, [], None, tmp_path)


class StudyDataLauncher(RecordingLauncher):
    """The study tests' launcher, each run saying what it evaluated on as a training run does."""

    def launch(self, jobs: list[list[str]], initial_job_idx: int) -> None:
        super().launch(jobs, initial_job_idx)
        for overrides in jobs:
            values = dict(o.split("=", 1) for o in overrides)
            path = self.sweep_dir / values["hydra.sweep.subdir"] / "results.json"
            record = json.loads(path.read_text())
            split = values.get("data.tuning_split") == "true"
            record["data"] = {"evaluated_on": "tuning split of train (n=24)" if split else "dev"}
            path.write_text(json.dumps(record))


def test_a_studys_tuning_jobs_get_the_split_and_its_report_jobs_do_not(tmp_path, glue_dir):
    typed = [
        *SMALL_STUDY,
        "hydra.sweeper.arms=[none,isobn]",
        "hydra.sweeper.report_seeds=[3]",
        "hydra.sweeper.tune_on=train_split",
    ]
    sweeper, typed = study_sweeper(tmp_path, glue_dir, typed)
    study = tmp_path / "study" / "isotropy_minilm"
    sweeper.launcher = StudyDataLauncher(study)
    sweeper.sweep([arg for arg in typed if not arg.lstrip("+").startswith("hydra.")])
    assert len(sweeper.launcher.launched) == 2 * (1 + 1)
    for folder in sweeper.launcher.launched:
        overrides = json.loads((study / folder / "results.json").read_text())["overrides"]
        assert ("data.tuning_split=true" in overrides) is ("/report/" not in folder), folder
        assert ("select_epoch=last" in overrides) is ("/report/" in folder), folder
    report = (study / "study_report.md").read_text()
    assert "Trials chosen on: tuning split of train (n=24). Held-out runs report on: dev." in report


def test_a_studys_split_as_large_as_train_is_refused_before_any_job(tmp_path, glue_dir):
    typed = [*SMALL_STUDY, "hydra.sweeper.tune_on=train_split", "data.tuning_split_size=64"]
    logged = refused_study(tmp_path, glue_dir, typed)
    assert "A tuning split of 64 examples (data.tuning_split_size=64) leaves nothing" in logged


@pytest.mark.slow
def test_a_tiny_run_with_the_split_records_what_it_trained_and_evaluated_on(train_config, tmp_path):
    results = train(train_config("data.tuning_split=true", "data.tuning_split_size=0.25"))
    assert results["status"] == "completed"
    recorded = json.loads(Path(tmp_path / "results.json").read_text())["data"]
    assert recorded["trained_on"] == "train without its tuning split (n=48)"
    assert recorded["evaluated_on"].startswith("tuning split of train (n=16, seed 0, sha256 ")


def test_a_search_tuned_on_dev_reports_each_runs_best_epoch(tmp_path):
    """Issue 60 item 5: only a search whose dev set merely reports has its last epochs reported."""
    launch = FakeLauncher(tmp_path, weight_score)
    make_search(tmp_path, launch, n_trials=1, **SMALL).run()
    assert any(o.startswith("hydra.sweep.subdir=report") for job in launch.jobs for o in job)
    assert not [job for job in launch.jobs if any("select_epoch" in o for o in job)]


@pytest.mark.slow
def test_a_tiny_run_selecting_its_last_epoch_reports_and_keeps_it(train_config, tmp_path):
    """Issue 60 item 5: select_epoch=last reports the last epoch, trains every epoch (no early
    stopping) and keeps that epoch's model as best.ckpt."""
    # early stopping as configured would stop after epoch 2: no score rises by 2 over epoch 1's
    stopping = ["callbacks.early_stopping.patience=1", "+callbacks.early_stopping.min_delta=2"]
    cfg = train_config("select_epoch=last", "trainer.max_epochs=3", *stopping)
    results = train(cfg)
    assert results["status"] == "completed"
    assert [entry["epoch"] for entry in results["history"]] == [1, 2, 3]
    assert results["best_epoch"] == 3 and results["best"] == results["final"]
    kept = torch.load(results["best_checkpoint"], map_location="cpu", weights_only=False)
    assert kept["epoch"] == 2  # Lightning counts from 0: the third epoch's model


def test_a_search_tuned_on_dev_is_not_continued_on_the_split(tmp_path):
    """tune_on ranks the trials: a trial chosen on dev and one on the split are not one search."""
    make_search(tmp_path, FakeLauncher(tmp_path, weight_score), n_trials=1, **SMALL).run()
    again = FakeLauncher(tmp_path, weight_score)
    with pytest.raises(IsotuneError, match="tune_on: the study's dev, this command's train_split"):
        make_search(tmp_path, again, n_trials=1, tune_on="train_split", **SMALL).run()
    assert not again.jobs
