"""The end of a study: the arms on each task and across tasks, with the geometry beside the score.

Writes ``study_report.md`` (also printed), ``study_results.yaml``, ``study_runs.csv`` (but the
stated seeds a sequential test holds back), ``expected_best_<task>.png`` (below
:data:`MIN_TRIALS` trials, each trial's value instead) and ``held_out.png`` into the study
folder, each atomically, from the searches' outcomes alone (no clock, no host), so that a study
stopped and continued ends with the same files as one that ran through. What they hold:
docs/study.md#the-study-report; the statistics are :mod:`isotune.study.comparison`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from isotune.atomic_files import write_text
from isotune.record.debug_runs import debug_line
from isotune.search.expected_best import MIN_TRIALS
from isotune.search.report import data_line
from isotune.study.comparison import (
    StatedAnswer,
    across_tasks,
    arm_table,
    exploratory_outcomes,
    geometry_correlations,
    metrics_by_task,
    stated_answer,
    task_comparisons,
)
from isotune.study.figures import HELD_OUT_FIGURE, WITHIN_FIGURE, expected_best, write_figures
from isotune.study.results import GEOMETRY, ArmOutcome, read_study, runs_table
from isotune.study.stated import StatedTest
from isotune.study.stated_looks import Looks, study_looks
from isotune.study.stated_report import (
    MISSING,
    held_back_sentence,
    interval_text,
    number,
    stated_lines,
)
from isotune.sweeps.aggregate import HeldBack
from isotune.sweeps.runs import Sweep
from isotune.sweeps.statistics import seed_count_caveat
from isotune.sweeps.tables import averaged_metrics
from isotune.tracking.reporting import counted, markdown_table

REPORT_FILE = "study_report.md"
RESULTS_FILE = "study_results.yaml"
RUNS_FILE = "study_runs.csv"
FEW_TASKS = 5  # below, an average over tasks rests on too few numbers to generalise
NO_SPREAD = "no spread: no estimate"  # a power figure of differences all equal


def write_study_report(
    folder: Path,
    outcomes: Sequence[ArmOutcome],
    baseline: str,
    maximize: bool = True,
    stated: StatedTest | None = None,
    looks: Looks | None = None,
) -> str:
    """Write the files of the module docstring into ``folder``; the report's text. With a
    ``stated`` test, the report answers it first (a sequential one by its frozen ``looks``)
    and calls the rest exploratory, without the stated seeds it holds back."""
    answer = stated_answer(stated, outcomes, looks) if stated is not None else None
    outcomes = exploratory_outcomes(outcomes, answer)  # without the stated seeds held back
    every_run = runs_table(outcomes)
    arms = arm_table(outcomes, maximize)
    per_task = task_comparisons(outcomes, baseline)
    across = across_tasks(outcomes, baseline, maximize)
    correlations = geometry_correlations(outcomes)
    text = report_text(outcomes, baseline, maximize, arms, per_task, across, correlations, answer)
    write_text(folder / REPORT_FILE, text)
    write_text(folder / RUNS_FILE, every_run.to_csv(index=False))
    record = {
        "baseline_arm": baseline,
        "direction": "maximize" if maximize else "minimize",
        **({"stated_test": _plain(answer.as_record())} if answer is not None else {}),
        "arms": _records(arms),
        "per_task": _records(per_task),
        "across_tasks": _records(across),
        "geometry_vs_score": _records(correlations),
        "trial_values": {f"{o.task}/{o.arm}": list(o.trial_values) for o in outcomes},
        "expected_best": {
            f"{o.task}/{o.arm}": [best.mean for best in expected_best(o, maximize)]
            for o in outcomes
        },
    }
    write_text(folder / RESULTS_FILE, yaml.safe_dump(record, sort_keys=False))
    write_figures(folder, outcomes, maximize)
    return text


def write_study_reports(sweeps: Sequence[Sweep], out: Path | None) -> list[Path]:
    """Each study's report made again from its folder and record alone (a carried study gives its
    tables without running anything), into it or ``out`` (``out/<folder>`` for several)."""
    paths = []
    studies = [sweep for sweep in sweeps if sweep.is_study]
    for sweep in studies:
        study = read_study(sweep.dir)
        assert study is not None, f"{sweep.dir} holds a study's record"
        folder = sweep.dir if out is None else out if len(studies) == 1 else out / sweep.dir.name
        folder.mkdir(parents=True, exist_ok=True)
        looks = study_looks(sweep.dir, study.stated, study.outcomes)
        write_study_report(
            folder, study.outcomes, study.baseline, study.maximize, study.stated, looks
        )
        paths.append(folder / REPORT_FILE)
    return paths


def stated_runs_held_back(sweeps: Sequence[Sweep]) -> list[HeldBack]:
    """The report runs on the stated seeds each study among ``sweeps`` holds back, with the
    sentence saying so: ``python -m isotune.aggregate`` leaves them out of the sweep tables."""
    held = []
    for sweep in sweeps:
        study = read_study(sweep.dir) if sweep.is_study else None
        if study is None or study.stated is None or not study.stated.sequential:
            continue
        looks = study_looks(sweep.dir, study.stated, study.outcomes)
        answer = stated_answer(study.stated, study.outcomes, looks)
        runs = [
            sweep.dir / run.job_dir
            for outcome in study.outcomes
            if outcome.task == answer.test.task
            for run in outcome.held_out
            if run.seed in answer.held_back
        ]
        if runs:
            why = f"Study `{sweep.dir.name}`: {held_back_sentence(answer)}"
            held.append(HeldBack(frozenset(runs), why))
    return held


def study_outputs(folder: Path) -> tuple[str, dict[str, Path]] | None:
    """What a study left in ``folder`` for its W&B report: the text of its report and its
    figures by name; None where ``folder`` is no study folder or the study has not ended."""
    path = folder / REPORT_FILE
    if not path.is_file():
        return None
    drawn = [
        *sorted(folder.glob("expected_best_*.png")),
        *(folder / f"{name}.png" for name in (HELD_OUT_FIGURE, WITHIN_FIGURE)),
    ]
    return path.read_text(), {p.stem: p for p in drawn if p.is_file()}


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{key: _plain(value) for key, value in row.items()} for row in frame.to_dict("records")]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


def report_text(
    outcomes: Sequence[ArmOutcome],
    baseline: str,
    maximize: bool,
    arms: pd.DataFrame,
    per_task: pd.DataFrame,
    across: pd.DataFrame,
    correlations: pd.DataFrame,
    answer: StatedAnswer | None = None,
) -> str:
    tasks = list(dict.fromkeys(o.task for o in outcomes))
    lines = [
        "# Study report",
        "",
        f"{counted(len(arms['arm'].unique()) if len(arms) else 0, 'arm')} on "
        f"{counted(len(tasks), 'task')}, each "
        f"tuned with the same budget; held-out runs on report seeds shared by every arm of a "
        f"task, compared with the baseline arm `{baseline}` seed by seed. study_runs.csv lists "
        f"every run{' but those held back below' if answer and answer.held_back else ''}.",
    ]
    debug = debug_line([run.debug for outcome in outcomes for run in outcome.held_out])
    if debug:
        lines += ["", f"**{debug}**"]
    if answer is not None:
        lines += ["", "## The stated test", "", *stated_lines(answer)]
    unfinished = [f"{o.task}/{o.arm}" for o in outcomes if not o.finished]
    if unfinished:
        lines += ["", f"Searches without a held-out report yet: {', '.join(unfinished)}."]
    for task in tasks:
        lines += ["", f"## {task}", "", *_data_lines(task, outcomes)]
        lines += [*_task_lines(task, outcomes, maximize, arms, per_task)]
    metrics = metrics_by_task(outcomes)
    lines += ["", "## Across tasks", "", *_across_lines(tasks, across, baseline, metrics)]
    lines += ["", "## Geometry beside the score", "", *_geometry_lines(tasks, arms, correlations)]
    lines += ["", "## Figures", "", *_figure_links(tasks)]
    return "\n".join(lines).rstrip() + "\n"


def _data_lines(task: str, outcomes: Sequence[ArmOutcome]) -> list[str]:
    """Which data chose each arm's trial on ``task`` and which reports it: one line, as every
    arm of a study tunes on the same data, from each search's optimization_results.yaml."""
    sides = {(o.chosen_on, o.reported_on) for o in outcomes if o.task == task and o.finished}
    return [data_line(*side) for side in sorted(sides)] + ([""] if sides else [])


def _figure_links(tasks: Sequence[str]) -> list[str]:
    """Links to the figures written beside the report (relative: the folder can move)."""
    links = [f"- [{task}: tuning](expected_best_{task}.png)" for task in tasks]
    return [
        *links,
        f"- [held-out score per seed]({HELD_OUT_FIGURE}.png)",
        f"- [geometry against the score within arms]({WITHIN_FIGURE}.png)",
    ]


def _task_lines(
    task: str,
    outcomes: Sequence[ArmOutcome],
    maximize: bool,
    arms: pd.DataFrame,
    per_task: pd.DataFrame,
) -> list[str]:
    mine = arms.loc[arms["task"] == task]
    compared = per_task.loc[per_task["task"] == task].set_index("arm") if len(per_task) else None
    rows = []
    for row in mine.to_dict("records"):
        c = (
            None
            if compared is None or row["arm"] not in compared.index
            else compared.loc[row["arm"]]
        )
        rows.append(
            [
                row["arm"],
                _params(row["best_params"]),
                number(row["tuned_value"]),
                _spread(row),
                f"{row['failed_to_learn']} / {row['without_score']} of {row['report_runs']}"
                if row["report_runs"]
                else "not reported yet",
                number(row["optimism"]),
                ""
                if c is None
                else f"{number(c['mean_difference'])}, {interval_text(c['t_low'], c['t_high'])}",
                "" if c is None else f"{number(c['wilcoxon_p'])} ({number(c['wilcoxon_p_holm'])})",
                "" if c is None else f"{number(c['ttest_p'])} ({number(c['ttest_p_holm'])})",
                "" if c is None else _planned(c, number(c["detectable_difference"])),
                "" if c is None else _planned(c, _count(c["pairs_needed"])),
            ]
        )
    header = [
        "arm", "best trial", "tuning value", "held out: median ± std [min, max]",
        "report runs: failed to learn / no score", "optimism", "paired Δ: mean, 95% t interval",
        "Wilcoxon p (Holm)", "t-test p (Holm)", "detectable Δ (80% power)",
        "seeds to detect the mean Δ",
    ]  # fmt: skip
    lines = [
        "Held out: over the report seeds every arm of the task has. Holm: over "
        f"{_family(per_task)}. Detectable Δ: the smallest true mean difference these pairs "
        "detect with 80% power (two-sided paired t at 0.05, from the observed spread of the "
        "differences); seeds to detect the mean Δ: how many report seeds would, if that spread "
        "held (a planning figure from few pairs, not a promise).",
        "",
        markdown_table(header, rows),
    ]
    short = [
        o for o in outcomes if o.task == task and o.trial_values and not expected_best(o, maximize)
    ]
    if short:
        values = "; ".join(
            f"{o.arm}: {', '.join(number(v) for v in o.trial_values)}" for o in short
        )
        lines += [
            "",
            f"Trial values (below {MIN_TRIALS} trials the expected best is not estimated, "
            f"show_your_work's advice; a failed trial: {MISSING}): {values}.",
        ]
    if compared is not None and len(compared):
        lines += ["", *(f"- {arm}: {note}" for arm, note in compared["note"].items() if note)]
        lines += [f"- {arm}: {itt}" for arm, itt in compared["intention_to_treat"].items() if itt]
        ranked = [int(k) for k in compared["wilcoxon_n"] if k]
        if ranked:
            lines.append(seed_count_caveat(min(ranked)))
    return lines


def _family(per_task: pd.DataFrame) -> str:
    families = per_task["holm_family"].unique() if len(per_task) else []
    return families[0] if len(families) else "no comparison"


def _planned(comparison: pd.Series, value: str) -> str:
    """A power figure's cell: ``value``, or :data:`NO_SPREAD` where the differences are all
    equal, which gives no spread to plan from (not a difference of 0 that 2 seeds detect)."""
    return NO_SPREAD if comparison["std_of_differences"] == 0 else value


def _count(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return str(int(value))


def _across_lines(
    tasks: Sequence[str], across: pd.DataFrame, baseline: str, metrics: Mapping[str, str]
) -> list[str]:
    if len(tasks) == 1:  # a mean and a rank over one task repeat its own numbers
        return [
            f"One task: nothing to set side by side. The arms' paired differences with "
            f"`{baseline}` are those of its table above; a mean over tasks or an average rank "
            "would repeat them."
        ]
    rows = []
    for row in across.to_dict("records"):
        if row["arm"] == baseline:
            rows.append([row["arm"], *([""] * (len(tasks) + 1)), number(row["average_rank"], 2)])
            continue
        rows.append(
            [
                row["arm"],
                *(number(row.get(f"difference_{task}")) for task in tasks),
                number(row["mean_of_differences"]),
                number(row["average_rank"], 2),
            ]
        )
    named = [f"Δ {task}" + (f" ({metrics[task]})" if task in metrics else "") for task in tasks]
    header = ["arm", *named, "mean of Δ", "average rank"]
    mixed = averaged_metrics("mean of Δ", {t: metrics[t] for t in tasks if t in metrics})
    lines = [
        f"Δ: the arm's mean paired difference with `{baseline}` on each task, in the task's "
        "metric. Average rank: of the held-out median on each task, 1 the best."
        + (f" {mixed}" if mixed else ""),
        "",
        markdown_table(header, rows),
        "",
    ]
    few = (
        f"With {counted(len(tasks), 'task')}, the mean of Δ and the average rank rest on "
        f"{counted(len(tasks), 'number')} per arm: they describe these tasks, not tasks in "
        "general. "
        if len(tasks) < FEW_TASKS
        else ""
    )
    lines.append(
        f"{few}They are descriptions, not tests: a test over every (task, seed) pair would count "
        "a task's pairs as independent though they share its tuned settings and its scale, and "
        "would stand outside the Holm family of the per-task tests above, which are the tests "
        "this report makes."
    )
    return lines


def _geometry_lines(
    tasks: Sequence[str], arms: pd.DataFrame, correlations: pd.DataFrame
) -> list[str]:
    rows = [
        [row["task"], row["arm"], *(number(row[m]) for m in GEOMETRY), number(row["final_median"])]
        for row in arms.to_dict("records")
    ]
    header = [
        "task", "arm", "IsoScore (isotropic: 1)", "average cosine (isotropic: 0)",
        "score at the last epoch",
    ]  # fmt: skip
    corr_rows = [
        [
            row["task"], row["measure"], row["scope"], row["n"], number(row["rho"], 2),
            number(row["p"]), row["note"],
        ]
        for row in correlations.to_dict("records")
    ]  # fmt: skip
    every_task = " (all tasks: each value centred on its task's median)" if len(tasks) > 1 else ""
    return [
        "The classifier input and the score at the last epoch, one fixed point for every run "
        "(the best epoch, which the dev score chose, would set each score against geometry it "
        "selected): each arm's median over its held-out runs.",
        "",
        markdown_table(header, rows),
        "",
        "Spearman's rho of each measure against the score, both at the last epoch, over the "
        f"held-out runs of every arm{every_task}. Pooled: over the arms together, "
        "which mixes what sets arms apart with run-to-run variation. Within arms: each value "
        "centred on its (task, arm)'s median and the p from orderings of the scores within each "
        f"(task, arm): does a more isotropic run of one arm score better? ({WITHIN_FIGURE}.png "
        "shows it.) Exploratory: no multiplicity adjustment.",
        "",
        markdown_table(["task", "measure", "scope", "runs", "rho", "p", "note"], corr_rows),
    ]


def _spread(row: dict[str, Any]) -> str:
    low, high = number(row["held_out_min"]), number(row["held_out_max"])
    std, n = number(row["held_out_std"]), row["held_out_runs"]
    return f"{number(row['held_out_median'])} ± {std} [{low}, {high}] (n = {n})"


def _params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={_g(v)}" for k, v in params.items()) or "not yet chosen"


def _g(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
