"""A study of interventions (docs/study.md): its plan and the checks before any job, its
statistics against independent restatements (SciPy's paired tests, Holm's procedure spelled as a
step-down loop, ranks counted by hand), and the study report read from search folders with known
numbers (tests/helpers/studies.py)."""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf
from scipy import stats

from hydra_plugins.isotune_launcher import _study_search
from isotune.dashboard.cli import study_section
from isotune.data.reading import check_task_offline
from isotune.errors import IsotuneError
from isotune.record import folder_lock
from isotune.search.space import parse_space
from isotune.study import loop as study_loop
from isotune.study.comparison import (
    ALL_TASKS,
    across_tasks,
    arm_scores,
    arm_table,
    average_ranks,
    exploratory_outcomes,
    geometry_correlations,
    stated_answer,
    task_comparisons,
)
from isotune.study.figures import held_out_figure, tuning_figure
from isotune.study.looks_journal import LOOKS_FILE
from isotune.study.plan import check_arm_keys, plan_study
from isotune.study.preregistration import PLAN_FILE, new_registration, read_registration
from isotune.study.report import (
    REPORT_FILE,
    RESULTS_FILE,
    RUNS_FILE,
    stated_runs_held_back,
    write_study_report,
    write_study_reports,
)
from isotune.study.results import ArmOutcome, StudyRun, read_arm, read_study, runs_table
from isotune.study.sequential import SequentialPlan
from isotune.study.stated import stated_test
from isotune.study.stated_report import held_back_sentence
from isotune.sweeps import slurm_jobs
from isotune.sweeps.aggregate import aggregate
from isotune.sweeps.environment import check_continued_in_one_environment, machine_provenance
from isotune.sweeps.power import minimum_detectable_difference, pairs_needed
from isotune.sweeps.report import status_markdown
from isotune.sweeps.rerun import plan_reruns
from isotune.sweeps.runs import JOURNAL_FILE, STUDY_SWEEPER, Sweep, find_sweeps, load_runs
from isotune.sweeps.slurm_jobs import SlurmJob
from isotune.sweeps.statistics import signed_rank_p
from isotune.sweeps.summary import summarize_sweep
from tests.conftest import ROOT, compose_train_config
from tests.helpers.cli import tiny_cli_overrides
from tests.helpers.fake_runs import completed, write_run
from tests.helpers.studies import (
    SMALL_STUDY,
    RecordingLauncher,
    looks_taken_now,
    refused_study,
    study_report_text,
    study_sweeper,
    write_search,
)

CATALOG = {
    "none": {"overrides": ["intervention=none"]},
    "isobn": {"overrides": ["intervention=isobn"]},
    "cosreg": {
        "overrides": ["intervention=cosreg"],
        "params": {"reg.weight": "tag(log, signed, interval(0.01, 10))"},
    },
}
SETTINGS = {
    "catalog": CATALOG,
    "arms": ["none", "isobn", "cosreg"],
    "baseline_arm": "none",
    "lr": "tag(log, interval(1e-5, 2e-4))",
    "n_trials": 3,
    "seeds": [1, 2],
    "report_seeds": [101, 102, 103, 104, 105],
}
KEYS = {"intervention", "optim.lr", "reg.weight"}
TASK_FILES = {
    "glue_dir": "RTE",
    "eval_splits": ["validation"],
    "files": {"train": "train.tsv", "validation": "dev.tsv"},
}


def _plan(tmp_path: Path, **changes):
    glue = tmp_path / "glue"
    (glue / "RTE").mkdir(parents=True, exist_ok=True)
    for name in ("train.tsv", "dev.tsv"):
        (glue / "RTE" / name).write_text("x\n")
    plan = plan_study({**SETTINGS, **changes}, ["rte"])
    for arm in plan.arms:
        check_arm_keys(arm, KEYS.__contains__)
    check_task_offline("rte", TASK_FILES, glue)
    return plan


# ---- the plan and its checks ----
def test_every_arm_searches_the_learning_rate_with_the_same_budget(tmp_path):
    plan = _plan(tmp_path)
    assert [arm.name for arm in plan.arms] == ["none", "isobn", "cosreg"]
    assert all(arm.params["optim.lr"] == SETTINGS["lr"] for arm in plan.arms)
    assert set(plan.arms[2].params) == {"optim.lr", "reg.weight"}
    assert plan.jobs == 3 * (3 * 2 + 5)  # per arm: 3 trials x 2 tuning seeds, 5 report seeds


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"arms": ["none", "istar_tuned"]}, "Unknown arm(s) ['istar_tuned']"),
        ({"arms": ["none"]}, "hydra.sweeper.arms=['none'] names one arm"),  # compares nothing
        ({"baseline_arm": "batchnorm"}, "baseline arm 'batchnorm'"),
        (
            {"catalog": {**CATALOG, "isobn": {"overrides": ["norm.alpha=1"]}}},
            "Arm 'isobn' sets norm.alpha, which is not in the config",
        ),
        (
            {"catalog": {**CATALOG, "cosreg": {**CATALOG["cosreg"], "n_trials": 10}}},
            "cosreg: n_trials=10 (the study's 3)",
        ),
        ({"report_seeds": [2, 101]}, "Seeds [2] are both tuning seeds"),
        (  # a key nothing reads: the arm would search the preset's range in silence
            {"catalog": {**CATALOG, "cosreg": {**CATALOG["cosreg"], "param": {"reg.weight": 1}}}},
            "hydra.sweeper.catalog.cosreg.param is not a key of an arm",
        ),
        (  # the baseline's learning rate fixed: an untuned baseline, as the study forbids
            {"catalog": {**CATALOG, "none": {**CATALOG["none"], "params": {"optim.lr": 2e-5}}}},
            "Arm 'none' sets optim.lr=2e-05 in its params",
        ),
    ],
)
def test_a_plan_that_would_break_the_study_is_refused_in_one_message(tmp_path, changes, message):
    with pytest.raises(IsotuneError) as error:
        _plan(tmp_path, **changes)
    assert message in str(error.value)
    assert "Fix:" in str(error.value)


def test_a_task_without_its_files_offline_is_refused_by_name(tmp_path, monkeypatch):
    configs = {"rte": TASK_FILES, "mrpc": {**TASK_FILES, "glue_dir": "MRPC"}}
    (tmp_path / "RTE").mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / "RTE" / name).write_text("x\n")
    check_task_offline("rte", configs["rte"], tmp_path)
    with pytest.raises(IsotuneError, match=r"Task mrpc is not available offline: .*MRPC/train"):
        check_task_offline("mrpc", configs["mrpc"], tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(IsotuneError, match="Task rte cannot be read offline: GLUE_DIR is not"):
        check_task_offline("rte", configs["rte"], None)


# ---- the statistics, restated ----
def _outcome(task, arm, scores, tuned=None, trials=(0.5,), geometry=None, final=None):
    """An arm's search whose report runs scored ``scores`` at their best epoch and ``final`` at
    their last (None: the same), with ``geometry`` (IsoScore; its negative the average cosine)
    at their last epoch."""

    def measures(seed):
        return (
            {} if geometry is None else {"isoscore": geometry[seed], "avg_cosine": -geometry[seed]}
        )

    final = final or scores
    runs = tuple(
        StudyRun(
            task,
            arm,
            "report",
            None,
            seed,
            score,
            True,
            "completed",
            measures(seed),
            final_score=final[seed],
        )
        for seed, score in scores.items()
    )
    return ArmOutcome(task, arm, {"optim.lr": 1e-4}, tuned, tuple(trials), runs)


SEEDS = [101, 102, 103, 104, 105, 106]
RTE = {
    "none": [0.55, 0.57, 0.54, 0.58, 0.56, 0.53],
    "isobn": [0.56, 0.60, 0.555, 0.585, 0.59, 0.57],
    "cosreg": [0.50, 0.58, 0.49, 0.52, 0.57, 0.56],
    "whitening": [0.545, 0.575, 0.53, 0.575, 0.565, 0.52],
}
MRPC = {
    "none": [0.70, 0.72, 0.68, 0.71, 0.74, 0.69],
    "isobn": [0.73, 0.71, 0.705, 0.76, 0.745, 0.72],
    "cosreg": [0.69, 0.735, 0.70, 0.73, 0.72, 0.715],
    "whitening": [0.68, 0.70, 0.71, 0.69, 0.725, 0.665],
}


def _study():
    return [
        _outcome(task, arm, dict(zip(SEEDS, scores, strict=True)), tuned=max(scores) + 0.01)
        for task, table in (("rte", RTE), ("mrpc", MRPC))
        for arm, scores in table.items()
    ]


def _holm_step_down(pvalues):
    """Holm (1979) as he states it: reject in ascending order while p_(i) <= alpha / (m - i + 1);
    the adjusted p is the smallest alpha at which each hypothesis would be rejected."""
    m = len(pvalues)
    order = np.argsort(pvalues)
    adjusted = np.empty(m)
    for position, index in enumerate(order):
        needed = [pvalues[order[j]] * (m - j) for j in range(position + 1)]
        adjusted[index] = min(1.0, max(needed))
    return adjusted


def _signed_rank_by_enumeration(d):
    """The two-sided signed-rank p over all 2^n sign flips of the midranks of |d| (no zeros)."""
    ranks = stats.rankdata(np.abs(d))
    centre = ranks.sum() / 2
    observed = abs(ranks[d > 0].sum() - centre)
    flips = itertools.product([0, 1], repeat=len(d))
    sums = [abs(np.dot(signs, ranks) - centre) for signs in flips]
    return float(np.mean(np.array(sums) >= observed - 1e-9))


def test_each_arm_against_the_baseline_on_a_task_matches_scipys_paired_tests():
    table = task_comparisons(_study(), "none")
    p_wilcoxon, p_t = [], []
    for task, scores in (("rte", RTE), ("mrpc", MRPC)):
        rows = table.loc[table["task"] == task].set_index("arm")
        for arm in ("isobn", "cosreg", "whitening"):
            d = np.subtract(scores[arm], scores["none"])
            row = rows.loc[arm]
            assert row["n"] == 6 and row["mean_difference"] == pytest.approx(d.mean())
            half = stats.t.ppf(0.975, 5) * d.std(ddof=1) / math.sqrt(6)
            assert (row["t_low"], row["t_high"]) == pytest.approx(
                (d.mean() - half, d.mean() + half)
            )
            assert row["ttest_p"] == pytest.approx(
                stats.ttest_rel(scores[arm], scores["none"]).pvalue
            )
            exact = _signed_rank_by_enumeration(np.round(d, 9))
            assert row["wilcoxon_p"] == pytest.approx(exact)
            p_wilcoxon.append(exact)
            p_t.append(row["ttest_p"])
    # one family: every arm on every task, as the folder's paired_statistics.csv adjusts over
    assert list(table["wilcoxon_p_holm"]) == pytest.approx(list(_holm_step_down(p_wilcoxon)))
    assert list(table["ttest_p_holm"]) == pytest.approx(list(_holm_step_down(p_t)))
    assert set(table["holm_family"]) == {"every arm against the baseline arm on every task (6)"}


def test_power_of_each_comparison_from_the_spread_of_its_differences():
    # the noncentral t's figures themselves: tests/test_statistics.py, against simulated t-tests
    table = task_comparisons(_study(), "none").set_index(["task", "arm"])
    d = np.subtract(RTE["cosreg"], RTE["none"])
    s = d.std(ddof=1)
    row = table.loc["rte", "cosreg"]
    assert row["std_of_differences"] == pytest.approx(s)
    assert row["detectable_difference"] == pytest.approx(minimum_detectable_difference(s, 6))
    needed = row["pairs_needed"]
    assert needed > 6  # its mean of -0.0133 is below what 6 pairs detect
    assert needed == pairs_needed(d.mean(), s)


def test_differences_without_spread_print_no_plan_in_the_report():
    # five pairs all at +1 example of 277, and five equal to the baseline: no estimate of the
    # spread, so no detectable difference of 0 and no "2 seeds" to detect it
    correct = dict(zip(SEEDS[:5], [141, 142, 151, 157, 161], strict=True))
    outcomes = [
        _outcome(
            "rte", arm, {seed: float(np.float32((k + gained) / 277)) for seed, k in correct.items()}
        )
        for arm, gained in (("none", 0), ("isobn", 1), ("cosreg", 0))
    ]
    per_task = task_comparisons(outcomes, "none").set_index("arm")
    for arm in ("isobn", "cosreg"):
        assert per_task.loc[arm, "std_of_differences"] == 0.0
        assert per_task.loc[arm, "detectable_difference"] is None
        assert per_task.loc[arm, "pairs_needed"] is None
    text = study_report_text(outcomes)
    rows = {}  # each arm's first row: the held-out table's
    for line in text.splitlines():
        rows.setdefault(line.split(" | ")[0], line)
    for arm in ("isobn", "cosreg"):
        assert rows[f"| {arm}"].endswith("| no spread: no estimate | no spread: no estimate |")


def test_an_arm_equal_to_the_baseline_counts_in_holms_family_at_p_one():
    scores = dict(zip(SEEDS, RTE["none"], strict=True))
    gains = [0.01, 0.02, 0.015, 0.03, 0.025, 0.035]
    better = dict(zip(SEEDS, np.add(RTE["none"], gains), strict=True))
    table = task_comparisons(
        [
            _outcome("rte", "none", scores),
            _outcome("rte", "isobn", dict(scores)),
            _outcome("rte", "cosreg", better),
        ],
        "none",
    ).set_index("arm")
    assert table.loc["isobn", "wilcoxon_p"] == 1.0 and table.loc["isobn", "ttest_p"] == 1.0
    # 6 positive pairs: 2 / 2^6, doubled by a family of 2, not left alone in a family of 1
    assert table.loc["cosreg", "wilcoxon_p_holm"] == pytest.approx(2 * 2 / 2**6)


def test_across_tasks_the_differences_their_mean_and_the_ranks_and_no_pooled_test():
    across = across_tasks(_study(), "none").set_index("arm")
    for arm in ("isobn", "cosreg", "whitening"):
        d_rte = np.subtract(RTE[arm], RTE["none"])
        d_mrpc = np.subtract(MRPC[arm], MRPC["none"])
        row = across.loc[arm]
        assert row["difference_rte"] == pytest.approx(d_rte.mean())
        assert row["mean_of_differences"] == pytest.approx((d_rte.mean() + d_mrpc.mean()) / 2)
        # no test over the pooled (task, seed) pairs: they are not independent, and a test
        # there would stand outside the Holm family of the per-task tests
        assert not [key for key in row.index if "pooled" in key or key.endswith("_p")]
    # ranks counted by hand: 1 + the arms whose median is higher, ties sharing the mean rank
    expected = {}
    for table in (RTE, MRPC):
        medians = {arm: statistics.median(scores) for arm, scores in table.items()}
        for arm, m in medians.items():
            higher = sum(other > m for other in medians.values())
            tied = sum(other == m for other in medians.values())
            expected.setdefault(arm, []).append(higher + (tied + 1) / 2)
    ranks = average_ranks(_study())
    assert ranks == pytest.approx({arm: np.mean(r) for arm, r in expected.items()})
    assert across.loc["none", "average_rank"] == pytest.approx(ranks["none"])


@pytest.mark.parametrize("tasks", [2, 5])
def test_the_across_tasks_summary_says_why_it_tests_nothing_with_any_number_of_tasks(tasks):
    """The pairs of one task share its tuned settings and scale with 5 tasks as with 2: why the
    summary across tasks makes no test stands with any number of tasks."""
    outcomes = [
        _outcome(f"task{t}", arm, dict(zip(SEEDS, scores, strict=True)), tuned=0.6)
        for t in range(tasks)
        for arm, scores in RTE.items()
    ]
    text = study_report_text(outcomes)
    assert "They are descriptions, not tests: a test over every (task, seed) pair" in text
    assert ("describe these tasks, not tasks in general" in text) is (tasks < 5)


def test_a_one_task_study_repeats_no_row_across_tasks_and_says_what_four_runs_cannot_show():
    """One task, two arms, two report seeds each: rows "across tasks" would repeat the task's
    own, and a within-arm rho of 4 runs has 4 orderings, so no p below 0.5: said beside it."""
    outcomes = [
        _outcome("rte", "none", {101: 0.55, 102: 0.57}, 0.6, geometry={101: 0.1, 102: 0.2}),
        _outcome("rte", "isobn", {101: 0.58, 102: 0.61}, 0.6, geometry={101: 0.5, 102: 0.7}),
    ]
    correlations = geometry_correlations(outcomes)
    assert set(correlations["task"]) == {"rte"}  # no ALL_TASKS row
    text = study_report_text(outcomes)
    assert "2 arms on 1 task, each tuned" in text and "(s)" not in text
    assert f"| {ALL_TASKS} |" not in text and "Δ rte" not in text
    assert "One task: nothing to set side by side." in text
    (line,) = [line for line in text.splitlines() if line.startswith("| rte | isoscore | within")]
    assert "| 4 | 1.00 | 0.5000 |" in line and "no p falls below 0.5: too few points" in line


def test_the_optimism_is_how_much_the_tuning_flattered_an_arm_in_either_direction():
    """A loss tuned to 0.40 that reaches a held-out median of 0.50 was flattered by 0.10: the
    optimism was tuned - median whatever the direction, -0.10 for a minimized score."""
    outcome = _outcome("rte", "none", {101: 0.5, 102: 0.45, 103: 0.55}, tuned=0.40)
    assert arm_table([outcome], maximize=False)["optimism"][0] == pytest.approx(0.10)
    assert arm_table([outcome])["optimism"][0] == pytest.approx(-0.10)


def test_the_geometry_beside_the_score_and_its_rank_correlation():
    isoscores = {"rte": [0.1, 0.3, 0.2, 0.5, 0.4, 0.6], "mrpc": [0.3, 0.2, 0.6, 0.5, 0.1, 0.4]}
    outcomes = [
        _outcome(task, arm, dict(zip(SEEDS, scores, strict=True)), geometry=dict(
            zip(SEEDS, np.add(isoscores[task], i / 10), strict=True)))
        for task, table in (("rte", RTE), ("mrpc", MRPC))
        for i, (arm, scores) in enumerate(table.items())
    ]  # fmt: skip
    arms = arm_table(outcomes).set_index(["task", "arm"])
    assert arms.loc[("rte", "isobn"), "isoscore"] == pytest.approx(
        np.median(np.add(isoscores["rte"], 0.1))
    )
    correlations = geometry_correlations(outcomes)
    by_scope = {scope: table.set_index(["task", "measure"]) for scope, table in
                correlations.groupby("scope")}  # fmt: skip
    within, correlations = by_scope["within arms"], by_scope["pooled"]
    x = np.concatenate([np.add(isoscores["rte"], i / 10) for i in range(4)])
    y = np.concatenate(list(RTE.values()))
    row = correlations.loc[("rte", "isoscore")]
    assert row["n"] == 24 and row["rho"] == pytest.approx(stats.spearmanr(x, y).statistic)
    mx = np.concatenate([np.add(isoscores["mrpc"], i / 10) for i in range(4)])
    my = np.concatenate(list(MRPC.values()))
    pooled_x = np.concatenate([x - np.median(x), mx - np.median(mx)])
    pooled_y = np.concatenate([y - np.median(y), my - np.median(my)])
    pooled = correlations.loc[(ALL_TASKS, "avg_cosine")]
    assert pooled["rho"] == pytest.approx(stats.spearmanr(-pooled_x, pooled_y).statistic)
    # within arms: each arm's values centred on its own medians, then ranked together
    centred = [
        (np.subtract(isoscores["rte"], np.median(isoscores["rte"])), np.subtract(s, np.median(s)))
        for s in RTE.values()
    ]
    cx = np.round(np.concatenate([c[0] for c in centred]), 9)  # ties as the scores have them
    cy = np.round(np.concatenate([c[1] for c in centred]), 9)
    expected = stats.spearmanr(cx, cy).statistic
    assert within.loc[("rte", "isoscore"), "rho"] == pytest.approx(expected)
    assert within.loc[("rte", "isoscore"), "n"] == 24


# ---- the report, from search folders ----
@pytest.mark.slow  # draws its figures: matplotlib's import and drawing take seconds
def test_the_study_report_reads_every_search_and_writes_its_tables_and_figures(tmp_path):
    study = tmp_path / "study"
    numbers = {
        "none": ({0: 0.56, 1: 0.58, 2: 0.55}, [0.55, 0.57, 0.54, 0.56, 0.53]),
        "isobn": ({0: 0.60, 1: 0.57, 2: 0.59}, [0.56, 0.60, 0.555, 0.585, None]),
        "cosreg": ({0: 0.61, 1: 0.50, 2: 0.52, 3: 0.55, 4: 0.58}, [0.50, 0.58, 0.49, 0.52, 0.57]),
    }
    outcomes = []
    for arm, (trials, report) in numbers.items():
        folder = study / "rte" / arm
        write_search(
            folder, "rte", trials, dict(zip(SEEDS[:5], report, strict=True)), {"optim.lr": 3e-5}
        )
        outcomes.append(read_arm(folder, "rte", arm, SEEDS[:5]))
    isobn = outcomes[1]
    assert isobn.tuned_value == 0.60 and isobn.trial_values == (0.60, 0.57, 0.59)
    assert isobn.held_out_scores() == dict(zip(SEEDS[:4], [0.56, 0.60, 0.555, 0.585], strict=True))
    assert isobn.held_out[0].geometry == pytest.approx({"isoscore": 0.76, "avg_cosine": 0.44})

    text = write_study_report(study, outcomes, "none")
    assert (study / REPORT_FILE).read_text() == text
    for name in ("expected_best_rte.png", "held_out.png"):
        assert (study / name).stat().st_size > 0
    runs = pd.read_csv(study / RUNS_FILE)
    assert len(runs) == (3 + 3 + 5) * 2 + 3 * 5  # every tuning run and every report run
    assert list(runs.loc[runs["arm"] == "isobn", "status"]).count("failed") == 1
    record = yaml.safe_load((study / RESULTS_FILE).read_text())
    rows = {row["arm"]: row for row in record["arms"]}
    assert rows["isobn"]["held_out_runs"] == 4 and rows["isobn"]["without_score"] == 1
    assert rows["isobn"]["optimism"] == pytest.approx(
        0.60 - statistics.median([0.56, 0.60, 0.555, 0.585])
    )
    paired = {row["arm"]: row for row in record["per_task"]}
    assert (
        paired["isobn"]["n"] == 4
        and "Seeds without a pair, left out: 105" in paired["isobn"]["note"]
    )
    cosreg = [0.61, 0.50, 0.52, 0.55, 0.58]
    assert record["expected_best"]["rte/cosreg"][0] == pytest.approx(np.mean(cosreg))
    assert record["expected_best"]["rte/cosreg"][-1] == pytest.approx(
        sum(v * ((i / 5) ** 5 - ((i - 1) / 5) ** 5) for i, v in enumerate(sorted(cosreg), 1))
    )
    assert record["expected_best"]["rte/none"] == []  # 3 trials: their values are listed instead
    assert "none: 0.5600, 0.5800, 0.5500" in text
    assert "## rte" in text and "## Across tasks" in text and "One task: nothing to set" in text
    assert "| isobn | optim.lr=3e-05 | 0.6000 | 0.5725 ± " in text
    # made again from the folder and its record alone (the command line's task=rte replaced the
    # preset's tasks), as `python -m isotune.aggregate <study folder>` makes it
    record = {"sweeper": {"_target_": STUDY_SWEEPER, "tasks": ["rte", "mrpc"],
                          "arms": list(numbers), "baseline_arm": "none", "direction": "maximize",
                          "report_seeds": SEEDS[:5]},
              "overrides": {"task": ["study=isotropy_cpu", "task=rte"]}}  # fmt: skip
    (study / "multirun.yaml").write_text(yaml.safe_dump({"hydra": record}))
    again = read_study(study)
    assert again.outcomes == tuple(outcomes) and again.baseline == "none" and again.maximize
    (made,) = write_study_reports([Sweep.load(study)], tmp_path / "again")
    assert made == tmp_path / "again" / REPORT_FILE and made.read_text() == text
    # the W&B report of a study folder opens with the study report and its figures
    (heading, body, names), *_ = study_section(study)[0]
    assert heading == "Study study" and "### rte" in body and "## Across tasks" in body
    assert names == [
        "study/expected_best_rte",
        "study/held_out",
        "study/geometry_within_arms",
    ]
    assert study_section(study / "rte" / "none") == ([], {})


# ---- end to end, as typed ----
def _study_command(
    tiny_bert: Path,
    glue_dir: Path,
    *more: str,
    preset: str = "isotropy_cpu",
    report_seeds: str = "[3,4]",
) -> list[str]:
    """``python train.py -m study=<preset> task=rte`` at a tiny budget: two arms, one trial on
    one tuning seed, the ``report_seeds`` (two: 6 tiny runs), one job at a time."""
    return [
        sys.executable, str(ROOT / "train.py"), "-m", f"study={preset}", "task=rte",
        "hydra.sweeper.arms=[none,cosreg]", "hydra.sweeper.n_trials=1", "hydra.sweeper.seeds=[1]",
        f"hydra.sweeper.report_seeds={report_seeds}", "hydra.sweeper.n_jobs=1",
        "hydra.launcher.n_jobs=1", "trainer=cpu", "logger=none",
        *tiny_cli_overrides(tiny_bert, glue_dir), *more,
    ]  # fmt: skip


@pytest.mark.slow
def test_a_study_stopped_in_its_middle_continues_to_the_same_report(tmp_path, tiny_bert, glue_dir):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    whole, stopped_dir = tmp_path / "whole", tmp_path / "stopped"
    for cwd in (whole, stopped_dir):
        cwd.mkdir()
    command = _study_command(tiny_bert, glue_dir)
    # The whole study runs while the other is stopped and continued: one job each, both cores.
    whole_log = tmp_path / "whole.log"
    with whole_log.open("w") as output:
        done = subprocess.Popen(command, cwd=whole, env=env, stdout=output, stderr=output)
    stopped = subprocess.Popen(command, cwd=stopped_dir, env=env, stdout=subprocess.PIPE, text=True)
    try:
        first = stopped_dir / "logs" / "study" / "isotropy_cpu_minilm" / "rte" / "none"
        deadline = time.monotonic() + 300
        while not list(first.glob("report/trial-*/seed-3/results.json")):  # a search in its report
            assert stopped.poll() is None and time.monotonic() < deadline, "nothing to stop"
            time.sleep(0.2)
        stopped.send_signal(signal.SIGTERM)
        output = stopped.communicate(timeout=120)[0]
        assert stopped.returncode in (1, 128 + signal.SIGTERM), output[-3000:]  # 1: a job was cut
        assert "continue the study" in output and "isotune.rerun" not in output
        continued = stopped_dir / "logs" / "study" / "isotropy_cpu_minilm"
        before = {p: json.loads(p.read_text()) for p in continued.rglob("results.json")}
        done_before = [p for p, r in before.items() if r["status"] == "completed"]
        assert done_before  # the stop came after a completed run
        again = subprocess.run(command, cwd=stopped_dir, env=env, capture_output=True, text=True)
        done.wait(600)
    finally:
        for process in (done, stopped):
            if process.poll() is None:
                process.kill()
    assert again.returncode == 0, again.stderr[-3000:]
    # sized by the runs it has left: its completed ones take their disk already
    assert f"left ({len(done_before)} completed before)" in again.stdout + again.stderr
    results = {p: json.loads(p.read_text()) for p in continued.rglob("results.json")}
    assert len(results) == 6 and all(r["status"] == "completed" for r in results.values())
    assert all(results[p] == before[p] for p in done_before)  # no completed run ran again

    done_output = whole_log.read_text()
    assert done.returncode == 0, done_output[-3000:]
    folder = whole / "logs" / "study" / "isotropy_cpu_minilm"
    text = (folder / REPORT_FILE).read_text()
    assert "## rte" in text and "| cosreg |" in text and text in done_output
    assert "checkpoint.keep=none" in done_output
    assert "hydra.sweeper.keep_report_models=true keeps the report runs' models" in done_output
    runs = pd.read_csv(folder / RUNS_FILE)
    assert len(runs) == 2 * (1 + 2) and set(runs["status"]) == {"completed"}
    assert not list(folder.rglob("*.ckpt"))  # a study keeps the runs' records, not their models
    assert (continued / REPORT_FILE).read_text() == text  # the same tables as the whole study
    # the aggregate of the study folder makes its report again, running nothing
    again = subprocess.run(
        [sys.executable, "-m", "isotune.aggregate", str(folder), "--out", str(tmp_path / "agg")],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "agg" / REPORT_FILE).read_text() == text and text in again.stdout


@pytest.mark.parametrize(
    ("preset", "runs"), [("isotropy", 1820), ("isotropy_cpu", 104), ("isotropy_results", 66)]
)
def test_each_preset_plans_the_runs_docs_study_md_gives(preset, runs, tmp_path):
    cfg = compose_train_config([f"study={preset}"])
    settings = OmegaConf.to_container(cfg.hydra.sweeper, resolve=True)
    tasks = settings["tasks"]

    def in_config(key: str) -> bool:
        return key in cfg.hydra.runtime.choices or OmegaConf.select(cfg, key) is not None

    plan = plan_study(settings, tasks)
    for arm in plan.arms:
        check_arm_keys(arm, in_config)
    assert settings["n_jobs"] > 1  # every preset keeps more than one slot busy
    assert plan.jobs == runs and plan.baseline == "none"
    assert cfg.checkpoint.keep == "none"  # a study keeps its runs' records, not their models
    assert str(cfg.hydra.sweep.dir).endswith(f"/study/{settings['study_name']}")


def test_a_study_prunes_with_the_plain_searchs_default_pruner():
    """The study sweeper kept WilcoxonPruner (p 0.3) after the search's default became
    NoiseGapPruner: one default now, in the preset as composed."""
    cfg = compose_train_config(["study=isotropy"])
    search = compose_train_config(["hparams_search=lr"])
    assert OmegaConf.to_container(cfg.hydra.sweeper.pruner) == OmegaConf.to_container(
        search.hydra.sweeper.pruner
    )
    assert cfg.hydra.sweeper.pruner._target_ == "isotune.search.pruning.NoiseGapPruner"


# ---- the sweeper's refusals, before any job ----
def _swept_study(tmp_path: Path, glue_dir: Path, typed: list[str], score=None) -> list[str]:
    """Run the study of :func:`study_sweeper` to its end on :class:`RecordingLauncher` (its
    runs scored by ``score(reg, seed)``, if given); the job folders it launched, relative to the
    study folder."""
    sweeper, typed = study_sweeper(tmp_path, glue_dir, typed)
    sweeper.launcher = RecordingLauncher(tmp_path / "study" / "isotropy_minilm", score)
    sweeper.sweep([arg for arg in typed if not arg.lstrip("+").startswith("hydra.")])
    return sweeper.launcher.launched


REPORT_SEEDS = "hydra.sweeper.report_seeds="


def test_a_finished_study_with_more_report_seeds_runs_only_theirs_even_on_some_searches(
    tmp_path, glue_dir, caplog
):
    """Issue 53: a finished study typed again with more report seeds runs only the new seeds'
    report runs, tunes nothing again, and its report covers them all; continued on some of its
    searches (the confirmatory run: task=rte, arms none and cosreg), the others are left as they
    are, and said so. Its report seeds only grow: a shrunk list is refused before any job."""
    study = tmp_path / "study" / "isotropy_minilm"
    first = _swept_study(
        tmp_path,
        glue_dir,
        [
            *SMALL_STUDY,
            "hydra.sweeper.arms=[none,isobn,cosreg]",
            "hydra.sweeper.report_seeds=[3,4]",
        ],
    )
    assert len(first) == 3 * (1 + 2)
    with caplog.at_level(logging.INFO):
        again = _swept_study(
            tmp_path,
            glue_dir,
            [
                *SMALL_STUDY,
                "hydra.sweeper.arms=[none,cosreg]",
                "hydra.sweeper.report_seeds=[3,4,5,6]",
            ],
        )
    # seed by seed, the arms side by side: a study stopped in a sitting leaves whole pairs
    assert again == [
        f"rte/{arm}/report/trial-000/seed-{seed}" for seed in (5, 6) for arm in ("none", "cosreg")
    ]
    assert "1 other searches (rte/isobn), left as they are" in caplog.text
    runs = pd.read_csv(study / RUNS_FILE)
    assert set(runs["arm"]) == {"none", "cosreg"}
    assert sorted(runs[runs["phase"] == "report"]["seed"]) == [3, 3, 4, 4, 5, 5, 6, 6]
    assert "| cosreg |" in (study / REPORT_FILE).read_text()

    logged = refused_study(
        tmp_path,
        glue_dir,
        [*SMALL_STUDY, "hydra.sweeper.arms=[none,cosreg]", REPORT_SEEDS + "[3,5]"],
        expect_runs=True,
    )
    assert "hydra.sweeper.report_seeds=[3, 5] leaves out report seeds 4, 6 that" in logged
    assert "'hydra.sweeper.report_seeds=[3,4,5,6]' (only the new seeds' runs run" in logged
    assert "Fix:" in logged and "Seeds [1] are both" not in logged


@pytest.mark.parametrize(
    ("typed", "preset", "message"),
    [
        (["hydra.sweeper.sampler=random"], [], "sets the sampler to a value, not a sampler"),
        ([], ["seed_data=0"], "seed_data=0 (in the config): set by the search"),
        (["hydra.sweeper.seeds=[]"], [], "hydra.sweeper.seeds=[] must name one or more"),
        (["seed=7"], [], "the preset, an arm's entry (hydra.sweeper.catalog.<arm>), or"),
        (  # two sweepers' presets: a composition error without a fix before
            ["hparams_search=istar"],
            [],
            "hparams_search=istar and a study= preset are both on the command line",
        ),
    ],
)
def test_a_study_refuses_what_a_plain_search_refuses(tmp_path, glue_dir, typed, preset, message):
    """The study built its searches' settings by a copy of the search's builder, without its
    guards: a sampler typed as a value crashed on dict("random"), a preset's seed_data=0 ran,
    and seeds=[] raised IndexError. One builder now, one message each."""
    logged = refused_study(tmp_path, glue_dir, typed, preset)
    assert message in logged and "Fix:" in logged


def test_a_model_no_job_could_load_is_refused_before_any_job(tmp_path, glue_dir):
    """Issue 52: model=smollm2 without its package installed launched every trial, each failing
    at its start, and once installed the same command was refused for those failures."""
    logged = refused_study(tmp_path, glue_dir, ["model.name_or_path=pkg://isotune_absent/m.gguf"])
    assert "lives in the Python package 'isotune_absent', which is not installed" in logged
    assert "Fix:" in logged
    assert not (tmp_path / "study").exists() or not list((tmp_path / "study").rglob("*.log"))


def test_a_misspelt_arm_leaves_no_empty_study_folder_behind(tmp_path, glue_dir):
    """Issue 52: the folder lock, taken as Hydra's multirun starts, made the study folder; refused
    for a misspelt arm, the study left it behind holding only its .isotune.lock."""
    study = tmp_path / "study" / "isotropy_minilm"
    folder_lock.hold(study, "sweep")  # as the FolderLock callback does before the sweeper
    try:
        logged = refused_study(tmp_path, glue_dir, ["hydra.sweeper.arms=[none,isobm]"])
    finally:
        folder_lock.release(study)
    assert "Unknown arm(s) ['isobm']" in logged
    assert not study.exists()


def test_a_study_with_no_report_seed_names_a_fix_that_overlaps_no_tuning_seed(tmp_path):
    with pytest.raises(IsotuneError) as refused:
        _plan(tmp_path, seeds=[101, 102], report_seeds=[])
    assert "hydra.sweeper.report_seeds=[103,104,105,106,107]" in str(refused.value)


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        (["++hydra.sweeper.params.optim.lr=0.0001"], "hydra.sweeper.params is not a setting of"),
        (
            ["optim.lr=0.0001"],
            'to narrow the range, type e.g. \'++hydra.sweeper.lr="tag(log, interval(1e-5, 1e-4))"',
        ),
        (
            ["++hydra.sweeper.lr=0.0001"],
            "Arm 'none' searches nothing: hydra.sweeper.lr=0.0001 fixes the learning rate",
        ),
        (
            ["reg.weight=0.5"],
            "or type ++hydra.sweeper.catalog.istar.params.reg.weight=0.5 instead",
        ),
    ],
)
def test_a_study_names_fixes_that_work_in_a_study(tmp_path, glue_dir, typed, message):
    """A refusal named ++hydra.sweeper.params.optim.lr=..., which a study silently ignored
    (its searches' keys are in hydra.sweeper.catalog and hydra.sweeper.lr); optim.lr=0.0001's
    named ++hydra.sweeper.lr=0.0001, which left the arms without another knob nothing to search,
    refused as a plain search's "search one ... on the command line, or use an hparams_search="
    preset" (a study refuses both)."""
    logged = refused_study(tmp_path, glue_dir, typed)
    assert message in logged and "Fix:" in logged


def test_a_key_fixed_in_an_arms_params_is_fixed_in_its_search():
    """The fix the study names works: a plain value typed under an arm's params fixes the key
    the preset searches there."""
    cfg = compose_train_config(
        ["study=isotropy", "++hydra.sweeper.catalog.istar.params.reg.weight=0.5"]
    )
    settings = OmegaConf.to_container(cfg.hydra.sweeper, resolve=True)
    istar = next(arm for arm in plan_study(settings, ["rte"]).arms if arm.name == "istar")
    space = parse_space(dict(istar.params), list(istar.overrides))
    assert [key.key for key in space.searched] == ["optim.lr"]
    assert "reg.weight=0.5" in space.fixed


def test_the_learning_rates_range_typed_as_the_refusals_name_it_is_every_arms():
    cfg = compose_train_config(
        ["study=isotropy", '++hydra.sweeper.lr="tag(log, interval(1e-5, 1e-4))"']
    )
    settings = OmegaConf.to_container(cfg.hydra.sweeper, resolve=True)
    for arm in plan_study(settings, ["rte"]).arms:
        searched = parse_space(dict(arm.params), list(arm.overrides)).searched
        assert (searched[0].key, searched[0].distribution.high) == ("optim.lr", 1e-4)


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        (
            ["++hydra.sweeper.catalog.istar.params.reg.wieght='interval(0.1, 1)'"],
            "Arm 'istar' sets reg.wieght, which is not in the config",
        ),
        (
            ["hydra.sweeper.catalog.isobn.overrides=['norm=isobnn','reg=none']"],
            "Arm 'isobn' cannot run on task rte",
        ),
        (
            ["hydra.sweeper.catalog.none.overrides=['norm=nonee','reg=none']"],
            "Arm 'none' cannot run on task rte",
        ),
    ],
)
def test_each_arm_is_composed_and_its_keys_checked_before_any_job(
    tmp_path, glue_dir, typed, message
):
    """Only the baseline arm was composed, its error read as "Task 'rte' has no
    conf/task/rte.yaml", and reg.wieght passed as a key under the reg group: another arm's bad
    option failed every retry of its trials. Each (task, arm) is composed once now."""
    logged = refused_study(tmp_path, glue_dir, typed)
    assert message in logged and "Fix:" in logged
    assert "has no conf/task" not in logged


def test_a_seed_fixed_by_an_arms_option_is_refused_before_any_job(tmp_path, glue_dir, monkeypatch):
    """Only the study's own config was checked for seeds that do not follow ``seed``: an arm's
    option that fixed seed_data (an intervention is a global preset, and can) would have run
    every held-out run of that arm in one batch order."""
    compose = _study_search.compose_checked

    def isobn_fixes_seed_data(config, loader, overrides):
        job = compose(config, loader, overrides)
        if "norm=isobn" in overrides:
            job.seed_data = 3
        return job

    logged = refused_study(
        tmp_path,
        glue_dir,
        [],
        patch=lambda: monkeypatch.setattr(_study_search, "compose_checked", isobn_fixes_seed_data),
    )
    assert "seed_data=3 (in the config) of arm 'isobn': set by the search" in logged
    assert "Fix:" in logged


def test_an_arm_reads_only_the_studys_report_seeds(tmp_path):
    """read_arm read every seed-* of the best trial's report, the runs of report seeds an
    earlier setting of the study ran among them: unpaired with the other arms' runs."""
    write_search(tmp_path, "rte", {0: 0.6}, {101: 0.55, 102: 0.57, 7: 0.9}, {"optim.lr": 3e-5})
    outcome = read_arm(tmp_path, "rte", "none", (101, 102))
    assert outcome.held_out_scores() == {101: 0.55, 102: 0.57}


def test_a_carried_study_names_its_runs_relative_to_the_study_folder(tmp_path):
    """Issue 52: a study folder carried to another path kept the old absolute path in
    study_runs.csv for every tuning run (trials.csv records where they ran), while its report
    rows gave the current one."""
    old, carried = tmp_path / "old" / "rte" / "none", tmp_path / "carried" / "rte" / "none"
    write_search(old, "rte", {0: 0.6}, {101: 0.55}, {"optim.lr": 3e-5})
    shutil.move(tmp_path / "old", tmp_path / "carried")
    outcome = read_arm(carried, "rte", "none", (101,))
    assert [run.job_dir for run in outcome.runs] == [
        "rte/none/trial-000/seed-1",
        "rte/none/trial-000/seed-2",
        "rte/none/report/trial-000/seed-101",
    ]
    table = runs_table([outcome]).to_csv(index=False)
    assert "old" not in table
    assert "rte,none,tuning,0,1," in table and "rte,none,report,,101," in table  # no 0.0 trial


def test_a_study_whose_slurm_jobs_are_still_queued_is_refused(tmp_path, glue_dir, monkeypatch):
    """submitit writes its files into the study folder, while each search checked its own
    folder: jobs of a stopped study still queued on SLURM were sent a second time."""
    study = tmp_path / "study" / "isotropy_minilm"
    monkeypatch.setattr(
        slurm_jobs,
        "live_jobs",
        lambda sweep_dir: [SlurmJob("41_0", "PENDING")] if Path(sweep_dir) == study else [],
    )
    logged = refused_study(tmp_path, glue_dir, [])
    assert f"Jobs that {study} sent to SLURM are still queued" in logged
    assert "Continuing the study" in logged


def _stopped_by_ctrl_c(monkeypatch):
    def stopped(*_):
        raise KeyboardInterrupt

    return lambda: monkeypatch.setattr(study_loop, "run_searches", stopped)


def _run_made_elsewhere(study: Path) -> Path:
    """A completed run of the study's first search, recorded with this machine's packages and
    another commit: a study typed again after a ``git pull``."""
    job = study / "rte" / "none" / "trial-000" / "seed-1"
    provenance = machine_provenance()
    provenance["code"] = {**provenance["code"], "commit": "0123456789ab" * 3 + "0123"}
    write_run(
        job, ["seed=1"], {**completed("minilm", "none", "rte", 1, 0.6), "provenance": provenance}
    )
    return job


def test_a_study_typed_again_from_other_code_is_refused_before_any_job(tmp_path, glue_dir):
    """A study of several sittings mixed commits in silence: a ``git pull`` between two sittings
    changed the code of half its runs and none of its tables said so."""
    study = tmp_path / "study" / "isotropy_minilm"
    _run_made_elsewhere(study)
    stopped_while_loading = study / "rte" / "isobn" / "trial-000" / "seed-1"  # no environment yet
    write_run(stopped_while_loading, ["seed=1"], {"status": "interrupted", "steps": 0})
    logged = refused_study(tmp_path, glue_dir, [], expect_runs=True)
    assert f"The 1 run already in {study} were made with other code or packages" in logged
    assert "code.commit: this machine" in logged and "012345678" in logged
    assert f"python -m isotune.env {study}" in logged
    assert "hydra.sweeper.allow_mixed_environment=true" in logged
    assert not (study / "multirun.yaml").exists()  # refused before the study's record


def test_a_run_stopped_before_it_recorded_its_environment_mixes_nothing(tmp_path):
    """A study stopped by SIGTERM while a job loaded its model (its record written, its
    provenance not yet) was refused when typed again from the same checkout: the run's unknown
    environment differed from every field of this one."""
    job = tmp_path / "rte" / "none" / "trial-000" / "seed-1"
    write_run(job, ["seed=1"], {"status": "interrupted", "steps": 0})
    check_continued_in_one_environment(tmp_path, "hydra.sweeper.allow_mixed_environment", False)
    write_run(job, ["seed=1"], completed("minilm", "none", "rte", 1, 0.6))  # of unknown code
    with pytest.raises(IsotuneError, match=r"code\.commit: this machine"):
        check_continued_in_one_environment(tmp_path, "hydra.sweeper.allow_mixed_environment", False)


def test_a_study_allowed_to_mix_environments_says_so_and_goes_on(
    tmp_path, glue_dir, monkeypatch, caplog
):
    study = tmp_path / "study" / "isotropy_minilm"
    _run_made_elsewhere(study)
    with caplog.at_level(logging.WARNING, logger="isotune.sweeps.environment"):
        refused_study(
            tmp_path,
            glue_dir,
            ["hydra.sweeper.allow_mixed_environment=true"],
            code=128 + signal.SIGINT,
            patch=_stopped_by_ctrl_c(monkeypatch),
            expect_runs=True,
        )
    assert "allow_mixed_environment=true: continuing with both" in caplog.text
    assert (study / "multirun.yaml").is_file()  # it went on to its jobs


def test_a_stopped_study_says_its_summary_and_is_continued_never_rerun_job_by_job(
    tmp_path, glue_dir, monkeypatch
):
    """The study folder had no multirun.yaml, so a study stopped by Ctrl-C or SIGTERM said
    nothing of its runs. Its record is written before its first job now, and read as the
    study's, not as a search. Its summary said "Rerun them with: python -m isotune.rerun <study>"
    beside "type the same command again", and that rerun would have run its searches' jobs
    outside their searches."""
    logged = refused_study(
        tmp_path, glue_dir, [], code=128 + signal.SIGINT, patch=_stopped_by_ctrl_c(monkeypatch)
    )
    study = tmp_path / "study" / "isotropy_minilm"
    assert f"Sweep {study}: no job has started yet." in logged
    assert "continue the study" in logged
    assert Sweep.load(study).is_study and not Sweep.load(study).is_search
    lines = status_markdown([], [], [], [Sweep.load(study)], [], datetime.now()).splitlines()
    assert (
        f"- {study}: a study: its jobs are its searches'"
        in lines[lines.index("## Missing runs (0)") + 2]
    )

    job = study / "rte" / "none" / "trial-000" / "seed-1"
    write_run(job, ["seed=1"], {"status": "interrupted", "interrupted_by": "SIGTERM", "steps": 3})
    summary = summarize_sweep(study).text
    assert "0 of 1 job completed, 1 did not" in summary and "isotune.rerun" not in summary
    runs = load_runs(study)
    report = status_markdown(runs, runs, [], [Sweep.load(study)], [], datetime.now())
    assert "isotune.rerun" not in report
    assert f"its own command, typed again, continues it where it stopped ({study})" in report
    with pytest.raises(IsotuneError) as refused:
        plan_reruns(study)
    assert "is a study" in str(refused.value)
    assert "type the study's command again" in str(refused.value)


def test_a_studys_searches_are_named_by_the_study_in_the_status_of_its_runs(tmp_path):
    """The aggregate of a stopped study listed each of its searches beside the study as a sweep
    whose jobs cannot be listed, and named them among the folders whose "own command, typed
    again" continues them, which a study's search does not have: the study stands for them."""
    study = tmp_path / "study"
    search = study / "rte" / "none"
    search.mkdir(parents=True)
    (search / JOURNAL_FILE).write_text("")
    config = {"hydra": {"sweeper": {"_target_": STUDY_SWEEPER}}}
    write_run(search / "trial-000" / "seed-1", ["seed=1"], {"status": "interrupted", "steps": 3})
    runs = load_runs(study)
    report = status_markdown(
        runs, runs, [], [Sweep(study, config), Sweep(search, config)], [], datetime.now()
    )
    assert f"- {study}: a study" in report and f"- {search}:" not in report
    assert f"continues it where it stopped ({study})." in report


def test_a_task_whose_dev_split_is_not_validation_is_checked_by_its_own_files(tmp_path):
    """task=mnli raised KeyError: 'validation' (its dev splits are validation_matched and
    validation_mismatched)."""
    mnli = OmegaConf.to_container(compose_train_config(["task=mnli"]).task, resolve=True)
    (tmp_path / "MNLI").mkdir()
    for name in ("train.tsv", "dev_matched.tsv"):
        (tmp_path / "MNLI" / name).write_text("x\n")
    with pytest.raises(IsotuneError, match=r"MNLI/dev_mismatched.tsv missing"):
        check_task_offline("mnli", mnli, tmp_path)
    (tmp_path / "MNLI" / "dev_mismatched.tsv").write_text("x\n")
    check_task_offline("mnli", mnli, tmp_path)


def test_failures_count_report_runs_and_medians_use_the_seeds_every_arm_has():
    tuning = StudyRun("rte", "none", "tuning", 0, 1, 0.5, False, "completed")
    none = _outcome("rte", "none", {101: 0.50, 102: 0.60, 103: 0.90})
    none = ArmOutcome(
        "rte", "none", none.best_params, None, (0.5,), (*none.runs, tuning)
    )  # a tuning run that failed to learn: not one of the report's runs
    isobn = _outcome("rte", "isobn", {101: 0.55, 102: 0.65})
    table = arm_table([none, isobn]).set_index("arm")
    assert table.loc["none", "failed_to_learn"] == 0 and table.loc["none", "report_runs"] == 3
    # seed 103 has no isobn run: none's median is over 101 and 102, as its rank is
    assert table.loc["none", "held_out_median"] == pytest.approx(0.55)
    assert average_ranks([none, isobn]) == {"isobn": 1.0, "none": 2.0}


def test_below_five_trials_the_tuning_figure_shows_values_at_their_trial_numbers():
    outcome = _outcome("rte", "none", {101: 0.5}, trials=(0.6, None, 0.58))
    content = tuning_figure("rte", [outcome], maximize=True)
    assert "Dodge" not in content["title"] and "expected best" not in content["ylabel"]
    (series,) = content["series"]
    assert (series.x, series.y, series.curve) == ([0, 2], [0.6, 0.58], False)
    curve = _outcome("rte", "isobn", {101: 0.5}, trials=(0.6, 0.5, 0.58, 0.61, 0.59))
    assert "Dodge" in tuning_figure("rte", [outcome, curve], True)["title"]


def test_the_held_out_legend_covers_no_point():
    figure = held_out_figure(_study())
    figure.canvas.draw()
    last = figure.axes[-1]
    legend = last.get_legend().get_window_extent()
    assert legend.x0 >= last.get_window_extent().x1


def test_a_report_run_of_other_values_than_the_chosen_trial_is_refused_by_name(tmp_path):
    write_search(tmp_path, "rte", {0: 0.6}, {101: 0.55}, {"optim.lr": 3e-5})
    record = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    record["best_params"] = {"optim.lr": 5e-5}
    (tmp_path / "optimization_results.yaml").write_text(yaml.safe_dump(record))
    with pytest.raises(IsotuneError, match=r"seed-101 is a report run of the chosen trial, "
                       r"which set optim.lr=5e-05, but it ran optim.lr=3e-05"):  # fmt: skip
        read_arm(tmp_path, "rte", "none", (101,))


def test_a_report_with_a_missing_value_prints_na_and_links_its_figures(tmp_path):
    outcomes = [
        _outcome("rte", "none", {101: 0.5, 102: 0.6}, trials=(0.6, None, 0.58)),
        _outcome("rte", "isobn", {101: 0.55, 102: 0.6}, trials=(0.6,)),
    ]
    text = write_study_report(tmp_path, outcomes, "none")
    assert "± none" not in text and "a failed trial: n/a): none: 0.6000, n/a, 0.5800" in text
    assert "- [rte: tuning](expected_best_rte.png)" in text
    assert "- [held-out score per seed](held_out.png)" in text
    assert (tmp_path / "expected_best_rte.png").is_file() and (tmp_path / "held_out.png").is_file()
    assert "- [geometry against the score within arms](geometry_within_arms.png)" in text
    assert (tmp_path / "geometry_within_arms.png").is_file()


def test_a_search_inside_a_study_points_to_the_study_report(tmp_path):
    from isotune.search.expected_best_report import ExpectedBest
    from isotune.search.outcomes import JobOutcome, TrialRow
    from isotune.search.report import HeldOut
    from isotune.search.report import report_text as search_report_text

    job = JobOutcome(tmp_path, 101, 0.6, True, "completed", None)
    trial = TrialRow(0, "COMPLETE", {"optim.lr": 1e-4}, 0.62, [job])
    held_out = HeldOut(trial, ["optim.lr=0.0001"], [], [job], [])
    text = search_report_text([trial], held_out, ExpectedBest.of([trial], True))
    assert "../../study_report.md" in text
    assert "not run" not in text and "No seed has a score for both" not in text


def test_a_half_finished_study_reports_the_trials_its_journals_hold(tmp_path):
    """Stopped after trial 0 of each arm, before any trials.csv: the aggregate printed
    'Trial values: none: ; isobn: .' and '0 / 0 of 0' (issue 52, item 7)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from isotune.search.outcomes import JobOutcome

    outcomes = []
    for arm, value in (("none", 0.61), ("isobn", 0.63)):
        folder = tmp_path / "rte" / arm
        folder.mkdir(parents=True)
        storage = JournalStorage(JournalFileBackend(str(folder / JOURNAL_FILE)))
        study = optuna.create_study(study_name=f"rte-{arm}", storage=storage, direction="maximize")
        trial = study.ask()
        jobs = [JobOutcome(folder / "trial-000" / "seed-1", 1, value, True, "completed", None)]
        trial.set_user_attr("jobs", [job.as_record() for job in jobs])
        study.tell(trial, value)
        study.ask()  # trial 1 running when the study stopped: not a result
        outcomes.append(read_arm(folder, "rte", arm, (101,)))
    assert [o.trial_values for o in outcomes] == [(0.61,), (0.63,)]
    assert [len(o.runs) for o in outcomes] == [1, 1] and not any(o.finished for o in outcomes)
    text = write_study_report(tmp_path, outcomes, "none")
    assert "none: 0.6100; isobn: 0.6300." in text
    assert "not reported yet" in text and "0 / 0 of 0" not in text
    assert "Searches without a held-out report yet: rte/none, rte/isobn." in text


def test_a_study_keeping_its_report_models_asks_it_of_its_report_runs_only(
    tmp_path, glue_dir, caplog
):
    """hydra.sweeper.keep_report_models=true: the report runs keep their best model
    (checkpoint.keep=slim), the tuning runs none; the start message says so and the disk
    estimate counts the kept models."""
    typed = [
        *SMALL_STUDY,
        "hydra.sweeper.arms=[none,cosreg]",
        "hydra.sweeper.report_seeds=[3,4]",
        "hydra.sweeper.keep_report_models=true",
    ]
    sweeper, typed = study_sweeper(tmp_path, glue_dir, typed)
    sweeper.launcher = RecordingLauncher(tmp_path / "study" / "isotropy_minilm")
    with caplog.at_level(logging.INFO):
        sweeper.sweep([arg for arg in typed if not arg.lstrip("+").startswith("hydra.")])
    kept = {
        folder: dict(o.split("=", 1) for o in overrides).get("checkpoint.keep")
        for folder, overrides in sweeper.launcher.overrides.items()
    }
    assert {folder for folder, keep in kept.items() if keep == "slim"} == {
        f"rte/{arm}/report/trial-000/seed-{seed}" for arm in ("none", "cosreg") for seed in (3, 4)
    }
    assert {keep for folder, keep in kept.items() if "/report/" not in folder} == {None}
    assert "the report runs keep their best model (checkpoint.keep=slim" in caplog.text
    assert "for its 6 jobs; checkpoint.keep=" in caplog.text
    assert "; checkpoint.keep=none,slim," in caplog.text
    runs = pd.read_csv(tmp_path / "study" / "isotropy_minilm" / RUNS_FILE)
    assert len(runs[runs["phase"] == "report"]) == 4  # one configuration per arm, kept or not


# ---- the stated test (issue 60 item 1) ----
STATED = {"task": "rte", "arm": "cosreg", "seeds": [103, 104, 105, 106], "stated_at": "2026-12-04"}


def _stated(**changes):
    return stated_test({**STATED, **changes}, ["rte", "mrpc"], ["none", "cosreg"], "none", SEEDS)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"task": "sst2"},
            "hydra.sweeper.stated.task=sst2 is not a task of this study (rte, mrpc)",
        ),
        ({"arm": "isobn"}, "'hydra.sweeper.arms=[none,cosreg,isobn]'"),
        ({"baseline": "cosreg"}, "compares arm cosreg with itself"),
        ({"seeds": [105, 106, 107]}, "names 107, not among the study's report seeds"),
        ({"seeds": [105]}, "must name at least two different seeds"),
        # the search's seed check, one for both (review finding): it names the entry
        ({"seeds": [105, "106"]}, "['106'] not a seed (an integer from 0 to 2**32 - 1"),
        ({"alpha": 1.5}, "alpha=1.5 is not a level between 0 and 1"),
        # one name for alpha: the old one is refused where typed, with the new name
        ({"level": 0.05}, "stated.level is named alpha now"),
        ({"looks": [2, 4], "margin": 1}, "margin=1 spans a whole 0-1 metric"),
        ({"looks": [2, 4], "select_epoch": "first"}, "select_epoch='first' is not one of"),
        ({"stated_at": "2026-12-04T22:55"}, "is not a date (2026-12-04) or a time with its UTC"),
        ({"stated_at": None}, "does not say its stated_at"),
        ({"margn": 1}, "hydra.sweeper.stated has no key margn"),
    ],
)
def test_a_stated_test_the_study_cannot_answer_is_refused_naming_the_value_and_fix(
    changes, message
):
    with pytest.raises(IsotuneError, match=re.escape(message)) as refused:
        _stated(**changes)
    assert "Fix:" in str(refused.value)


def test_a_study_of_ones_own_files_states_its_task_as_files():
    """Issue 70: the stated task of a study on one's own data is `files`; the old fix typed
    `task=files,<name>`, which runs no such task."""
    with pytest.raises(IsotuneError, match="state task:files") as refused:
        stated_test({**STATED, "task": "sentiment"}, ["files"], ["none", "cosreg"], "none", SEEDS)
    assert "task=files," not in str(refused.value)
    assert stated_test({**STATED, "task": "files"}, ["files"], ["none", "cosreg"], "none",
                       SEEDS).task == "files"  # fmt: skip


def test_an_arms_held_out_scores_are_one_side_of_the_task_comparisons_and_the_stated_test():
    """One ``{seed: score}`` for both (review finding): on the stated seeds alone where given,
    and empty for an arm without an outcome on the task."""
    arms = {o.arm: o for o in _study() if o.task == "rte"}
    assert arm_scores(arms, "isobn") == dict(zip(SEEDS, RTE["isobn"], strict=True))
    assert arm_scores(arms, "isobn", (101, 104)) == {101: 0.56, 104: 0.585}
    assert arm_scores(arms, "lora") == {}


def test_the_stated_test_is_answered_on_its_own_seeds_first_and_the_rest_is_exploratory(
    tmp_path,
):
    """The confirmatory run's study report pooled the seeds that made the hypothesis with those
    that tested it (t p 0.032 where the stated test's was 0.095): the stated seeds alone now."""
    outcomes = _study()
    early = StudyRun("rte", "cosreg", "report", None, 104, 0.52, True, "completed", {}, "",
                     "2026-12-03T23:00:00+00:00")  # fmt: skip
    outcomes = [
        replace(o, runs=tuple(early if r.seed == 104 else r for r in o.runs))
        if (o.task, o.arm) == ("rte", "cosreg")
        else o
        for o in outcomes
    ]
    text = write_study_report(tmp_path, outcomes, "none", stated=_stated())
    d = np.array(RTE["cosreg"][2:]) - np.array(RTE["none"][2:])  # seeds 103-106
    low, high = stats.t.interval(0.95, len(d) - 1, d.mean(), stats.sem(d))
    assert text.index("## The stated test") < text.index("## rte")
    assert "report seeds 103-106 (4 pairs), two-sided at level 0.05" in text
    assert f"mean difference {d.mean():.4f}, 95% t interval [{low:.4f}, {high:.4f}]" in text
    assert (
        f"paired t-test p {stats.ttest_rel(RTE['cosreg'][2:], RTE['none'][2:]).pvalue:.4f}" in text
    )
    assert "**not told apart from `none`** at level 0.05" in text
    assert "runs started before the statement: 104 (2026-12-03T23:00:00+00:00)" in text
    assert "Everything below is exploratory" in text
    record = yaml.safe_load((tmp_path / RESULTS_FILE).read_text())["stated_test"]
    assert record["seeds"] == [103, 104, 105, 106] and record["pairs"] == 4
    assert record["interval"] == pytest.approx([low, high])


def test_a_stated_test_waits_for_every_stated_pair_and_takes_its_own_level(tmp_path):
    outcomes = _study()
    short = [
        replace(o, runs=tuple(r for r in o.runs if r.seed != 106)) if o.arm == "none" else o
        for o in outcomes
    ]
    waiting = stated_answer(_stated(seeds=[105, 106]), short)
    assert waiting.comparison is None and waiting.without_pair == (106,)
    text = write_study_report(tmp_path, short, "none", stated=_stated(seeds=[105, 106]))
    assert "1 of 2 stated pairs in (without a pair yet: 106)" in text and "Answer" not in text
    d = np.array(RTE["cosreg"]) - np.array(RTE["none"])
    answered = stated_answer(_stated(seeds=SEEDS, alpha=0.1), outcomes).comparison
    assert answered.t_interval == pytest.approx(
        stats.t.interval(0.90, len(d) - 1, d.mean(), stats.sem(d))
    )


def test_a_stated_test_naming_an_arm_the_study_lacks_is_refused_before_any_job(tmp_path, glue_dir):
    logged = refused_study(
        tmp_path,
        glue_dir,
        ["'hydra.sweeper.stated={task:rte,arm:whitening,seeds:[101,102],stated_at:\"2026-12-04\"}'"
         .strip("'"), "hydra.sweeper.arms=[none,isobn]"],
    )  # fmt: skip
    assert "hydra.sweeper.stated.arm=whitening is not an arm of this study (none, isobn)" in logged
    assert not (tmp_path / "study").exists() or not list((tmp_path / "study").rglob("*.json"))


def test_the_geometry_is_set_against_the_score_of_its_own_epoch_the_last():
    """The study read geometry at the best epoch, which the dev score chose (issue 60 item 2):
    the geometry and the score it is set against are both the last epoch's now, the comparisons
    keep the best epoch's score."""
    best = {101: 0.60, 102: 0.61, 103: 0.62, 104: 0.63}
    final = {101: 0.59, 102: 0.58, 103: 0.57, 104: 0.56}  # falls as IsoScore rises
    iso = {101: 0.1, 102: 0.2, 103: 0.3, 104: 0.4}
    outcome = _outcome("rte", "none", best, geometry=iso, final=final)
    pooled = geometry_correlations([outcome]).set_index(["task", "measure", "scope"])
    assert pooled.loc[("rte", "isoscore", "pooled"), "rho"] == pytest.approx(-1.0)
    row = arm_table([outcome]).iloc[0]
    assert row["final_median"] == pytest.approx(0.575)
    assert row["held_out_median"] == pytest.approx(0.615)


def test_a_failed_report_run_counts_at_its_trivial_score_beside_the_per_task_test(tmp_path):
    """Read from the run folders: an isobn report run that failed after recording its dev set's
    trivial score counts at it in the intention-to-treat line; one interrupted does not."""
    for arm, report in (
        ("none", dict(zip(SEEDS, RTE["none"], strict=True))),
        ("isobn", {101: 0.56, 102: 0.60, 103: None, 104: 0.585, 105: None, 106: 0.57}),
    ):
        write_search(tmp_path / arm, "rte", {0: 0.6}, report, {"optim.lr": 1e-4})
    trivial = {"predictor": "majority class", "metric": "accuracy", "score": 0.5}
    for seed, status in ((103, "failed"), (105, "interrupted")):
        job_dir = tmp_path / "isobn" / "report" / "trial-000" / f"seed-{seed}"
        write_run(job_dir, ["optim.lr=0.0001"], {"status": status, "trivial": trivial})
    outcomes = [read_arm(tmp_path / arm, "rte", arm, SEEDS) for arm in ("none", "isobn")]
    row = task_comparisons(outcomes, "none").set_index("arm").loc["isobn"]
    plain = [0.56 - 0.55, 0.60 - 0.57, 0.585 - 0.58, 0.57 - 0.53]
    assert row["n"] == 4 and row["mean_difference"] == pytest.approx(np.mean(plain))
    itt = [*plain, 0.5 - 0.54]  # seed 103 at its trivial score, 105 left out
    assert (row["itt_substituted"], row["itt_n"]) == (1, 5)
    assert row["itt_mean_difference"] == pytest.approx(np.mean(itt))
    assert row["itt_ttest_p"] == pytest.approx(stats.ttest_1samp(itt, 0).pvalue)
    text = study_report_text(outcomes)
    assert (
        "- isobn: Intention to treat (failed runs at their trivial score; 1 run in 5 pairs): "
        f"mean {np.mean(itt):.4f}, 95% t interval [" in text
    )
    # no report run failed: nothing new is said
    assert "Intention to treat" not in study_report_text(_study())


def _stated_arms_with_failures(folder: Path) -> list[ArmOutcome]:
    """rte's none and cosreg arms read from their run folders, cosreg's report run on seed 104
    failed twice (run again after its first failure), on 105 once (waiting to run again), on
    106 interrupted: each recorded its dev set's trivial score, 0.5."""
    for arm in ("none", "cosreg"):
        report = dict(zip(SEEDS, RTE[arm], strict=True))
        write_search(folder / arm, "rte", {0: 0.6}, report, {"optim.lr": 1e-4})
    trivial = {"predictor": "majority class", "metric": "accuracy", "score": 0.5}
    for seed, ends in ((104, ["failed", "failed"]), (105, ["failed"]), (106, ["interrupted"])):
        job_dir = folder / "cosreg" / "report" / "trial-000" / f"seed-{seed}"
        attempts = [{"status": status} for status in ends]
        record = {"status": ends[-1], "trivial": trivial, "attempts": attempts}
        write_run(job_dir, ["optim.lr=0.0001", f"seed={seed}"], record)
    return [read_arm(folder / arm, "rte", arm, SEEDS) for arm in ("none", "cosreg")]


def test_a_stated_run_that_failed_twice_counts_at_its_trivial_score_and_is_named(tmp_path):
    """Issue 61 item 2: a stated run that fails runs again; failing again it counts at its
    trivial score in the stated answer (intention to treat), which names it; failed once it
    waits for its rerun, and an interrupted run is no failure."""
    outcomes = _stated_arms_with_failures(tmp_path / "searches")
    answer = stated_answer(_stated(seeds=[103, 104]), outcomes)
    cosreg, none = np.array([RTE["cosreg"][2], 0.5]), np.array(RTE["none"][2:4])
    assert answer.comparison.mean_difference == pytest.approx(np.mean(cosreg - none))
    assert answer.comparison.ttest_p == pytest.approx(stats.ttest_rel(cosreg, none).pvalue)
    named = "rte/cosreg/report/trial-000/seed-104"
    assert answer.at_trivial == (("cosreg", 104, named),)
    assert (
        "Counted at its dev set's trivial score, having failed 2 times (intention to treat: a "
        "stated run that failed runs again; failing again, it counts as a run that learned "
        f"nothing): `cosreg` seed 104 ({named})." in study_report_text(outcomes, answer=answer)
    )
    record = answer.as_record()  # study_results.yaml's stated_test
    assert record["at_trivial_score"] == [{"arm": "cosreg", "seed": 104, "run": named}]
    for seeds, waiting in (([103, 105], (105,)), ([103, 106], (106,))):
        answer = stated_answer(_stated(seeds=seeds), outcomes)
        assert answer.comparison is None and answer.without_pair == waiting
        assert answer.at_trivial == ()


def test_a_sequential_look_counts_the_pair_of_a_stated_run_that_failed_twice(tmp_path):
    """The look at 2 pairs on stated seeds 103 and 104 is taken with seed 104's cosreg run at its
    trivial score, and the report names it; the look at 4 waits for seed 105's rerun."""
    outcomes = _stated_arms_with_failures(tmp_path / "searches")
    plan = SequentialPlan((2, 4), 0.05, "obf", 0.01, (20.0, 3.0), "stated by hand")
    looks = looks_taken_now(plan, _stated(**LOOKED), outcomes)
    d = np.array([RTE["cosreg"][2], 0.5]) - np.array(RTE["none"][2:4])
    assert looks.pairs == 2 and [look.n for look in looks.taken] == [2]
    assert looks.taken[0].mean == pytest.approx(d.mean())
    text = study_report_text(outcomes, answer=stated_answer(_stated(**LOOKED), outcomes, looks))
    assert "**Go on:** the next look at 4 pairs (2 in)" in text
    # the look waits for seed 105's cosreg run, failed once: it runs again
    assert any("cosreg seed 105" in why and "runs it again" in why for why in looks.waiting)
    assert "`cosreg` seed 104 (rte/cosreg/report/trial-000/seed-104)." in text


def test_the_mean_of_differences_across_tasks_names_the_metric_each_task_is_in():
    """The mean of Δ averages an accuracy difference on RTE with an F1 one on MRPC: the header
    names each task's metric (as its report runs record it) and a sentence says so."""
    outcomes = [
        replace(o, runs=tuple(replace(r, metric="accuracy" if o.task == "rte" else "f1")
                              for r in o.runs))
        for o in _study()
    ]  # fmt: skip
    text = study_report_text(outcomes)
    assert "| arm | Δ rte (accuracy) | Δ mrpc (f1) | mean of Δ | average rank |" in text
    assert (
        "The mean of Δ averages accuracy on rte with f1 on mrpc, as GLUE's score averages its "
        "tasks' metrics." in text
    )
    same = [replace(o, runs=tuple(replace(r, metric="accuracy") for r in o.runs)) for o in outcomes]
    assert "| Δ rte (accuracy) | Δ mrpc (accuracy) |" in (same_text := study_report_text(same))
    assert "GLUE's score" not in same_text


# ---- the sequential stated test (issue 61 items 1, 2 and 5) ----
LOOKED = {**STATED, "looks": [2, 4]}


def test_a_sequential_stated_test_stores_its_margin_in_the_metrics_units():
    test = _stated(**LOOKED, margin=0.015)  # typed and stored in the metric's units
    assert test.looks == (2, 4) and test.spending == "obf" and test.margin == pytest.approx(0.015)
    assert test.select_epoch == "last"  # a new plan's statistic makes no choice on dev
    assert _stated(**LOOKED, spending="pocock").spending == "pocock"
    assert not _stated().sequential


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"looks": [3, 2]}, "looks=[3, 2] are not strictly increasing pair counts of at least 2"),
        ({"looks": [1, 4]}, "looks=[1, 4] are not strictly increasing pair counts"),
        ({"looks": "2,4"}, "looks='2,4' is not a list of pair counts"),
        ({"looks": [2, 5]}, "looks at 5 pairs, beyond the 4 stated seeds the study can run"),
        ({"margin": 0}, "margin=0 is no equivalence margin"),
        ({"margin": -1}, "margin=-1 is no equivalence margin"),
        ({"margin": 150}, "margin=150 spans a whole 0-1 metric: likely a margin in points"),
        ({"spending": "linear"}, "spending=linear is no spending function this code knows"),
        ({"looks": None, "margin": 1}, "margin=1 belongs to a sequential plan"),
    ],
)
def test_a_sequential_plan_that_cannot_hold_is_refused_naming_the_value_and_fix(changes, message):
    with pytest.raises(IsotuneError, match=re.escape(message)) as refused:
        _stated(**{**LOOKED, **changes})
    assert "Fix:" in str(refused.value)


def test_a_sequential_stated_test_reports_its_looks_and_nothing_between_them(tmp_path):
    """Looks at 2 and 4 of the stated seeds 103-106, with 3 pairs in: the first look is taken
    (its repeated interval computed by hand), the 3 pairs in give no interval and no p."""
    plan = SequentialPlan((2, 4), 0.05, "obf", 0.01, (20.0, 3.0), "stated by hand")
    short = [
        replace(o, runs=tuple(r for r in o.runs if r.seed != 106)) if o.arm == "none" else o
        for o in _study()
    ]
    looks = looks_taken_now(plan, _stated(**LOOKED), short)
    text = write_study_report(tmp_path, short, "none", stated=_stated(**LOOKED), looks=looks)
    d = np.array(RTE["cosreg"][2:4]) - np.array(RTE["none"][2:4])  # seeds 103, 104
    half = 20.0 * d.std(ddof=1) / math.sqrt(2)
    interval = f"[{d.mean() - half:.4f}, {d.mean() + half:.4f}]"
    exact = f"{signed_rank_p(d):.4g} ({2 * stats.t.sf(20.0, 1):.2g})"
    assert f"| 1 | 2 | 20.000 | {d.mean():.4f} | {interval} | {exact} | go on | " in text
    assert "**Go on:** the next look at 4 pairs (3 in)" in text
    assert "equivalence margin 0.01 (1 point of a 0-1 metric)" in text
    assert "dev accuracy at the last epoch (no early stopping)" in text
    assert "Stated seeds used: 103-104 (2 pairs)" in text and "biased away from 0" not in text
    stated_part = text.split("## rte")[0]
    assert "t interval" not in stated_part and "Wilcoxon" not in stated_part
    record = yaml.safe_load((tmp_path / RESULTS_FILE).read_text())["stated_test"]
    assert record["interval"] is None and record["ttest_p"] is None
    assert record["sequential"]["decision"] == "go on" and record["looks"] == [2, 4]
    assert record["sequential"]["looks_taken"][0]["interval"] == pytest.approx(
        [d.mean() - half, d.mean() + half]
    )


def _between_looks():
    """The study of :func:`_study` stopped on its way to the second look of stated seeds
    103-106 (looks at 2 and 4 pairs): look 1 taken on 103-104 (it goes on), 105's pair and
    106's cosreg run already in; a plan stated by hand."""
    plan = SequentialPlan((2, 4), 0.05, "obf", 0.01, (20.0, 3.0), "stated by hand")
    short = [
        replace(o, runs=tuple(r for r in o.runs if r.seed != 106))
        if (o.task, o.arm) == ("rte", "none")
        else o
        for o in _study()
    ]
    return short, plan


def test_the_tables_leave_out_the_stated_seeds_beyond_the_last_look_taken(tmp_path):
    """Issue 61 item 1: the per-task table pooled every report run, so a study stopped between
    its looks printed an interval of the stated comparison over 105 and 106, a look its plan
    does not take. Every table of the stated task leaves them out now and says so; study_runs.csv
    still lists every run, and the other task keeps all its seeds."""
    short, plan = _between_looks()
    looks = looks_taken_now(plan, _stated(**LOOKED), short)
    text = write_study_report(tmp_path, short, "none", stated=_stated(**LOOKED), looks=looks)
    shown = slice(0, 2)  # 101-102: not stated
    d = np.array(RTE["cosreg"][shown]) - np.array(RTE["none"][shown])
    low, high = stats.t.interval(0.95, len(d) - 1, d.mean(), stats.sem(d))
    rte = text.split("## rte")[1].split("## mrpc")[0]
    assert f"| {d.mean():.4f}, [{low:.4f}, {high:.4f}] |" in rte
    assert (
        "Left out of the tables, figures and study_runs.csv: the report runs of every arm of rte "
        "on stated seeds 103-106, while the stated test is undecided" in text
    )
    record = yaml.safe_load((tmp_path / RESULTS_FILE).read_text())
    pairs = {(row["task"], row["arm"]): row["n"] for row in record["per_task"]}
    assert pairs["rte", "cosreg"] == pairs["rte", "isobn"] == 2 and pairs["mrpc", "cosreg"] == 6
    assert {row["held_out_runs"] for row in record["arms"] if row["task"] == "rte"} == {2}
    assert record["stated_test"]["sequential"]["held_back"] == [103, 104, 105, 106]
    report_runs = pd.read_csv(tmp_path / RUNS_FILE).query("phase == 'report' and task == 'rte'")
    assert set(report_runs["seed"]) == {101, 102}  # no stated score before its look
    # before the first look too, every stated seed with a run waits for it
    one_pair = [replace(o, runs=tuple(r for r in o.runs if r.seed < 104)) for o in short]
    waiting = stated_answer(
        _stated(**LOOKED), one_pair, looks_taken_now(plan, _stated(**LOOKED), one_pair)
    )
    assert waiting.looks.taken == () and waiting.held_back == (103,)
    assert "while the stated test is undecided" in held_back_sentence(waiting)
    shown = exploratory_outcomes(one_pair, waiting)
    assert {r.seed for o in shown if o.task == "rte" for r in o.held_out} == {101, 102}


def test_the_aggregate_of_a_study_between_looks_leaves_out_its_stated_seeds_beyond_them(
    tmp_path,
):
    """Issue 61 item 1: `python -m isotune.aggregate <study folder>` counted the stated seeds
    beyond the last look in its sweep tables; the study wing now names them, by folder and with
    the sentence the results tables print above them."""
    study = tmp_path / "study"
    for arm, params in (("none", {"optim.lr": 1e-4}), ("cosreg", {"optim.lr": 1e-4, "r": 0.1})):
        scores = dict(zip(SEEDS[:3], RTE[arm][:3], strict=True))  # 101-103: look 1 and one more
        write_search(study / "rte" / arm, "rte", {0: 0.6}, scores, params)
    stated = {**STATED, "seeds": SEEDS[:4], "looks": [2, 4]}
    record = {"sweeper": {"_target_": STUDY_SWEEPER, "tasks": ["rte"], "arms": ["none", "cosreg"],
                          "baseline_arm": "none", "direction": "maximize",
                          "report_seeds": SEEDS[:4], "stated": stated},
              "overrides": {"task": ["study=isotropy_cpu"]}}  # fmt: skip
    (study / "multirun.yaml").write_text(yaml.safe_dump({"hydra": record}))
    plan = SequentialPlan((2, 4), 0.05, "obf", None, (20.0, 3.0), "stated by hand")
    test = stated_test(stated, ["rte"], ["none", "cosreg"], "none", SEEDS[:4])
    new_registration(test, plan, "accuracy").write(study / PLAN_FILE)
    (held,) = stated_runs_held_back(find_sweeps(study))
    assert held.job_dirs == {study / "rte" / arm / f"report/trial-000/seed-{seed}" for arm in
                             ("none", "cosreg") for seed in SEEDS[:3]}  # fmt: skip
    result = aggregate([study], held_back=stated_runs_held_back)
    assert list(result.scores["seed"]) == []  # look 1's pairs are in, but no look is taken
    assert (
        "Study `study`: Left out of the tables, figures and study_runs.csv: the report runs of "
        "every arm of rte on stated seeds 101-103, while the stated test is undecided"
        in result.results()
    )
    assert sorted(aggregate([study]).scores["seed"]) == [101, 101, 102, 102, 103, 103]


SEQUENTIAL = (
    'hydra.sweeper.stated={task:rte,arm:cosreg,seeds:[2,3,4],looks:[2,3],stated_at:"2026-12-04"}'
)
SEQUENTIAL_STUDY = [*SMALL_STUDY, "hydra.sweeper.arms=[none,cosreg]", REPORT_SEEDS + "[2,3,4]"]


def _report_runs(launched: list[str]) -> list[str]:
    return [run.removeprefix("rte/").replace("/report/trial-000", "") for run in launched
            if "/report/" in run]  # fmt: skip


def test_two_tied_pairs_at_the_first_look_decide_nothing_and_a_changed_plan_is_refused(
    tmp_path, glue_dir
):
    """Issue 68: the fake launcher scores cosreg 0.05 above none on every seed, so the first
    look's 2 pairs tie with no spread. Their point interval excludes 0, but an exact test of
    two pairs cannot reject (p 0.5): the look goes on, the third seed runs, the last look
    bounds. Typed again, the study runs nothing; a changed plan is refused before any job."""
    study = tmp_path / "study" / "isotropy_minilm"
    first = _swept_study(tmp_path, glue_dir, [*SEQUENTIAL_STUDY, SEQUENTIAL])
    assert sorted(_report_runs(first)) == [
        "cosreg/seed-2", "cosreg/seed-3", "cosreg/seed-4", "none/seed-2", "none/seed-3",
        "none/seed-4",
    ]  # fmt: skip
    stored = read_registration(study / PLAN_FILE)
    assert stored.plan.looks == (2, 3) and stored.plan.margin is None
    assert stored.statistic.select_epoch == "last" and len(stored.plan.rules) == 2
    text = (study / REPORT_FILE).read_text()
    assert "| 1 | 2 | " in text and "| 0.5 (" in text and "| go on |" in text
    assert "The interval alone says different; the exact signed-rank tests" in text
    assert "**Decision at the last look (3 pairs): bounded**" in text
    journal = (study / LOOKS_FILE).read_text().splitlines()
    assert len(journal) == 2  # each look frozen once
    assert _swept_study(tmp_path, glue_dir, [*SEQUENTIAL_STUDY, SEQUENTIAL]) == []
    assert read_registration(study / PLAN_FILE) == stored  # read back, never computed again
    assert (study / LOOKS_FILE).read_text().splitlines() == journal  # no look taken twice

    changed = SEQUENTIAL.replace("looks:[2,3]", "looks:[2,3],spending:pocock")
    logged = refused_study(tmp_path, glue_dir, [*SEQUENTIAL_STUDY, changed], expect_runs=True)
    assert "spending: stored 'obf', typed 'pocock'" in logged and "Fix:" in logged


def test_a_decided_look_runs_no_more_stated_seeds(tmp_path, glue_dir):
    """Seven pairs tie at +0.05 at the first look: the exact two-sided p 2/128 is below the
    look's nominal level (alpha(7/8) = 0.036), so "different" stands and the eighth stated seed
    never runs."""
    seeds = list(range(2, 10))
    typed = [
        *SMALL_STUDY, "hydra.sweeper.arms=[none,cosreg]", f"{REPORT_SEEDS}{seeds}".replace(" ", ""),
        f'hydra.sweeper.stated={{task:rte,arm:cosreg,seeds:{seeds},looks:[7,8],'
        'stated_at:"2026-12-04"}'.replace(" ", ""),
    ]  # fmt: skip
    launched = _report_runs(_swept_study(tmp_path, glue_dir, typed))
    assert "none/seed-9" not in launched and len(launched) == 14
    text = (tmp_path / "study" / "isotropy_minilm" / REPORT_FILE).read_text()
    assert "**Decision at look 1 (7 pairs): different**" in text and "| 0.01562 (" in text
    assert "Stated seeds used: 2-8 (7 pairs)" in text and "biased away from 0" in text


def test_an_undecided_look_runs_the_next_looks_seeds_and_the_last_look_bounds(tmp_path, glue_dir):
    """Differences -0.01, +0.01, -0.01 by seed: the first look (2 pairs) goes on, so the third
    stated seed runs in the same command, and the last look gives its interval as the bound."""

    def score(reg, seed):
        return 0.6 + seed / 1000 + (0 if reg == "none" else 0.01 if seed % 2 else -0.01)

    launched = _swept_study(tmp_path, glue_dir, [*SEQUENTIAL_STUDY, SEQUENTIAL], score)
    runs = _report_runs(launched)  # the third stated seed after the first look's pairs
    assert sorted(runs[:4]) == ["cosreg/seed-2", "cosreg/seed-3", "none/seed-2", "none/seed-3"]
    assert runs[4:] == ["none/seed-4", "cosreg/seed-4"]
    text = (tmp_path / "study" / "isotropy_minilm" / REPORT_FILE).read_text()
    assert "| go on |" in text and "| 2 | 3 | " in text and "| bounded |" in text
    assert "**Decision at the last look (3 pairs): bounded**" in text
    assert "Stated seeds used: 2-4 (3 pairs)" in text and "biased away from 0" not in text


def _look_by_hand(plan: SequentialPlan, differences: list[float]) -> tuple[float, float, str]:
    """The repeated interval mean ± b_k sd / sqrt(n_k) at the look of ``len(differences)``
    pairs and its decision, restated from docs/study.md ("different, smaller than the margin"
    left out: accuracies on the fixture's 24 dev examples differ by multiples of 1/24, whose
    mean over 2 or 3 pairs is 0 or at least 1/72, beyond a margin of one point)."""
    d = np.array(differences)
    k = plan.looks.index(len(d))
    half = plan.boundaries[k] * d.std(ddof=1) / math.sqrt(len(d))
    low, high = d.mean() - half, d.mean() + half
    if low > 0 or high < 0:
        return low, high, "different"
    if -plan.margin < low and high < plan.margin:
        return low, high, "equivalent"
    return low, high, "go on" if k < len(plan.looks) - 1 else "bounded"


@pytest.mark.slow
def test_a_sequential_study_runs_one_look_at_a_time_end_to_end(tmp_path, tiny_bert, glue_dir):
    """Issues 61 and 68: the tiny study (debug=limit, two arms, one trial on one tuning seed) as
    study=isotropy_results with a stated sequential test at 2 and 3 pairs of report seeds 2-4.
    The plan is locked before any stated run; look 1 runs seeds 2-3 alone and goes on (two
    pairs cannot pass the exact test), frozen as taken; seed 4 then runs in the same command and
    look 2 decides as its runs' results.json decide it by hand; typed again, the study runs
    nothing, takes no look twice and says its decision."""
    today = datetime.now().astimezone().date().isoformat()
    stated = (
        "hydra.sweeper.stated={task:rte,arm:cosreg,seeds:[2,3,4],looks:[2,3],margin:0.01,"
        f'alpha:0.05,stated_at:"{today}"}}'
    )
    command = _study_command(
        tiny_bert, glue_dir, stated, preset="isotropy_results", report_seeds="[2,3,4]"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = tmp_path / "logs" / "study" / "isotropy_results_minilm"
    registration = read_registration(folder / PLAN_FILE)
    plan = registration.plan
    assert (plan.looks, plan.alpha, plan.spending, plan.margin) == ((2, 3), 0.05, "obf", 0.01)
    assert registration.statistic.select_epoch == "last" and len(plan.rules) == 2
    runs = {
        (path.parts[-5], int(path.parent.name.removeprefix("seed-"))): json.loads(path.read_text())
        for path in (folder / "rte").glob("*/report/trial-*/seed-*/results.json")
    }
    written = math.floor((folder / PLAN_FILE).stat().st_mtime)  # started_at is to the second
    assert all(
        datetime.fromisoformat(r["started_at"]).timestamp() >= written for r in runs.values()
    )
    assert set(runs) == {(arm, s) for arm in ("none", "cosreg") for s in (2, 3, 4)}

    def differences(seeds):  # at the metric's resolution: 24 dev examples, stored as float32
        return [
            round(runs["cosreg", s]["best"]["accuracy"] - runs["none", s]["best"]["accuracy"], 6)
            for s in seeds
        ]

    journal = [json.loads(line) for line in (folder / LOOKS_FILE).read_text().splitlines()]
    assert [look["look"] for look in journal] == [1, 2]
    assert journal[0]["decision"] == "go on" and journal[0]["plan_digest"] == registration.digest
    look_1_runs = {("none", 2), ("none", 3), ("cosreg", 2), ("cosreg", 3)}
    last = max(runs[arm, s]["finished_at"] for arm, s in look_1_runs)
    assert min(runs["none", 4]["started_at"], runs["cosreg", 4]["started_at"]) >= last
    assert datetime.fromisoformat(journal[0]["taken_at"]) <= datetime.fromisoformat(
        runs["none", 4]["started_at"]
    )
    low, high, by_interval = _look_by_hand(plan, differences([2, 3, 4]))
    decided = plan.decide(differences([2, 3, 4]))
    assert (
        decided.interval == pytest.approx((low, high))
        and journal[1]["decision"] == decided.decision
    )
    assert decided.decision in (by_interval, "bounded")  # the exact tests can only hold a stop back
    text = (folder / REPORT_FILE).read_text()
    assert f"| 2 | 3 | {plan.boundaries[1]:.3f} | " in text
    assert f"[{low:.4f}, {high:.4f}] | " in text and f"| {decided.decision} |" in text
    said = (
        f"**Decision at look 2 (3 pairs): {decided.decision}**"
        if decided.decision != "bounded"
        else "**Decision at the last look (3 pairs): bounded**"
    )
    assert said in text and "Stated seeds used: 2-4 (3 pairs)" in text

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    after = list((folder / "rte").glob("*/report/trial-*/seed-*/results.json"))
    assert len(after) == len(runs) and all(json.loads(p.read_text())["status"] == "completed"
                                            for p in after)  # fmt: skip
    assert (
        f"The stated test is decided ({decided.decision}, look 2): no more of its "
        "stated seeds run" in again.stdout + again.stderr
    )
    assert "Launching" not in again.stdout + again.stderr  # nothing ran
    assert read_registration(folder / PLAN_FILE) == registration  # never computed again
    assert len((folder / LOOKS_FILE).read_text().splitlines()) == 2  # no look taken twice
