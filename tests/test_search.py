"""hydra/sweeper=optuna (docs/search.md): the search space, the expected best per budget, and the
search itself, driven in-process on the composed `hparams_search=istar` config with a launcher that
writes each job's results.json as a training run leaves it (scores chosen by the test), so that
trials, runs, FAIL and PRUNED states, the held-out statistics and a continued search are counted
exactly, and the sweep's W&B report of the search folder is read for its held-out report and
figures; the slow tests run `python train.py -m hparams_search=istar` on the tiny model."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import hydra.utils
import numpy as np
import optuna
import pandas as pd
import pytest
import yaml
from hydra._internal.callbacks import Callbacks
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.types import HydraContext
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from scipy import stats

from hydra_plugins.isotune_launcher import _hydra_search
from hydra_plugins.isotune_launcher import _sweep_space as sweep_space
from hydra_plugins.isotune_launcher._hydra_search import AGAIN, check_search_fits, job_overrides
from hydra_plugins.isotune_launcher.optuna_sweeper import OptunaSweeper
from hydra_plugins.isotune_launcher.stopping import stops_with_a_summary
from isotune.dashboard import cli as dashboard
from isotune.errors import IsotuneError
from isotune.model.encoders import parameter_count
from isotune.search import loop
from isotune.search.checks import searched_as_typed
from isotune.search.loop import JobsNotEnded, check_reports_complete, run_batch, run_searches
from isotune.search.optuna_study import trial_sampler
from isotune.search.search import REPORT
from isotune.search.settings import SearchSettings
from isotune.search.space import parse_space
from isotune.sweeps import slurm_jobs
from isotune.sweeps.environment import machine_provenance
from isotune.sweeps.footprint import RunFootprint, sweep_footprint
from isotune.sweeps.rerun import plan_reruns
from isotune.sweeps.slurm_jobs import SlurmJob
from isotune.sweeps.summary import summarize_sweep
from tests.conftest import CONF_DIR, ROOT, compose_train_config
from tests.helpers.cli import run_script, tiny_cli_overrides
from tests.helpers.fake_runs import completed, write_run
from tests.helpers.locks import held_by_another_process
from tests.helpers.searches import SMALL, FakeLauncher, make_search, weight_score


# ---- the search space ----
def test_the_official_grammar_reads_as_optuna_distributions():
    space = parse_space(
        {
            "optim.lr": "tag(log, interval(1e-5, 1e-3))",
            "data.batch_size": "choice(8, 16, 32)",
            "trainer.max_epochs": "range(1, 4)",
            "optim.warmup_ratio": "range(0.0, 0.3, 0.1)",
            "optim.weight_decay": "interval(0.0, 0.1)",
            "data.max_length": "int(interval(64, 256))",
            "reg.weight": "tag(log, signed, interval(0.01, 1))",
            "norm": "isobn",
        },
        ["seed_init=3"],
    )
    assert space.distributions() == {
        "optim.lr": FloatDistribution(1e-5, 1e-3, log=True),
        "data.batch_size": CategoricalDistribution([8, 16, 32]),
        "trainer.max_epochs": IntDistribution(1, 3),  # Hydra's range: the stop is excluded
        "optim.warmup_ratio": FloatDistribution(0.0, 0.2, step=0.1),
        "optim.weight_decay": FloatDistribution(0.0, 0.1),
        "data.max_length": IntDistribution(64, 256),
        "reg.weight": FloatDistribution(0.01, 1, log=True),
        "reg.weight:sign": CategoricalDistribution([-1, 1]),
    }
    assert space.fixed == ("norm=isobn", "seed_init=3")
    overrides = space.overrides({**dict.fromkeys(space.distributions(), 1), "reg.weight": 0.1})
    overrides_by_key = dict(o.split("=", 1) for o in overrides)
    assert overrides_by_key["reg.weight"] == "0.1" and overrides_by_key["norm"] == "isobn"
    signed = space.overrides(
        {**dict.fromkeys(space.distributions(), 1), "reg.weight": 0.1, "reg.weight:sign": -1}
    )
    assert "reg.weight=-0.1" in signed


def test_a_sweep_typed_on_the_command_line_is_searched_and_nested_params_are_dotted_keys():
    space = parse_space(
        {"optim": {"lr": "tag(log, interval(1e-5, 1e-3))"}, "norm": "batchnorm"},
        ["optim.weight_decay=interval(0.0, 0.1)", "norm=isobn"],
    )
    assert space.distributions() == {
        "optim.lr": FloatDistribution(1e-5, 1e-3, log=True),
        "optim.weight_decay": FloatDistribution(0.0, 0.1),
    }
    assert space.fixed == ("norm=isobn",)  # the command line's value replaces the params'


def test_a_space_reads_back_from_the_grammar_it_is_written_in():
    """A study's settings are shown as typed: each text parses to the distribution it shows."""
    params = {
        "optim.lr": "tag(log, interval(1e-05, 0.001))",
        "data.batch_size": "choice(8, 16, 32)",
        "trainer.max_epochs": "range(1, 4)",
        "optim.warmup_ratio": "range(0.0, 0.3, 0.1)",
        "optim.weight_decay": "interval(0, 0.1)",
        "data.max_length": "int(interval(64, 256))",
        "reg.weight": "tag(log, signed, interval(0.01, 1))",
        "reg.zeta": "interval(1.0, 5.0)",
        "norm.group_size": "tag(log, interval(2, 64))",
    }
    space = parse_space(params, [])
    typed = searched_as_typed(space.distributions())
    assert typed["reg.weight"] == "tag(log, signed, interval(0.01, 1))"
    assert typed["optim.lr"] == "tag(log, interval(1e-05, 0.001))"
    assert parse_space(typed, []).distributions() == space.distributions()


@pytest.mark.parametrize(
    ("params", "arguments", "named"),
    [
        ({"optim.lr": "interval(1e-3, 1e-5)"}, [], "not below its high end"),
        ({"optim.lr": "interval(0.1, 0.1)"}, [], "not below its high end"),
        ({"optim.lr": "tag(log, interval(0, 1e-3))"}, [], "a log scale needs a low end above 0"),
        ({"optim.lr": "tag(log, interval(-1, 1))"}, [], "a log scale needs a low end above 0"),
        ({"data.batch_size": "choice()"}, [], "data.batch_size"),
        ({"trainer.max_epochs": "range(3, 3)"}, [], "holds no value"),
        ({"reg.weight": "tag(signed, interval(0.1, 1))"}, [], "goes with a log interval only"),
        ({"reg.weight": "interval(0.1, 1)"}, ["reg.weight=0.5"], "searched"),
    ],
)
def test_a_bad_search_space_is_one_message_naming_the_key(params, arguments, named):
    with pytest.raises(IsotuneError, match=named) as refused:
        parse_space(params, arguments)
    assert next(iter(params)) in str(refused.value)
    assert "Fix" in str(refused.value)


# ---- the search, on a launcher that writes results.json (tests/helpers/searches.py) ----
def test_a_study_search_groups_its_wandb_runs_by_study_task_and_arm(tmp_path, monkeypatch):
    """A study's runs were grouped on W&B by configuration, each trial a group of its own: an
    arm's runs on a task were nowhere together. Its search now sets the group, and the job type
    tells its tuning runs from its held-out ones; each run keeps its configuration's name."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    launch = FakeLauncher(tmp_path, weight_score)
    run = make_search(tmp_path, launch, "logger=wandb", n_trials=1, n_jobs=1, **SMALL)
    run.search.settings = dataclasses.replace(run.search.settings, wandb_group="s_minilm-rte-istar")
    run.run()
    phases = {}
    for job in launch.jobs:
        values = dict(o.split("=", 1) for o in job)
        if values["hydra.sweep.subdir"].startswith("report/baseline"):
            continue  # a plain search's baseline; a study has none (its baseline is an arm)
        assert values["logger.wandb.group"] == "s_minilm-rte-istar"
        phases[values["hydra.sweep.subdir"].split("/")[0]] = values["logger.wandb.job_type"]
        task_overrides = [o for o in job if not o.startswith("hydra.")]
    assert phases == {"trial-000": "tuning", "report": "report"}
    cfg = compose_train_config(["hparams_search=istar", "logger=wandb", *task_overrides])
    logger = hydra.utils.instantiate(cfg.logger.wandb)
    init = logger._wandb_init
    assert (init["group"], init["job_type"]) == ("s_minilm-rte-istar", "report")
    assert init["name"].startswith("minilm-rte-none-istar") and init["name"].endswith("-seed13")


def test_a_seeded_search_runs_every_trial_on_every_tuning_seed_then_reports(tmp_path, recwarn):
    launch = FakeLauncher(tmp_path, weight_score)
    make_search(tmp_path, launch, n_trials=5, n_jobs=2, **SMALL).run()
    # Optuna's figures are experimental, and chosen: no ExperimentalWarning on every search.
    assert not [w for w in recwarn if w.category.__name__ == "ExperimentalWarning"]
    # 5 trials in batches of 2, 2, 1, each batch's seeds at once (no pruner); then the report.
    assert [len(batch) for batch in launch.launches] == [4, 4, 2, 6]
    trials = pd.read_csv(tmp_path / "trials.csv")
    assert len(trials) == 10 and set(trials.state) == {"COMPLETE"}
    for _, rows in trials.groupby("trial"):
        scores = [
            weight_score({"reg.weight": str(w)}, s)
            for w, s in zip(rows["reg.weight"], rows.seed, strict=True)
        ]
        assert sorted(rows.seed) == [1, 2]
        assert rows.value.iloc[0] == pytest.approx(statistics.median(scores))
        assert list(rows.score) == pytest.approx(scores)
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    best = trials.loc[trials.value.idxmax()]
    assert results["best_value"] == pytest.approx(best.value)
    assert results["best_params"] == {"reg.weight": pytest.approx(best["reg.weight"])}
    assert results["held_out"]["seeds"] == [11, 12, 13]
    assert results["held_out"]["baseline_overrides"] == ["reg=none"]
    report_jobs = launch.launches[-1]
    assert sorted(int(dict(o.split("=", 1) for o in job)["seed"]) for job in report_jobs) == [
        11, 11, 12, 12, 13, 13
    ]  # fmt: skip
    for name in ("search_report.md", "expected_best.png", "optimization_history.png"):
        assert (tmp_path / name).is_file(), name
    curve = results["expected_best"]["curve"]
    assert [point["n"] for point in curve["with replacement"]] == [1, 2, 3, 4, 5]
    assert curve["without replacement"][-1]["mean"] == pytest.approx(trials.value.max())
    report = (tmp_path / "search_report.md").read_text()
    assert "5 trials: 5 complete, 0 pruned, 0 failed; 10 runs" in report
    # TPE chose each trial from the earlier ones: the report says the curve is not i.i.d.
    assert "asked by TPESampler, not random search" in report
    assert results["expected_best"]["iid"] is False


def test_the_random_sampler_config_gives_the_iid_curve(tmp_path):
    launch = FakeLauncher(tmp_path, weight_score)
    search = make_search(tmp_path, launch, "hydra/sweeper/sampler=random", n_trials=5, **SMALL)
    search.run()
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert results["expected_best"]["sampler"] == "RandomSampler"
    assert results["expected_best"]["iid"] is True
    assert "not random search" not in (tmp_path / "search_report.md").read_text()


def test_the_held_out_statistics_are_the_paired_ones_on_report_seeds_only(tmp_path):
    def varying(values, seed):  # the searched trials' seeds differ from the baseline's
        return weight_score(values, seed) + ("reg.weight" in values) * (seed % 3) / 500

    launch = FakeLauncher(tmp_path, varying)
    make_search(tmp_path, launch, n_trials=2, **SMALL).run()
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    held_out = results["held_out"]
    # By hand: best and baseline on report seeds 11, 12, 13.
    weight = results["best_params"]["reg.weight"]
    best = [varying({"reg.weight": str(weight)}, s) for s in (11, 12, 13)]
    baseline = [varying({"reg": "none"}, s) for s in (11, 12, 13)]
    d = np.subtract(best, baseline)
    assert np.ptp(d) > 0.001  # differences that vary: the interval has a width to check
    assert held_out["mean_difference"] == pytest.approx(d.mean())
    assert held_out["best_median"] == pytest.approx(statistics.median(best))
    assert held_out["baseline_median"] == pytest.approx(statistics.median(baseline))
    assert held_out["optimism"] == pytest.approx(results["best_value"] - statistics.median(best))
    half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert held_out["t_interval"] == pytest.approx([d.mean() - half, d.mean() + half])
    # Tuning seeds play no part: no report job ran on seed 1 or 2.
    report_seeds = {int(dict(o.split("=", 1) for o in job)["seed"]) for job in launch.launches[-1]}
    assert report_seeds == {11, 12, 13}


def test_the_report_tells_the_best_trials_runs_from_the_baselines_by_their_folder(tmp_path):
    """Issue 53: the report split its runs by their place in the batch (the best trial's first),
    so outcomes told in another order swapped the best trial and the baseline."""
    launch = FakeLauncher(tmp_path, weight_score)
    search = make_search(tmp_path, launch, n_trials=1, **SMALL).search
    search.open()
    assert search.start_trial()
    while (jobs := search.next_jobs())[0].trial != REPORT:
        outcomes, _ = run_batch(jobs, lambda batch: launch(job_overrides(batch, tmp_path)))
        search.tell(list(zip(jobs, outcomes, strict=True)))
    outcomes, _ = run_batch(jobs, lambda batch: launch(job_overrides(batch, tmp_path)))
    search.tell(list(zip(jobs, outcomes, strict=True))[::-1])  # told in another order
    held_out = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())["held_out"]
    assert held_out["baseline_median"] == pytest.approx(0.6 + 12 / 1000)  # reg=none's, seed 12


def test_a_crashed_job_fails_its_trial_and_the_search_goes_on(tmp_path):
    def crash_above_zero(values, seed):
        weight = values.get("reg.weight")
        return None if weight is not None and float(weight) > 0 and seed == 2 else 0.55

    launch = FakeLauncher(tmp_path, crash_above_zero)
    make_search(tmp_path, launch, n_trials=6, max_failure_rate=1.0, **SMALL).run()
    trials = pd.read_csv(tmp_path / "trials.csv")
    failed = trials[trials.state == "FAIL"]
    assert len(failed) and all(failed["reg.weight"] > 0) and failed.value.isna().all()
    assert all("seed 2" in reason and "nan" in reason for reason in failed.reason)
    assert set(trials.state) <= {"COMPLETE", "FAIL"}
    assert (tmp_path / "optimization_results.yaml").is_file()


def test_one_failure_rule_stops_the_search_and_says_what_continues_it(tmp_path):
    """max_failure_rate 0.25 of 4 trials allows one FAIL: trial 0's does not stop the search
    (by a share of finished trials, 1 of 1 did, and each retype stopped again); trial 2's does.
    Typed again, the search stops before any job; with the rate the message names, it goes on.
    Each failed trial keeps both of its jobs, the crashed first seed and the completed second."""

    def first_seed_crashes_in_trials_0_and_2(values, seed):
        crashed = values["hydra.sweep.subdir"] in ("trial-000/seed-1", "trial-002/seed-1")
        return None if crashed else weight_score(values, seed)

    settings = {**SMALL, "n_trials": 4, "max_failure_rate": 0.25}
    launch = FakeLauncher(tmp_path, first_seed_crashes_in_trials_0_and_2)
    with pytest.raises(IsotuneError, match="2 trials FAILED") as stopped:
        make_search(tmp_path, launch, **settings).run()
    message = str(stopped.value)
    assert (
        "more than the 1 that hydra.sweeper.max_failure_rate=0.25 of hydra.sweeper.n_trials=4"
        in message
    )
    assert "trial 0: seed 1" in message and "trial 2: seed 1" in message
    assert "with hydra.sweeper.max_failure_rate=0.5 or higher" in message
    assert "type the same command with hydra.sweeper.retry_failed=true" in message
    assert len(launch.launches) == 3  # trials 0, 1 and 2
    again = FakeLauncher(tmp_path, first_seed_crashes_in_trials_0_and_2)
    with pytest.raises(IsotuneError, match="2 trials FAILED"):
        make_search(tmp_path, again, **settings).run()
    assert again.launches == []  # stopped before any job
    make_search(tmp_path, again, **{**settings, "max_failure_rate": 0.5}).run()
    trials = pd.read_csv(tmp_path / "trials.csv")
    assert trials.groupby("trial").state.first().tolist() == [
        "FAIL",
        "COMPLETE",
        "FAIL",
        "COMPLETE",
    ]
    for _, failed in trials[trials.state == "FAIL"].groupby("trial"):
        assert list(failed.seed) == [1, 2] and list(failed.job_status) == ["failed", "completed"]
        assert failed.score.iloc[1] == pytest.approx(weight_score(failed.iloc[1].to_dict(), 2))


def test_failed_trials_retried_once_their_cause_is_fixed_count_nowhere(tmp_path, caplog):
    """Issue 52: trials failed for a cause since fixed (a package installed after) kept the
    search refused by the failure rule; only a higher max_failure_rate let it go on, beside
    them. With retry_failed, each failed configuration runs again as a new trial, and the failed
    ones count in neither the budget, nor the rule, nor the tables."""

    def missing_package(values, seed):
        return None

    settings = {**SMALL, "n_trials": 3, "max_failure_rate": 0.0}
    with pytest.raises(IsotuneError, match="1 trial FAILED"):
        make_search(tmp_path, FakeLauncher(tmp_path, missing_package), **settings).run()
    fixed = FakeLauncher(tmp_path, weight_score)
    with caplog.at_level(logging.INFO):
        make_search(tmp_path, fixed, **settings, retry_failed=True).run()
    assert "Retrying failed trials [0]" in caplog.text
    folders = [dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"] for job in fixed.jobs]
    assert folders[:2] == ["trial-001/seed-1", "trial-001/seed-2"]  # trial 0's values, again
    first = json.loads((tmp_path / "trial-000" / "seed-1" / "results.json").read_text())
    again = json.loads((tmp_path / "trial-001" / "seed-1" / "results.json").read_text())
    weight = [o for o in first["overrides"] if o.startswith("reg.weight=")]
    assert weight and weight == [o for o in again["overrides"] if o.startswith("reg.weight=")]
    trials = pd.read_csv(tmp_path / "trials.csv")
    assert sorted(trials.trial.unique()) == [1, 2, 3]  # three trials spent, the failed one out
    assert set(trials.state) == {"COMPLETE"}
    make_search(tmp_path, FakeLauncher(tmp_path, weight_score), **settings).run()  # typed again


def test_progress_says_runs_done_of_all_time_spent_and_left_and_when_nothing_is(tmp_path, caplog):
    """Issue 52: a four-hour study said a line per job and nothing of where it stood; typed again
    complete, it announced its whole budget as if to run."""
    settings = {**SMALL, "n_trials": 2}  # 2 trials x 2 seeds, then 3 report seeds x 2: 10 runs
    with caplog.at_level(logging.INFO, logger="isotune.search.loop"):
        make_search(tmp_path, FakeLauncher(tmp_path, weight_score), **settings).run()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Runs:")]
    assert lines[0] == "Runs: 0/10 done, 10 left (fewer if pruned)."
    assert lines[1].startswith("Runs: 2/10 (20%), 2 in 0:00:") and "left" in lines[1]
    assert lines[-1].startswith("Runs: 10/10 (100%), 10 in ") and "left" not in lines[-1]
    caplog.clear()
    again = FakeLauncher(tmp_path, weight_score)
    with caplog.at_level(logging.INFO, logger="isotune.search.loop"):
        make_search(tmp_path, again, **settings).run()
    assert "Nothing left to run: all 10 runs are done" in caplog.text and again.jobs == []
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="isotune.search.loop"):  # two report seeds more
        make_search(tmp_path, again, **{**settings, "report_seeds": [11, 12, 13, 14, 15]}).run()
    assert "Runs: 10/14 done, 4 left" in caplog.text


def test_progress_is_said_while_a_long_batch_runs(tmp_path, monkeypatch, caplog):
    """A study's report runs as one batch (the confirmatory run: 40 runs, about 3 hours) and
    said nothing of where it stood until its end: now each job that ends in it is counted."""
    monkeypatch.setattr(loop, "POLL_SECONDS", 0.01)
    launch = FakeLauncher(tmp_path, weight_score)

    def said(prefix: str) -> bool:
        return any(record.getMessage().startswith(prefix) for record in list(caplog.records))

    def one_by_one(jobs: list[list[str]]) -> None:  # 2 tuning runs, then 6 report runs: 8
        for job in jobs:
            launch([job])
            deadline = time.monotonic() + 30
            while not said(f"Runs: {len(launch.jobs)}/8"):  # said before the batch ends
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.01)

    search = make_search(tmp_path, launch, n_trials=1, **SMALL).search
    with caplog.at_level(logging.INFO, logger="isotune.search.loop"):
        run_searches([search], lambda jobs: one_by_one(job_overrides(jobs, tmp_path)), 1)
    assert said("Runs: 3/8 (38%), 3 in ")


def test_a_pruned_trial_stops_before_its_later_seeds_and_is_not_a_failure(tmp_path):
    pruner = {"_target_": "optuna.pruners.ThresholdPruner", "lower": 0.5}

    def below_threshold_above_zero(values, seed):  # the baseline (no reg.weight): 0.7
        return 0.4 if float(values.get("reg.weight", -1)) > 0 else 0.7

    launch = FakeLauncher(tmp_path, below_threshold_above_zero)
    make_search(tmp_path, launch, n_trials=6, **{**SMALL, "pruner": pruner}).run()
    trials = pd.read_csv(tmp_path / "trials.csv")
    pruned = trials[trials.state == "PRUNED"]
    assert len(pruned) and (pruned.seed == 1).all()  # seed 2 never ran for them
    complete = trials[trials.state == "COMPLETE"]
    assert len(complete) and len(complete) == 2 * complete.trial.nunique()
    # Seeds run in rounds: each launch of a trial is one seed.
    assert all(len(batch) == 1 for batch in launch.launches[:-1])
    assert len(launch.jobs) == len(trials) + 6
    # The expected best spends every trial: a pruned one at the median of the seeds it ran.
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())["expected_best"]
    assert results["pruned_at_partial_median"] == sorted(pruned.trial.unique())
    spent = trials.drop_duplicates("trial").sort_values("trial")
    entered = [0.4 if state == "PRUNED" else 0.7 for state in spent.state]
    assert results["values"] == pytest.approx(entered)
    assert len(results["curve"]["with replacement"]) == 6
    report = (tmp_path / "search_report.md").read_text()
    assert f"{len(pruned)} pruned at the median of the seeds they ran (marked *" in report
    assert f"{pruned.trial.iloc[0]}* 0.4000" in report


WILCOXON = {"_target_": "optuna.pruners.WilcoxonPruner", "p_threshold": 0.15}


@pytest.mark.parametrize("other", ["equal", "worse"])
def test_wilcoxon_prunes_a_clearly_worse_trial_at_its_third_seed_and_not_an_equal_one(
    tmp_path, other
):
    """Four tuning seeds: after three, all three below the best's is one-sided p 0.125."""

    def score(values, seed):  # positive weights: the other trial; the baseline 0.6
        weight = float(values.get("reg.weight", 0))
        best = 0.7 + seed / 100
        if weight > 0:
            return best - 0.2 if other == "worse" else best + (-1) ** seed / 100  # -, +, -, +
        return best if weight < 0 else 0.6

    settings = {**SMALL, "seeds": [1, 2, 3, 4], "pruner": WILCOXON}
    launch = FakeLauncher(tmp_path, score)
    make_search(tmp_path, launch, n_trials=5, **settings).run()
    trials = pd.read_csv(tmp_path / "trials.csv")
    positive = trials[trials["reg.weight"] > 0]
    assert positive.trial.nunique() and (trials["reg.weight"] < 0).any()
    if other == "worse":
        assert set(positive.state) == {"PRUNED"}
        assert all(sorted(seeds) == [1, 2, 3] for _, seeds in positive.groupby("trial").seed)
    else:
        assert set(positive.state) == {"COMPLETE"} and len(positive) == 4 * positive.trial.nunique()


def test_a_trial_that_ran_every_seed_completes_with_its_value_and_is_never_pruned(tmp_path):
    """After its last seed a trial has cost all its runs: pruning it would save none and drop
    its value from the expected best, which would then leave out the worst trials."""
    pruner = {"_target_": "optuna.pruners.ThresholdPruner", "lower": 0.5}

    def below_threshold_on_the_last_seed(values, seed):
        return 0.4 if seed == 2 and "reg.weight" in values else 0.7

    launch = FakeLauncher(tmp_path, below_threshold_on_the_last_seed)
    make_search(tmp_path, launch, n_trials=3, **{**SMALL, "pruner": pruner}).run()
    trials = pd.read_csv(tmp_path / "trials.csv")
    assert len(trials) == 6 and set(trials.state) == {"COMPLETE"}
    assert trials.value.tolist() == pytest.approx([0.55] * 6)  # the median of 0.7 and 0.4
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    # Fewer than 5 trials: their values, not a curve.
    assert results["expected_best"]["values"] == pytest.approx([0.55] * 3)
    assert results["expected_best"]["curve"] == {}
    assert "Fewer than 5 trials" in (tmp_path / "search_report.md").read_text()
    assert not (tmp_path / "expected_best.png").exists()


def test_a_study_is_continued_only_under_the_settings_that_rank_its_trials(tmp_path):
    """The folder is named by the study, not its settings: another command on the same task and
    model would otherwise rank trials run on other seeds, or with other fixed overrides. The
    difference is written as typed (interval(0.01, 1)), not as Optuna's JSON."""
    launch = FakeLauncher(tmp_path, weight_score)
    make_search(tmp_path, launch, n_trials=1, **SMALL).run()
    for arguments, settings, named in (
        ((), {**SMALL, "seeds": [1, 3]}, "seeds: the study's [1,2], this command's [1,3]"),
        (("trainer=cpu_bf16",), SMALL, "fixed: the study's no override, this command's trainer"),
        (
            (),
            {**SMALL, "params": {"reg.weight": "interval(0.01, 1)"}},
            "searched: the study's reg.weight=tag(log, signed, interval(0.01, 1)), this "
            "command's reg.weight=interval(0.01, 1)",
        ),
        (
            (),
            {**SMALL, "sampler": {"_target_": "optuna.samplers.RandomSampler", "seed": 0}},
            "sampler: the study's optuna.samplers.TPESampler(seed=0), this command's "
            "optuna.samplers.RandomSampler(seed=0)",
        ),
    ):
        again = FakeLauncher(tmp_path, weight_score)
        with pytest.raises(IsotuneError, match="ranked its trials under other settings") as refused:
            make_search(tmp_path, again, arguments=arguments, n_trials=2, **settings).run()
        assert named in str(refused.value) and "hydra.sweeper.study_name=" in str(refused.value)
        assert "_type" not in str(refused.value)  # no distribution JSON
        assert again.launches == []  # refused before any job
    more = FakeLauncher(tmp_path, weight_score)  # more trials: the same search, continued
    make_search(tmp_path, more, n_trials=2, **SMALL).run()
    assert sorted(pd.read_csv(tmp_path / "trials.csv").trial.unique()) == [0, 1]


def test_the_report_settings_and_the_logger_may_change_when_a_study_is_continued(tmp_path):
    """The baseline, the report seeds and the logger rank no trial: typed again with them changed,
    the study goes on, no trial runs again, the report is made again with the new setting's runs,
    and the old report runs stay in their folders."""
    make_search(tmp_path, FakeLauncher(tmp_path, weight_score), n_trials=1, **SMALL).run()
    changed = {**SMALL, "report_seeds": [11, 14], "baseline": {"reg": "istar", "reg.weight": 0.05}}
    again = FakeLauncher(tmp_path, weight_score)
    make_search(
        tmp_path,
        again,
        "logger=tensorboard",
        arguments=["logger=tensorboard"],
        n_trials=1,
        **changed,
    ).run()
    ran = sorted(dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"] for job in again.jobs)
    best = next(p.name for p in (tmp_path / "report").glob("trial-*"))
    assert ran == [
        "report/baseline-2/seed-11", "report/baseline-2/seed-14", f"report/{best}/seed-14"
    ]  # fmt: skip
    assert (tmp_path / "report" / "baseline" / "seed-13" / "results.json").is_file()
    held_out = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())["held_out"]
    assert held_out["seeds"] == [11, 14]
    assert held_out["baseline_overrides"] == ["reg=istar", "reg.weight=0.05"]


def test_a_search_carried_under_another_log_dir_continues_with_that_log_dir(tmp_path):
    """Issue 52: a study moved under another paths.log_dir and typed with it was refused as
    changing a fixed setting (and each completed job as a run of other overrides)."""
    old, new = tmp_path / "old", tmp_path / "new"
    typed = f"paths.log_dir={old}"
    launch = FakeLauncher(old, weight_score)
    make_search(old, launch, typed, arguments=[typed], **SMALL, n_trials=1).run()
    shutil.move(old, new)
    typed = f"paths.log_dir={new}"
    again = FakeLauncher(new, weight_score)
    make_search(new, again, typed, arguments=[typed], **SMALL, n_trials=2).run()
    ran = [dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"] for job in again.jobs]
    assert ran[:2] == ["trial-001/seed-1", "trial-001/seed-2"]  # the trial more, then a report
    assert not any(folder.startswith("trial-000") for folder in ran)


def test_a_key_fixed_in_params_is_fixed_and_the_refusal_names_that_fix(tmp_path):
    """`hparams_search=istar reg.weight=0.5` is refused; the fix its message names runs every
    job with reg.weight=0.5 alone (the searched weight used to follow it and win)."""
    with pytest.raises(IsotuneError, match="searched") as refused:
        make_search(tmp_path, FakeLauncher(tmp_path, weight_score), arguments=["reg.weight=0.5"])
    fix = "++hydra.sweeper.params.reg.weight=0.5"
    another = "'optim.lr=tag(log, interval(1e-5, 2e-4))'"
    assert fix in str(refused.value) and another in str(refused.value)
    launch = FakeLauncher(tmp_path, weight_score)
    search = make_search(tmp_path, launch, fix, arguments=[another.strip("'")], n_trials=2, **SMALL)
    search.run()
    trial_jobs = [job for job in launch.jobs if "report" not in " ".join(job)]
    assert len(trial_jobs) == 4
    for job in trial_jobs:
        assert [o for o in job if o.startswith("reg.weight=")] == ["reg.weight=0.5"]
    assert len({next(o for o in job if o.startswith("optim.lr=")) for job in trial_jobs}) == 2


def _whole_and_stopped(
    tmp_path: Path, stopped_in: Path, n_trials: int, stop_at_launch: int
) -> tuple[FakeLauncher, FakeLauncher, dict]:
    """A search of ``n_trials`` (seeds in rounds, no pruning) run whole in ``tmp_path/whole``, and
    the same search stopped by Ctrl-C at launch ``stop_at_launch`` in ``stopped_in``: their
    launchers, and the settings that continue it."""
    never = {"_target_": "optuna.pruners.ThresholdPruner", "lower": 0.0}
    settings = {**SMALL, "pruner": never, "n_trials": n_trials, "report_seeds": [11]}
    whole = FakeLauncher(tmp_path / "whole", weight_score)
    make_search(tmp_path / "whole", whole, **settings).run()
    stopped = FakeLauncher(stopped_in, weight_score, stop_at_launch=stop_at_launch)
    with pytest.raises(KeyboardInterrupt):
        make_search(stopped_in, stopped, **settings).run()
    return whole, stopped, settings


def test_a_stopped_search_continues_where_it_stopped_and_ends_as_an_uninterrupted_one(tmp_path):
    """Stopped in trial 10, TPE's first trial after its 10 random start-up ones, between its two
    seeds: the continued search asks trial 11 from the history as the uninterrupted one does."""
    # in trial 10, after its first seed
    whole, stopped, settings = _whole_and_stopped(tmp_path, tmp_path / "stopped", 12, 21)
    again = FakeLauncher(tmp_path / "stopped", weight_score)
    make_search(tmp_path / "stopped", again, **settings).run()

    def asked(launcher):
        return [job for job in launcher.jobs if "report" not in " ".join(job)]

    assert asked(stopped) + asked(again) == asked(whole)  # nothing run twice, nothing skipped
    first, second = (
        pd.read_csv(tmp_path / name / "trials.csv").drop(columns="job_dir")
        for name in ("whole", "stopped")
    )
    pd.testing.assert_frame_equal(first, second)
    assert list(second.trial.unique()) == list(range(12))
    results = [
        yaml.safe_load((tmp_path / name / "optimization_results.yaml").read_text())
        for name in ("whole", "stopped")
    ]
    assert results[0] == results[1]


def test_a_stopped_search_carried_to_another_folder_continues_there(tmp_path):
    """A trial left running went on in the folder recorded when it started: a search (or study)
    folder copied to another machine or path sent its jobs back to the old path, recreating it
    there (or failing where it cannot be written). With the folder's own journal, every trial of
    it lives in the folder, wherever that is now."""
    # in trial 1, after its first seed
    whole, stopped, settings = _whole_and_stopped(tmp_path, tmp_path / "old", 3, 3)
    shutil.move(tmp_path / "old", tmp_path / "carried")
    again = FakeLauncher(tmp_path / "carried", weight_score)
    make_search(tmp_path / "carried", again, **settings).run()
    assert not (tmp_path / "old").exists()
    assert all(".." not in " ".join(job) for job in again.jobs)
    assert len(stopped.jobs) + len(again.jobs) == len(whole.jobs)  # nothing run twice
    assert (tmp_path / "carried" / "trial-001" / "seed-2" / "results.json").is_file()
    # every job named where it lies now, relative to the search folder (issue 52)
    job_dirs = pd.read_csv(tmp_path / "carried" / "trials.csv").job_dir
    assert job_dirs.str.fullmatch(r"trial-\d{3}/seed-\d").all(), job_dirs.tolist()
    results = [
        yaml.safe_load((tmp_path / name / "optimization_results.yaml").read_text())
        for name in ("whole", "carried")
    ]
    assert results[0] == results[1]


def test_a_search_stopped_mid_round_with_trials_out_of_step_ends_as_an_uninterrupted_one(tmp_path):
    """Two trials in flight, pruning: stopped as trial 6's first seed and trial 4's third were
    launched, the continued search goes on in each trial's own round instead of reading their
    seeds again from the first, so the pruner is asked what it was asked uninterrupted, when it
    was (read again, trial 4 fell out of step, and trial 6 was pruned against its best)."""

    def noisy(values, seed):  # seed noise as a run has, a function of the configuration and seed
        noise = random.Random(f"{values.get('reg.weight')} {seed}").gauss(0, 0.05)
        return weight_score(values, 0) + noise

    pruner = {"_target_": "isotune.search.pruning.NoiseGapPruner", "gap_sd": 1.0}
    settings = {**SMALL, "seeds": [1, 2, 3], "pruner": pruner, "n_trials": 8, "n_jobs": 2}
    whole = FakeLauncher(tmp_path / "whole", noisy)
    make_search(tmp_path / "whole", whole, **settings).run()

    stopped = FakeLauncher(tmp_path / "stopped", noisy, stop_at_launch=7)
    with pytest.raises(KeyboardInterrupt):
        make_search(tmp_path / "stopped", stopped, **settings).run()
    journal = JournalStorage(JournalFileBackend(str(tmp_path / "stopped" / "optuna_journal.log")))
    study = optuna.load_study(study_name="istar_rte_minilm", storage=journal)
    running = [t for t in study.trials if t.state.name == "RUNNING"]
    assert [(t.number, len(t.intermediate_values)) for t in running] == [(4, 2), (6, 0)]
    again = FakeLauncher(tmp_path / "stopped", noisy)
    make_search(tmp_path / "stopped", again, **settings).run()

    def asked(launcher):
        return [job for job in launcher.jobs if "report" not in " ".join(job)]

    assert asked(stopped) + asked(again) == asked(whole)
    first, second = (
        pd.read_csv(tmp_path / name / "trials.csv").drop(columns="job_dir")
        for name in ("whole", "stopped")
    )
    pd.testing.assert_frame_equal(first, second)
    assert {"COMPLETE", "PRUNED"} <= set(second.state)
    results, reports = (
        [read(tmp_path / name) for name in ("whole", "stopped")]
        for read in (
            lambda folder: yaml.safe_load((folder / "optimization_results.yaml").read_text()),
            lambda folder: (folder / "search_report.md").read_text(),
        )
    )
    assert results[0] == results[1]
    assert reports[0] == reports[1].replace(str(tmp_path / "stopped"), str(tmp_path / "whole"))


def asked_values(
    sampler: Callable[[int | None], object], seed: int, stop_at: int = -1, trials: int = 8
) -> list:
    """The values of x in [0, 1] that the ``trials`` of a search with ``sampler`` seeded ``seed``
    ask, its process restarted (a new sampler) before trial ``stop_at``."""
    space = parse_space({"x": "interval(0.0, 1.0)"}, [])
    settings = SearchSettings(
        space=space, seeds=(1,), report_seeds=(2,), baseline=(), direction="maximize",
        n_trials=trials, max_failure_rate=0.25, study_name="s", storage=None, make_sampler=sampler,
        sampler={"seed": seed}, pruner=None,
    )  # fmt: skip
    study = optuna.create_study(direction="maximize")
    values = []
    for k in range(trials):
        current = None if k == stop_at else study.sampler
        study.sampler = trial_sampler(settings, k, current if k else None)
        trial = study.ask(space.distributions())
        values.append(trial.params["x"])
        study.tell(trial, 1 - abs(trial.params["x"] - 0.3))
    return values


def test_searches_with_other_sampler_seeds_share_no_trial():
    """With seed + k, seed 1's trials 0-6 were seed 0's trials 1-7."""
    tpe = asked_values(lambda seed: optuna.samplers.TPESampler(seed=seed), 0)
    assert tpe == asked_values(lambda seed: optuna.samplers.TPESampler(seed=seed), 0, stop_at=5)
    other = asked_values(lambda seed: optuna.samplers.TPESampler(seed=seed), 1)
    assert not set(tpe) & set(other)


def test_a_qmc_sampler_is_seeded_once_and_continues_its_sequence():
    def qmc(seed):
        return optuna.samplers.QMCSampler(seed=seed, scramble=True)

    values = asked_values(qmc, 0, trials=9)
    assert values == asked_values(qmc, 0, stop_at=4, trials=9)  # continued after a stop, exactly
    # Its trials 1-8 (the first is Optuna's independent draw) are a low-discrepancy sequence, one
    # in each eighth of [0, 1], which a scrambled sequence reseeded per trial does not keep.
    assert sorted(int(x * 8) for x in values[1:]) == list(range(8))


def test_a_launcher_raising_mid_batch_leaves_the_trial_unfinished_and_the_search_continues(
    tmp_path, monkeypatch, caplog
):
    """submitit's launcher raises at the first job SLURM killed while the array's others still
    run: those jobs have no score, so their trial is neither FAILED nor given a value. The search
    stops as a plain sweep does (its summary, the jobs going on and their scancel, exit 1), and
    typed again once they ended, it ends as an uninterrupted search."""
    settings = {**SMALL, "n_trials": 3}
    whole = FakeLauncher(tmp_path / "whole", weight_score)
    make_search(tmp_path / "whole", whole, **settings).run()

    folder = tmp_path / "stopped"
    held: list[SlurmJob] = []  # what squeue says the folder sent and SLURM still holds
    monkeypatch.setattr(slurm_jobs, "live_jobs", lambda sweep_dir: list(held))
    stopped = FakeLauncher(folder, weight_score, unended_at_launch=1)  # trial 1's two seeds

    def on_slurm(jobs):
        held[:] = [SlurmJob("7_1", "RUNNING")]
        stopped(jobs)

    caplog.set_level(logging.WARNING)
    with pytest.raises(SystemExit) as exit, stops_with_a_summary(folder, stopped, AGAIN):
        make_search(folder, on_slurm, **settings).run()
    assert exit.value.code == 1
    said = caplog.text
    assert f"Sweep {folder}: 2 of 4 jobs completed, 2 did not:" in said
    assert "The launcher stopped waiting (RuntimeError: Job 7_0 (task: 0) failed" in said
    assert f"{folder / 'trial-001' / 'seed-1'}: interrupted" in said
    assert f"{folder / 'trial-001' / 'seed-2'}: running" in said
    assert "Their trials stay unfinished, never failed" in said
    assert "go on without it: 7_1 (RUNNING)" in said and "scancel 7" in said
    assert AGAIN in said
    journal = JournalStorage(JournalFileBackend(str(folder / "optuna_journal.log")))
    study = optuna.load_study(study_name="istar_rte_minilm", storage=journal)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING"]

    again = FakeLauncher(folder, weight_score)
    with pytest.raises(IsotuneError, match="still queued or running: 7_1"):
        make_search(folder, again, **settings).run()  # not while SLURM holds a job
    held.clear()
    make_search(folder, again, **settings).run()
    subdirs = [dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"] for job in again.jobs]
    assert subdirs[:2] == ["trial-001/seed-1", "trial-001/seed-2"]  # continued, then on
    first, second = (
        pd.read_csv(tmp_path / name / "trials.csv").drop(columns="job_dir")
        for name in ("whole", "stopped")
    )
    pd.testing.assert_frame_equal(first, second)


def test_a_job_interrupted_while_the_launcher_returns_stops_the_search_too(tmp_path):
    """A gpus worker stopped by its own SIGTERM: its job is interrupted, the launcher returns."""
    launch = FakeLauncher(tmp_path, weight_score, unended_at_launch=0)

    def returns(jobs):
        with contextlib.suppress(RuntimeError):
            launch(jobs)

    with pytest.raises(JobsNotEnded, match=r"^These jobs of the search have not ended") as stopped:
        make_search(tmp_path, returns, n_trials=2, **SMALL).run()
    assert f"{tmp_path / 'trial-000' / 'seed-1'}: interrupted" in str(stopped.value)
    journal = JournalStorage(JournalFileBackend(str(tmp_path / "optuna_journal.log")))
    study = optuna.load_study(study_name="istar_rte_minilm", storage=journal)
    assert [t.state.name for t in study.trials] == ["RUNNING"]


def test_two_searches_on_one_journal_never_run_a_trial_twice(tmp_path):
    """A shared storage: search A is stopped in trial 1 while its process lives on (its folder
    held, as a live search holds it); search B on the same study leaves trial 1 to it instead of
    running it again (A would then die telling a trial B finished), and takes it over once A has
    stopped, in A's folder, where its jobs are."""
    settings = {**SMALL, "storage": str(tmp_path / "shared.log"), "study_name": "shared"}
    a, b = tmp_path / "a", tmp_path / "b"
    first = FakeLauncher(a, weight_score, stop_at_launch=1)
    with pytest.raises(KeyboardInterrupt):  # trial 1 asked, its jobs not launched
        make_search(a, first, **settings, n_trials=3).run()
    with held_by_another_process(a):  # A's process, still alive
        second = FakeLauncher(b, weight_score)
        make_search(b, second, **settings, n_trials=3).run()  # trial 2, then its report
    third = FakeLauncher(b, weight_score)  # A has stopped: B typed again, one trial more
    make_search(b, third, **settings, n_trials=4).run()

    def folders(launcher):
        return [
            str(
                (launcher.folder / dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"])
                .resolve()
                .relative_to(tmp_path)
            )
            for job in launcher.jobs
            if "report" not in " ".join(job)
        ]

    assert folders(first) == ["a/trial-000/seed-1", "a/trial-000/seed-2"]
    assert folders(second) == ["b/trial-002/seed-1", "b/trial-002/seed-2"]
    assert folders(third) == [
        "a/trial-001/seed-1", "a/trial-001/seed-2", "b/trial-003/seed-1", "b/trial-003/seed-2"
    ]  # fmt: skip
    trials = pd.read_csv(b / "trials.csv")
    assert trials.groupby("trial").state.first().tolist() == ["COMPLETE"] * 4
    assert trials.job_dir.str.startswith("../a/trial-001/").sum() == 2  # relative to b


def test_a_job_of_the_stopped_search_still_running_is_not_launched_again(tmp_path):
    """On SLURM a job outlives the search that submitted it: typed again while the job runs,
    the search stops with one message instead of a second job there, which the folder lock would
    refuse, failing the trial for good."""
    settings = {**SMALL, "n_trials": 1}
    stopped = FakeLauncher(tmp_path, weight_score, stop_at_launch=0)
    with pytest.raises(KeyboardInterrupt):  # stopped as trial 0's seeds were launched
        make_search(tmp_path, stopped, **settings).run()
    running = tmp_path / "trial-000" / "seed-2"
    again = FakeLauncher(tmp_path, weight_score)
    with (
        held_by_another_process(running) as job,
        pytest.raises(IsotuneError, match="still running") as refused,
    ):
        make_search(tmp_path, again, **settings).run()
    assert f"{running} (pid {job.pid})" in str(refused.value) and "scancel" in str(refused.value)
    assert again.launches == []
    make_search(tmp_path, again, **settings).run()  # once it ended: trial 0 goes on, not FAILed
    trials = pd.read_csv(tmp_path / "trials.csv")
    assert list(trials.state) == ["COMPLETE", "COMPLETE"] and list(trials.seed) == [1, 2]


def test_a_search_stopped_before_its_first_job_started_says_so(tmp_path):
    """Not "0 of 0 jobs completed": a search knows its jobs only as they start."""
    stopped = FakeLauncher(tmp_path, weight_score, stop_at_launch=0)
    with pytest.raises(KeyboardInterrupt):
        make_search(tmp_path, stopped, **SMALL).run()
    summary = summarize_sweep(tmp_path).text.splitlines()
    assert summary[0] == f"Sweep {tmp_path.resolve()}: no job has started yet."
    assert summary[1].startswith("The sweep folder uses ") and len(summary) == 2


def test_a_search_folder_is_continued_by_its_command_not_by_isotune_rerun(tmp_path):
    def trial_0_seed_2_crashes(values, seed):
        return None if values["hydra.sweep.subdir"] == "trial-000/seed-2" else 0.6

    launch = FakeLauncher(tmp_path, trial_0_seed_2_crashes)
    make_search(tmp_path, launch, n_trials=2, max_failure_rate=1.0, **SMALL).run()
    with pytest.raises(IsotuneError, match="is a search") as refused:
        plan_reruns(tmp_path)
    assert "type the search's command again" in str(refused.value)
    summary = summarize_sweep(tmp_path).text  # its FAILED trial's job: final, not to rerun
    assert "did not" in summary and "isotune.rerun" not in summary


def test_with_wandb_each_run_is_tagged_with_its_search_and_trial(tmp_path):
    launch = FakeLauncher(tmp_path, weight_score)
    make_search(tmp_path, launch, "logger=wandb", n_trials=1, **SMALL).run()
    tags = [next(o for o in job if o.startswith("logger.wandb.tags=")) for job in launch.jobs]
    assert tags[:2] == ["logger.wandb.tags=['search-istar_rte_minilm','trial-000']"] * 2
    assert "logger.wandb.tags=['search-istar_rte_minilm','report-baseline']" in tags
    no_wandb = FakeLauncher(tmp_path / "csv", weight_score)
    make_search(tmp_path / "csv", no_wandb, n_trials=1, **SMALL).run()
    assert not any(o.startswith("logger.") for job in no_wandb.jobs for o in job)


def test_the_sweeps_wandb_report_opens_with_the_held_out_report_and_the_figures(tmp_path):
    make_search(tmp_path, FakeLauncher(tmp_path, weight_score), n_trials=5, **SMALL).run()
    assert dashboard.main(["report", str(tmp_path), "--dry-run"]) == 0
    heading, text, grid = json.loads((tmp_path / "wandb_report.json").read_text())["blocks"][:3]
    assert heading == {"type": "H2", "text": f"Search {tmp_path.name}"}
    assert text["type"] == "MarkdownBlock"
    markdown = text["text"]
    assert markdown.startswith("5 trials: 5 complete") and "### Held out" in markdown
    # The held-out numbers of optimization_results.yaml, in the table and the optimism line.
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    held_out = results["held_out"]
    best, baseline = (line for line in markdown.splitlines() if line.startswith("| b"))
    assert best == (
        f"| best (trial {results['best_trial']}) | {held_out['best_overrides'][0]} | "
        f"{results['best_value']:.4f} | {held_out['best_median']:.4f} (n = 3) | 0 of 3 |"
    )
    assert baseline == (
        f"| baseline | reg=none | not run | {held_out['baseline_median']:.4f} (n = 3) | 0 of 3 |"
    )
    assert f"report-seed median is {held_out['optimism']:.4f}" in markdown
    # The three figures the search drew, as the summary run logs them (figure/<name>).
    names = ["optimization_history", "param_importances", "expected_best"]
    assert all((tmp_path / f"{name}.png").is_file() for name in names)
    assert [panel["media_keys"] for panel in grid["panels"]] == [
        [f"figure/{tmp_path.name}/{name}"] for name in names
    ]


def test_the_wandb_report_of_a_stopped_search_says_it_has_not_ended(tmp_path):
    stopped = FakeLauncher(tmp_path, weight_score, stop_at_launch=1)
    with pytest.raises(KeyboardInterrupt):  # after trial 0: no report, no figure yet
        make_search(tmp_path, stopped, n_trials=3, **SMALL).run()
    assert dashboard.main(["report", str(tmp_path), "--dry-run"]) == 0
    heading, text, grid = json.loads((tmp_path / "wandb_report.json").read_text())["blocks"][:3]
    assert heading["text"] == f"Search {tmp_path.name}"
    assert text["text"].startswith(f"No search_report.md in {tmp_path} yet: the search has not")
    assert grid["panels"] == []


# ---- the loop: several searches on one launcher, and what every sweep gets ----
def test_two_searches_share_each_launch_and_end_as_each_would_alone(tmp_path):
    """The study helper's ground: jobs of several searches in one launch, each search asking and
    telling its own trials as if alone."""
    samplers = {"a": 0, "b": 5}
    settings = {**SMALL, "n_trials": 2}

    def search(folder, launch, name):
        sampler = {"_target_": "optuna.samplers.TPESampler", "seed": samplers[name]}
        return make_search(folder / name, launch, **settings, sampler=sampler)

    for name in samplers:
        search(
            tmp_path / "alone", FakeLauncher(tmp_path / "alone" / name, weight_score), name
        ).run()
    together = tmp_path / "together"
    launch = FakeLauncher(together, weight_score)
    searches = [search(together, launch, name).search for name in samplers]
    run_searches(searches, lambda jobs: launch(job_overrides(jobs, together)), 2)

    # Each launch: one trial of each search (both seeds), then both reports at once, the
    # searches' jobs in turn (a stopped study leaves whole pairs of report runs).
    assert [len(batch) for batch in launch.launches] == [4, 4, 12]
    for batch in launch.launches:
        owners = [dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"][0] for job in batch]
        assert owners == ["a", "b"] * (len(batch) // 2)
    alone, shared = (
        pd.read_csv(tmp_path / where / "b" / "trials.csv").drop(columns="job_dir")
        for where in ("alone", "together")
    )
    pd.testing.assert_frame_equal(alone, shared)
    assert not pd.read_csv(together / "a" / "trials.csv")["reg.weight"].equals(
        pd.read_csv(together / "b" / "trials.csv")["reg.weight"]
    )


def test_with_one_slot_the_searches_take_turns_trial_by_trial(tmp_path):
    """Every round offered the slot to the first search first: with n_jobs=1 it ran its whole
    budget before the second began. The search offered a trial first now turns."""
    launch = FakeLauncher(tmp_path, weight_score)
    searches = [make_search(tmp_path / name, launch, n_trials=2, **SMALL).search for name in "ab"]
    run_searches(searches, lambda jobs: launch(job_overrides(jobs, tmp_path)), 1)
    owners = [
        "".join(sorted({dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"][0] for job in b}))
        for b in launch.launches
    ]
    # a's report runs beside b's last trial once a's trials have ended
    assert owners == ["a", "b", "a", "ab", "b"]


def test_a_failed_report_run_lets_every_search_end_then_stops_in_one_message(tmp_path):
    """A NaN on one report seed of one search raised inside the loop: the other searches were
    never told their report's outcomes, and a study report was never written. Now every search
    ends with its report (the run counted as failed), then one message names the failed runs."""

    def a_report_nan(values, seed):
        nan = values["hydra.sweep.subdir"].startswith("a/report") and seed == 12
        return None if nan else weight_score(values, seed)

    launch = FakeLauncher(tmp_path, a_report_nan)
    searches = [make_search(tmp_path / name, launch, n_trials=1, **SMALL).search for name in "ab"]
    run_searches(searches, lambda jobs: launch(job_overrides(jobs, tmp_path)), 2)
    assert all(search.finished for search in searches)
    assert "Held out" in (tmp_path / "b" / "search_report.md").read_text()
    assert "failed" in (tmp_path / "a" / "search_report.md").read_text()
    with pytest.raises(IsotuneError, match="lacks 2 of its 12 runs") as stopped:
        check_reports_complete(searches)
    named = [line for line in str(stopped.value).splitlines() if "NonFiniteLossError" in line]
    assert len(named) == 2 and all("a/report/" in line and "seed-12" in line for line in named)
    check_reports_complete(searches[1:])  # b alone completed


def test_a_search_refuses_a_job_whose_folder_holds_a_link_leading_out(tmp_path):
    """As every plain sweep does: the job never reaches the launcher, its refusal is its
    record, and its trial FAILs with the refusal as the reason."""
    folder = tmp_path / "search"
    (tmp_path / "elsewhere").mkdir()
    job_dir = folder / "trial-000" / "seed-2"
    job_dir.mkdir(parents=True)
    (job_dir / "checkpoints").symlink_to(tmp_path / "elsewhere")
    launch = FakeLauncher(folder, weight_score)
    make_search(folder, launch, n_trials=2, max_failure_rate=1.0, **SMALL).run()
    launched = [dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"] for job in launch.jobs]
    assert "trial-000/seed-1" in launched and "trial-000/seed-2" not in launched
    trials = pd.read_csv(folder / "trials.csv")
    refused = trials[trials.trial == 0]
    assert set(refused.state) == {"FAIL"} and list(refused.seed) == [1, 2]
    assert "symbolic links that lead out of it" in refused.reason.iloc[0]
    record = json.loads((job_dir / "results.json").read_text())
    assert record["status"] == "failed" and "lead out of it" in record["error"]
    assert not any((tmp_path / "elsewhere").iterdir())  # nothing written through the link


def test_a_search_that_cannot_fit_on_its_disk_is_refused_before_any_job(tmp_path, monkeypatch):
    """Its whole budget is counted, as a plain sweep's: 4 trials on 2 tuning seeds and 3 report
    seeds on each side, on a disk with 1 MB free."""
    overrides = ["hparams_search=istar", "checkpoint.keep=full"]
    launch = FakeLauncher(tmp_path, weight_score)
    settings = make_search(tmp_path, launch, *overrides[1:], **SMALL, n_trials=4).search.settings
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=1_000_000))
    cfg = compose_train_config(overrides)
    baseline_job = compose_train_config([*overrides, *settings.baseline, "seed=11"])
    with pytest.raises(IsotuneError, match="check_free_space=false") as refused:
        check_search_fits(cfg, settings, 1, tmp_path, baseline_job)
    assert "14 jobs with checkpoint.keep=full" in str(refused.value)
    assert launch.launches == []


def test_a_search_continued_is_sized_by_the_runs_it_has_left(tmp_path, monkeypatch, caplog):
    """Ten of its 14 runs completed before it stopped: the disk must hold the other four, not
    all 14 again (their folders take their disk already)."""
    overrides = ["hparams_search=istar", "checkpoint.keep=full"]
    launch = FakeLauncher(tmp_path, weight_score)
    settings = make_search(tmp_path, launch, *overrides[1:], **SMALL, n_trials=4).search.settings
    for trial in range(10):
        result = completed("minilm", "none", "rte", 1, 0.6)
        write_run(tmp_path / f"trial-{trial:03d}" / "seed-1", ["seed=1"], result)
    cfg = compose_train_config(overrides)
    baseline_job = compose_train_config([*overrides, *settings.baseline, "seed=11"])
    run = RunFootprint.of(parameter_count(str(cfg.model.name_or_path)), "full", "full")
    usage = shutil.disk_usage(tmp_path)
    room = usage._replace(free=sweep_footprint([run] * 4, 1))  # four runs' room, not 14
    monkeypatch.setattr(shutil, "disk_usage", lambda path: room)
    with caplog.at_level(logging.INFO):
        check_search_fits(cfg, settings, 1, tmp_path, baseline_job)  # not refused
    assert "for its 4 jobs left (10 completed before)" in caplog.text
    assert launch.launches == []


@pytest.mark.parametrize(
    ("overrides", "settings", "arguments", "named"),
    [
        ([], {"params": {"optim.lrr": "interval(1e-5, 1e-3)"}}, [], "optim.lrr is not in"),
        ([], {"baseline": {"reg.weigth": 0}}, [], "baseline's key (hydra.sweeper.baseline) reg"),
        ([], {"seeds": [1, 2], "report_seeds": [2, 3]}, [], "Seeds [2]"),
        ([], {"n_trials": 0}, [], "n_trials=0"),
        (["hydra.sweeper.sampler=random"], {}, [], "Fix: hydra/sweeper/sampler=random"),
        ([], {}, ["reg.weight=0.5"], "fixed on the command line"),
        ([], {}, ["seed=3"], "seed=3: set by the search"),
        ([], {"params": {"reg.weight": "tag(log, interval(0, 1))"}}, [], "low end above 0"),
        ([], {"baseline": {"reg": "nonee"}}, [], "Could not find 'reg/nonee'"),
        ([], {"baseline": {"seed_data": 3}}, [], "seed_data=3 (in the config) of the search's"),
        ([], {"report_seeds": [-5]}, [], "[-5] not a seed"),
        ([], {"seeds": [1, 2**32]}, [], "[4294967296] not a seed"),
        # quoted, as typed in any shell: zsh stops at an unquoted [ with "no matches found"
        ([], {"report_seeds": []}, [], "'hydra.sweeper.report_seeds=[101,102,103,104,105]'"),
        ([], {"seeds": [], "report_seeds": [1, 2]}, [], "'hydra.sweeper.seeds=[3,4,5]'"),
        ([], {"params": {"norm": "choice(isobn, nonee)"}}, [], "searched option norm=nonee"),
        ([], {}, ["task=rte,mrpc"], "run one search per task"),
        ([], {}, ["model=minilm,bert"], "run one search per model"),
    ],
)
def test_bad_search_settings_stop_before_any_job(tmp_path, overrides, settings, arguments, named):
    launch = FakeLauncher(tmp_path, weight_score)
    with pytest.raises(IsotuneError) as refused:
        make_search(tmp_path, launch, *overrides, arguments=arguments, **settings).run()
    assert named in str(refused.value) and "Fix" in str(refused.value)
    assert launch.launches == []


def _search_sweeper(
    typed: list[str], loader: ConfigLoaderImpl | None = None
) -> tuple[OptunaSweeper, list[str]]:
    """The sweeper of ``python train.py -m <typed>``, set up as Hydra sets it up, and the
    arguments Hydra gives its ``sweep`` (the typed ones but ``hydra.*``)."""
    cfg = compose_train_config(typed)
    settings = OmegaConf.to_container(cfg.hydra.sweeper)
    sweeper = OptunaSweeper(**{k: v for k, v in settings.items() if not k.startswith("_")})
    loader = loader or ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))
    context = HydraContext(config_loader=loader, callbacks=Callbacks())
    sweeper.setup(hydra_context=context, task_function=lambda _: None, config=cfg)
    return sweeper, [arg for arg in typed if not arg.startswith("hydra.")]


def test_the_sweeper_composes_the_baseline_before_any_job_and_exits_1(tmp_path, caplog):
    """`python train.py -m hparams_search=istar 'hydra.sweeper.baseline={reg: nonee}'` ran every
    trial, then "MissingConfigException", exit 0. The sweeper composes the baseline through
    Hydra's own config loader first: one message, "Search folder:" once, exit 1."""
    typed = ["hparams_search=istar", f"paths.log_dir={tmp_path}"]
    sweeper, _ = _search_sweeper([*typed, "hydra.sweeper.baseline={reg: nonee}"])
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as stopped:
        sweeper.sweep(typed)
    assert stopped.value.code == 1
    assert "Could not find 'reg/nonee'" in caplog.text and "Fix:" in caplog.text
    assert caplog.text.count("Search folder:") == 1
    assert not list(tmp_path.rglob("results.json"))


def test_a_search_whose_model_no_job_could_load_is_refused_before_any_job(tmp_path, caplog):
    """Issue 52: a model whose package is not installed was only left out of the disk check's
    estimate, with a warning, then every trial failed at its start."""
    typed = ["hparams_search=istar", f"paths.log_dir={tmp_path}"]
    sweeper, arguments = _search_sweeper([*typed, "model.name_or_path=pkg://isotune_absent/m"])
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as stopped:
        sweeper.sweep(arguments)
    assert stopped.value.code == 1
    assert "'isotune_absent', which is not installed. Fix:" in caplog.text
    assert not list(tmp_path.rglob("results.json")) and not list(tmp_path.rglob("*.yaml"))


def test_a_search_whose_task_files_are_missing_is_refused_before_any_job(tmp_path, caplog):
    """Issue 52: a missing data file, which the study refuses before any job, failed every trial
    of a plain search at its start."""
    glue = tmp_path / "glue"
    (glue / "RTE").mkdir(parents=True)
    (glue / "RTE" / "train.tsv").write_text("x\n")  # no dev.tsv
    typed = ["hparams_search=istar", f"paths.log_dir={tmp_path}", f"paths.glue_dir={glue}"]
    sweeper, arguments = _search_sweeper(typed)
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as stopped:
        sweeper.sweep(arguments)
    assert stopped.value.code == 1
    assert "Task rte is not available offline" in caplog.text and "dev.tsv missing" in caplog.text
    assert not list(tmp_path.rglob("results.json"))


def test_the_sweeper_composes_the_baseline_once_before_any_job(tmp_path, monkeypatch, glue_dir):
    """The dry run and the disk check composed the baseline each (a second or more each, and
    two paths that could drift): now the dry run's config is the disk check's."""
    typed = ["hparams_search=istar", f"paths.log_dir={tmp_path}", f"paths.glue_dir={glue_dir}"]
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))
    composed = []
    compose = loader.load_sweep_config
    monkeypatch.setattr(
        loader, "load_sweep_config", lambda c, o: composed.append(list(o)) or compose(c, o)
    )
    sized = []
    monkeypatch.setattr(sweep_space, "check_sweep_fits", lambda f, jobs, *_: sized.extend(jobs))
    monkeypatch.setattr(_hydra_search, "run_searches", lambda *_: None)  # no job runs
    monkeypatch.setattr(_hydra_search, "check_reports_complete", lambda _: None)
    sweeper, arguments = _search_sweeper(typed, loader)
    sweeper.sweep(arguments)
    assert composed == [[*typed, "reg=none", "seed=101"]]
    assert len(sized) == 20 * 3 + 2 * 5 and {job.reg.name for job in sized} == {"none"}


def test_a_setting_fixed_after_its_refusal_is_not_refused_as_another_study(tmp_path):
    """`'hydra.sweeper.baseline={reg: nonee}'` used to run every trial, then stop; typed again
    fixed, it was refused as "other settings". Now: refused before the study exists."""
    with pytest.raises(IsotuneError, match="nonee"):
        make_search(tmp_path, FakeLauncher(tmp_path, weight_score), baseline={"reg": "nonee"})
    launch = FakeLauncher(tmp_path, weight_score)
    make_search(tmp_path, launch, n_trials=1, baseline={"reg": "none"}, **SMALL).run()
    assert (tmp_path / "search_report.md").is_file()


def test_a_search_whose_report_runs_did_not_complete_stops_with_one_message(tmp_path):
    """ "1 of 3 jobs completed, 2 did not" ended with exit 0: the sweeper exits 1 on this error;
    the summary names each job by its path in the search folder, not as "#seed-12"."""

    def report_crashes(values, seed):
        return None if seed > 10 else weight_score(values, seed)

    with pytest.raises(IsotuneError, match="lacks 6 of its 6 runs") as stopped:
        make_search(tmp_path, FakeLauncher(tmp_path, report_crashes), n_trials=1, **SMALL).run()
    assert "type the same command again" in str(stopped.value)
    summary = summarize_sweep(tmp_path).text
    assert "  report/baseline/seed-12 failed" in summary and "#seed" not in summary


def test_seed_init_and_seed_data_fixed_by_hand_are_refused_with_seed_in_one_message(tmp_path):
    """seed_data=0 on a search's command line gave every tuning and report run the same batch
    order: the report seeds were not held out in it."""
    launch = FakeLauncher(tmp_path, weight_score)
    typed = ["seed_init=3", "seed_data=0"]  # composed into the config, and the sweep's arguments
    with pytest.raises(IsotuneError) as refused:
        make_search(tmp_path, launch, *typed, arguments=typed, **SMALL).run()
    assert str(refused.value).startswith("seed_init=3, seed_data=0: set by the search, not by")
    assert "Fix: drop them" in str(refused.value)
    params = {"reg.weight": "interval(0.1, 1)", "seed": "choice(1, 2)"}  # a preset's, say
    with pytest.raises(IsotuneError, match=r"^seed=<searched>, seed_data=0 \(in the config\): "):
        make_search(tmp_path, launch, "seed_data=0", params=params, **SMALL)
    assert launch.launches == []
    # Left to follow seed, they differ between every report run and every tuning run.
    kept = FakeLauncher(tmp_path / "kept", weight_score)
    make_search(tmp_path / "kept", kept, n_trials=1, **SMALL).run()
    tuning, report = (
        next(job for job in kept.jobs if where in " ".join(job)) for where in ("trial-", "report/")
    )
    runs = [
        compose_train_config([o for o in job if not o.startswith("hydra.")])
        for job in (tuning, report)
    ]
    assert runs[0].seed_init != runs[1].seed_init and runs[0].seed_data != runs[1].seed_data


def test_a_storage_that_cannot_be_written_stops_before_any_job(tmp_path):
    (tmp_path / "a-file").write_text("")
    launch = FakeLauncher(tmp_path / "search", weight_score)
    with pytest.raises(IsotuneError, match="Cannot write the study's storage"):
        make_search(
            tmp_path / "search", launch, storage=str(tmp_path / "a-file" / "journal.log")
        ).run()
    assert launch.launches == [] and not (tmp_path / "search").exists()


@pytest.mark.parametrize("preset", ["istar", "correg", "cosreg", "lr"])
def test_every_preset_composes_with_the_optuna_sweeper_in_a_fixed_folder(preset):
    cfg = compose_train_config([f"hparams_search={preset}"])
    assert cfg.hydra.sweeper._target_.endswith(".OptunaSweeper")
    assert cfg.hydra.mode.name == "MULTIRUN"
    assert str(cfg.hydra.sweep.dir).endswith(f"/search/{cfg.hydra.sweeper.study_name}")
    assert "${now:" not in OmegaConf.to_yaml(cfg.hydra.sweep)  # the same command continues
    space = parse_space(cfg.hydra.sweeper.params, [])
    assert space.searched


# ---- end to end, as typed ----
@pytest.mark.slow
def test_hparams_search_istar_runs_as_typed_then_continues_and_aggregates(
    tmp_path, tiny_bert, glue_dir
):
    command = [
        "-m", "hparams_search=istar", "hydra.sweeper.n_trials=2", "hydra.sweeper.seeds=[1,2]",
        "hydra.sweeper.report_seeds=[3,4]", "trainer=cpu", "trainer.max_epochs=1", "logger=none",
        *tiny_cli_overrides(tiny_bert, glue_dir),
    ]  # fmt: skip
    done = run_script("train.py", *command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "logs" / "search" / "istar_rte_minilm"
    assert "Held out" in (folder / "search_report.md").read_text()
    trials = pd.read_csv(folder / "trials.csv")
    assert len(trials) == 4 and set(trials.state) <= {"COMPLETE", "PRUNED"}
    results = [json.loads(p.read_text()) for p in folder.rglob("results.json")]
    assert len(results) == 8 and all(r["status"] == "completed" for r in results)

    more = run_script("train.py", *command, "hydra.sweeper.n_trials=3", cwd=tmp_path)
    assert more.returncode == 0, more.stderr[-3000:]
    assert sorted(pd.read_csv(folder / "trials.csv").trial.unique()) == [0, 1, 2]
    results = [json.loads(p.read_text()) for p in folder.rglob("results.json")]
    assert len([p for p in folder.glob("trial-*/seed-*/results.json")]) == 6
    assert all(len(r["attempts"]) == 1 for r in results)  # no job ran twice

    table = subprocess.run(
        [sys.executable, "-m", "isotune.aggregate", str(folder)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert (folder / "results_table.md").is_file()


@pytest.mark.slow
def test_a_batch_of_trials_runs_at_once_on_the_gpus_launcher(tmp_path, tiny_bert, glue_dir):
    done = run_script(
        "train.py", "-m", "hparams_search=istar", "hydra/launcher=gpus", "hydra.launcher.n_jobs=2",
        "hydra.sweeper.n_jobs=2", "hydra.sweeper.n_trials=2", "hydra.sweeper.pruner=null",
        "hydra.sweeper.seeds=[1,2]", "hydra.sweeper.report_seeds=[3]", "trainer=cpu",
        "trainer.max_epochs=1", "logger=none", *tiny_cli_overrides(tiny_bert, glue_dir),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "logs" / "search" / "istar_rte_minilm"
    jobs = sorted(p.parent.relative_to(folder) for p in folder.rglob("results.json"))
    assert [str(job) for job in jobs] == [
        "report/baseline/seed-3", f"report/{jobs[1].parts[1]}/seed-3",
        "trial-000/seed-1", "trial-000/seed-2", "trial-001/seed-1", "trial-001/seed-2",
    ]  # fmt: skip
    assert "Launching 4 jobs" in done.stdout + done.stderr  # both trials' seeds in one batch


@pytest.mark.slow
def test_a_search_stopped_mid_trial_continues_with_the_same_command(tmp_path, tiny_bert, glue_dir):
    command = [
        sys.executable, str(ROOT / "train.py"), "-m", "hparams_search=istar",
        "hydra.sweeper.n_trials=3", "hydra.sweeper.seeds=[1,2]", "hydra.sweeper.report_seeds=[3]",
        "hydra.sweeper.pruner=null", "trainer=cpu", "logger=none",
        *tiny_cli_overrides(tiny_bert, glue_dir),
        "trainer.max_epochs=30",  # still training when the signal comes, however fast the machine
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    folder = tmp_path / "logs" / "search" / "istar_rte_minilm"
    stopped = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    checkpoint = folder / "trial-001" / "seed-1" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 300
    while not checkpoint.is_file():  # trial 1's first job has saved its first epoch
        assert stopped.poll() is None and time.monotonic() < deadline, "no trial 1 to stop"
        time.sleep(0.2)
    stopped.send_signal(signal.SIGTERM)
    output = stopped.communicate(timeout=120)[0]
    assert stopped.returncode == 128 + signal.SIGTERM
    assert "Type the same command again" in output

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Continuing trials [1]" in again.stdout + again.stderr
    trials = pd.read_csv(folder / "trials.csv")
    assert list(trials.trial.unique()) == [0, 1, 2] and set(trials.state) == {"COMPLETE"}
    records = {
        str(p.parent.relative_to(folder)): json.loads(p.read_text())
        for p in folder.rglob("results.json")
    }
    assert all(r["status"] == "completed" for r in records.values())
    resumed = records.pop("trial-001/seed-1")
    assert [a["status"] for a in resumed["attempts"]] == ["interrupted", "completed"]
    assert resumed["attempts"][1]["resumed_from"].endswith("last.ckpt")
    assert all(len(r["attempts"]) == 1 for r in records.values())  # no other job ran twice


def _sweep_search(tmp_path: Path, typed: list[str], monkeypatch) -> list:
    """Sweep ``python train.py -m hparams_search=istar <typed>`` with no job run; the searches
    it would have run."""
    sweeper, arguments = _search_sweeper(
        ["hparams_search=istar", f"paths.log_dir={tmp_path}", *typed]
    )
    ran = []
    monkeypatch.setattr(_hydra_search, "run_searches", lambda searches, *_: ran.extend(searches))
    monkeypatch.setattr(_hydra_search, "check_reports_complete", lambda _: None)
    sweeper.sweep(arguments)
    return ran


def test_a_search_typed_again_from_other_code_is_refused_before_any_job(
    tmp_path, monkeypatch, caplog, glue_dir
):
    """Only a study checked that its sittings ran one code and one set of packages: a search
    continued after a ``git pull`` ranked trials of two commits against each other, silently."""
    folder = tmp_path / "search" / "istar_rte_minilm"
    provenance = machine_provenance()
    provenance["code"] = {**provenance["code"], "commit": "0123456789ab" * 3 + "0123"}
    job = folder / "trial-000" / "seed-1"
    write_run(
        job, ["seed=1"], {**completed("minilm", "istar", "rte", 1, 0.6), "provenance": provenance}
    )
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as stopped:
        _sweep_search(tmp_path, [f"paths.glue_dir={glue_dir}"], monkeypatch)
    assert stopped.value.code == 1
    assert f"The 1 run already in {folder} were made with other code or packages" in caplog.text
    assert "code.commit: this machine" in caplog.text and "012345678" in caplog.text
    assert "hydra.sweeper.allow_mixed_environment=true" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        mixed = ["hydra.sweeper.allow_mixed_environment=true", f"paths.glue_dir={glue_dir}"]
        ran = _sweep_search(tmp_path, mixed, monkeypatch)
    assert "allow_mixed_environment=true: continuing with both" in caplog.text
    assert [search.folder for search in ran] == [folder]


def test_too_few_trials_for_importances_leave_that_figure_out_without_a_warning(tmp_path):
    """Issue 52: with too few trials Optuna warned that it would draw every importance equal,
    and drew that figure, which says nothing: it is left out and logged, as a figure Optuna
    cannot draw."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        make_search(tmp_path, FakeLauncher(tmp_path, weight_score), n_trials=1, **SMALL).run()
    assert (tmp_path / "optimization_history.png").is_file()
    assert not (tmp_path / "param_importances.png").exists()


def test_a_failed_report_run_counts_at_its_trivial_score_in_the_intention_to_treat_line(
    tmp_path,
):
    """The paired test leaves a report run without a score out, flattering the arm that fails;
    the line beside it counts a failed run at its recorded trivial score, and leaves a run that
    has not ended (interrupted, missing) out as before: it is no outcome yet."""
    from isotune.search.expected_best_report import ExpectedBest
    from isotune.search.outcomes import TrialRow, read_outcome
    from isotune.search.report import HeldOut, report_text

    trivial = {"predictor": "majority class", "metric": "accuracy", "score": 0.5}
    scores = {
        "baseline": {11: 0.58, 12: 0.60, 13: 0.59, 14: 0.57, 15: 0.61},
        "best": {11: 0.62, 12: 0.64, 13: "failed", 14: "interrupted", 15: "missing"},
    }
    runs = {}
    for arm, by_seed in scores.items():
        for seed, score in by_seed.items():
            job_dir = tmp_path / arm / f"seed-{seed}"
            if isinstance(score, float):
                write_run(
                    job_dir, [], {**completed("m", "none", "rte", seed, score), "trivial": trivial}
                )
            elif score != "missing":
                write_run(job_dir, [], {"status": score, "error": "NaN loss", "trivial": trivial})
            runs.setdefault(arm, []).append(read_outcome(job_dir, seed))
    trial = TrialRow(0, "COMPLETE", {}, 0.65, runs["best"][:2])
    held_out = HeldOut(trial, ["optim.lr=0.0001"], [], runs["best"], runs["baseline"])
    text = report_text([trial], held_out, ExpectedBest.of([trial], True))
    plain = [0.62 - 0.58, 0.64 - 0.60]
    assert held_out.comparison.mean_difference == pytest.approx(np.mean(plain))
    itt = [*plain, 0.5 - 0.59]  # seed 13 at its trivial score; 14 and 15 not counted
    line = next(line for line in text.splitlines() if line.startswith("Intention to treat"))
    assert line.startswith(
        "Intention to treat (failed runs at their trivial score; 1 run in 3 pairs): "
        f"mean {np.mean(itt):.4f}, 95% t interval ["
    )
    assert f"paired t-test p {stats.ttest_1samp(itt, 0).pvalue:.4f}" in line
    # every report run with a score: nothing new is said
    complete = HeldOut(trial, [], [], runs["best"][:2], runs["baseline"])
    assert "Intention to treat" not in report_text(
        [trial], complete, ExpectedBest.of([trial], True)
    )
