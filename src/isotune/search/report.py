"""The end of a search: the winner against the baseline on report seeds that played no part in
choosing it, the winner's tuning-seed value beside it (how much the choice flattered it), the
expected best score per budget, and every trial with its runs. The files it writes into the search
folder, each atomically, are docs/search.md#what-it-writes.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from isotune.atomic_files import save_figure, write_text
from isotune.search.expected_best_report import EXPECTED_BEST, ExpectedBest
from isotune.search.outcomes import JobOutcome, TrialRow, failure_reason, median_score, shown
from isotune.sweeps.intention_to_treat import (
    intention_to_treat_comparison,
    intention_to_treat_line,
)
from isotune.sweeps.runs import SEARCH_REPORT_FILE
from isotune.sweeps.statistics import PairedComparison, paired_comparison, seed_count_caveat
from isotune.tracking.reporting import counted, markdown_table

log = logging.getLogger(__name__)

REPORT_FILE = SEARCH_REPORT_FILE
RESULTS_FILE = "optimization_results.yaml"
TRIALS_FILE = "trials.csv"
HISTORY, IMPORTANCES = "optimization_history", "param_importances"
TOO_FEW_FOR_IMPORTANCES = "The number of trials is too small to compute importances"  # Optuna's
FIGURES = (HISTORY, IMPORTANCES, EXPECTED_BEST)  # each drawn as <name>.png
JOB_COLUMNS = ("seed", "score", "learned", "job_status", "job_dir")  # of trials.csv, for each job


@dataclass(frozen=True)
class HeldOut:
    """The winner and the baseline on the report seeds."""

    best: TrialRow
    best_overrides: Sequence[str]
    baseline_overrides: Sequence[str]
    best_runs: Sequence[JobOutcome]
    baseline_runs: Sequence[JobOutcome]
    chosen_on: str = "dev"  # what the tuning runs evaluated on (results.json's data)
    reported_on: str = "dev"  # what the report runs evaluated on

    @property
    def comparison(self) -> PairedComparison:
        """best - baseline on the report seeds where both have a score."""
        return paired_comparison(_scores(self.baseline_runs), _scores(self.best_runs))

    @property
    def optimism(self) -> float | None:
        """The winner's tuning-seed value minus its report-seed median."""
        held_out = median_score(self.best_runs)
        return None if held_out is None or self.best.value is None else self.best.value - held_out


def _scores(runs: Sequence[JobOutcome]) -> dict[int, float]:
    return {run.seed: run.score for run in runs if run.score is not None}


def trials_table(trials: Sequence[TrialRow]) -> pd.DataFrame:
    """One row per job of every trial (a trial that ran no job: one row without a seed)."""
    rows = []
    for trial in trials:
        base = {"trial": trial.number, "state": trial.state, **trial.values, "value": trial.value}
        for job in trial.jobs or [None]:
            ran = () if job is None else (job.seed, job.score, job.learned, job.status, job.job_dir)
            rows.append({**base, **dict(zip_longest(JOB_COLUMNS, ran)), "reason": trial.reason})
    return pd.DataFrame(rows)


def write_report(
    folder: Path,
    trials: Sequence[TrialRow],
    held_out: HeldOut,
    maximize: bool,
    study: Any = None,
) -> str:
    """Write docs/search.md#what-it-writes's files into ``folder``; the report's text."""
    curve = ExpectedBest.of(trials, maximize, study)
    text = report_text(trials, held_out, curve)
    write_text(folder / REPORT_FILE, text)
    write_text(folder / TRIALS_FILE, trials_table(trials).to_csv(index=False))
    write_text(
        folder / RESULTS_FILE, yaml.safe_dump(results_record(held_out, curve), sort_keys=False)
    )
    curve.draw(folder)
    _figures(folder, study)
    return text


def search_outputs(folder: Path) -> tuple[str, dict[str, Path]]:
    """What a search left in ``folder`` for a report elsewhere (the sweep's W&B report): the text
    of its report, and its figures by name (one it could not draw is absent). A search that has
    not ended has no report yet, and the text says so."""
    path = folder / REPORT_FILE
    if path.is_file():
        text = path.read_text()
    else:
        text = (
            f"No {REPORT_FILE} in {folder} yet: the search has not ended. Type its command "
            "again to continue it (docs/search.md).\n"
        )
    drawn = {name: folder / f"{name}.png" for name in FIGURES}
    return text, {name: path for name, path in drawn.items() if path.is_file()}


def results_record(held_out: HeldOut, curve: ExpectedBest) -> dict[str, Any]:
    """``optimization_results.yaml``: the official plugin's keys, then the held-out numbers."""
    c = held_out.comparison
    return {
        "name": "optuna",
        "best_params": dict(held_out.best.values),
        "best_value": held_out.best.value,
        "best_trial": held_out.best.number,
        "held_out": {
            "seeds": list(c.seeds),
            "best_overrides": list(held_out.best_overrides),
            "baseline_overrides": list(held_out.baseline_overrides),
            "best_median": median_score(held_out.best_runs),
            "baseline_median": median_score(held_out.baseline_runs),
            "mean_difference": c.mean_difference,
            "median_difference": c.median_difference,
            "t_interval": None if c.t_interval is None else list(c.t_interval),
            "wilcoxon_p": c.wilcoxon_p,
            "ttest_p": c.ttest_p,
            "optimism": held_out.optimism,
            "note": c.note,
            "chosen_on": held_out.chosen_on,
            "reported_on": held_out.reported_on,
        },
        "expected_best": curve.record(),
    }


def report_text(trials: Sequence[TrialRow], held_out: HeldOut, curve: ExpectedBest) -> str:
    states = [t.state for t in trials]
    runs = [job for t in trials for job in t.jobs]
    failed_to_learn = sum(job.learned is False for job in runs)
    lines = [
        "# Search report",
        "",
        f"{counted(len(trials), 'trial')}: {states.count('COMPLETE')} complete, "
        f"{states.count('PRUNED')} pruned, {states.count('FAIL')} failed; "
        f"{counted(len(runs), 'run')}, {failed_to_learn} of them "
        "failed to learn (counted at their score). trials.csv lists every trial and its runs.",
        "",
        "## Held out: the best trial and the baseline on the report seeds",
        "",
        data_line(held_out.chosen_on, held_out.reported_on),
        "",
        markdown_table(
            ["", "overrides", "tuning seeds (median)", "report seeds (median)", "failed to learn"],
            [
                _held_out_row(
                    f"best (trial {held_out.best.number})",
                    held_out.best_overrides,
                    held_out.best.value,
                    held_out.best_runs,
                ),
                *(
                    [_held_out_row("baseline", held_out.baseline_overrides, None, runs)]
                    if (runs := held_out.baseline_runs)
                    else []
                ),
            ],
        ),
        "",
        *_comparison_lines(held_out),
        "",
        *curve.lines(),
    ]
    missing = [run for run in (*held_out.best_runs, *held_out.baseline_runs) if run.score is None]
    lines += ["", *(f"- Report job without a score: {failure_reason(run)}" for run in missing)]
    return "\n".join(lines).rstrip() + "\n"


def data_line(chosen_on: str, reported_on: str) -> str:
    """Which data chose the trial and which reports it (hydra.sweeper.tune_on)."""
    return f"Trials chosen on: {chosen_on}. Held-out runs report on: {reported_on}."


def _held_out_row(
    name: str, overrides: Sequence[str], tuning: float | None, runs: Sequence[JobOutcome]
) -> list[str]:
    scores = _scores(runs)
    failed = sum(run.learned is False for run in runs)
    return [
        name,
        " ".join(overrides) or "(config values)",
        "not run" if tuning is None else shown(tuning),
        f"{shown(median_score(runs))} (n = {len(scores)})",
        f"{failed} of {len(runs)}",
    ]


def _comparison_lines(held_out: HeldOut) -> list[str]:
    if not held_out.baseline_runs:  # a study's search: its baseline is another arm's search
        lines = [
            "This search is an arm of a study, whose baseline is another arm: the study "
            "compares them seed by seed in ../../study_report.md."
        ]
    else:
        lines = _paired_lines(held_out)
    if held_out.optimism is not None:
        lines.append(
            f"Optimism: the winner's tuning-seed value minus its report-seed median is "
            f"{shown(held_out.optimism)} (the winner's curse: it was chosen on the tuning seeds)."
        )
    return lines


def _paired_lines(held_out: HeldOut) -> list[str]:
    c = held_out.comparison
    interval = (
        "none" if c.t_interval is None else f"[{shown(c.t_interval[0])}, {shown(c.t_interval[1])}]"
    )
    lines = [
        f"Paired difference best - baseline over {c.n} report seeds: mean "
        f"{shown(c.mean_difference)}, median {shown(c.median_difference)}, 95% t interval "
        f"{interval}; Wilcoxon p {shown(c.wilcoxon_p)}, paired t-test p {shown(c.ttest_p)}.",
    ]
    if c.note:
        lines.append(c.note)
    if c.wilcoxon_n:
        lines.append(seed_count_caveat(c.wilcoxon_n))
    if sensitivity := intention_to_treat_line(
        *intention_to_treat_comparison(held_out.baseline_runs, held_out.best_runs)
    ):
        lines.append(sensitivity)
    return lines


def _figures(folder: Path, study: Any) -> None:
    """Optuna's history and importances when ``study`` is given (a figure Optuna cannot draw, as
    importances from one complete trial, is logged and left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if study is None:
        return
    from optuna.exceptions import ExperimentalWarning
    from optuna.visualization import matplotlib as optuna_plots

    for name, plot in (
        (HISTORY, optuna_plots.plot_optimization_history),
        (IMPORTANCES, optuna_plots.plot_param_importances),
    ):
        try:
            with warnings.catch_warnings():
                # Experimental in Optuna since v2.2, and chosen: not a warning on every search.
                warnings.filterwarnings("ignore", category=ExperimentalWarning)
                # Too few trials: Optuna would draw every importance equal, a figure that says
                # nothing; left out and logged, as a figure it cannot draw.
                warnings.filterwarnings(
                    "error", message=TOO_FEW_FOR_IMPORTANCES, category=UserWarning
                )
                axes = plot(study)
        except (ValueError, RuntimeError, UserWarning) as error:
            log.info("No %s figure: %s", name, error)
            continue
        figure = axes.figure
        figure.tight_layout()
        save_figure(figure, folder / f"{name}.png")
        plt.close(figure)
