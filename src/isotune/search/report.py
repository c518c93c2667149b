"""The end of a search: the winner against the baseline on report seeds that played no part in
choosing it, the winner's tuning-seed value beside it (how much the choice flattered it), the
expected best score per budget, and every trial with its runs.

Files written into the search folder (each atomically):
- ``search_report.md``: the held-out table, the paired statistics, the expected-best curve over
  the trials spent (pruned ones at the median of the seeds they ran, failed ones as draws that
  found nothing), with its band, or below five trials their values;
- ``optimization_results.yaml``: ``best_params`` and ``best_value`` as the official Optuna sweeper
  writes them, and the held-out numbers beside them;
- ``trials.csv``: one row per job of every trial (state, its values, seed, score, folder);
- ``optimization_history.png``, ``param_importances.png`` (Optuna's matplotlib figures) and
  ``expected_best.png``.
The paired statistics are :func:`isotune.sweeps.statistics.paired_comparison` (best - baseline
over the report seeds), the same as every sweep's; where a report run failed or has no score,
a line beside them gives the same test with it at its trivial score (intention to treat:
:mod:`isotune.sweeps.intention_to_treat`). :func:`search_outputs` reads the report and the
figures back for the sweep's W&B report (``python -m isotune.dashboard report``).
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from isotune.atomic_files import save_figure, write_text
from isotune.search.expected_best import (
    DEFAULT_ESTIMATOR,
    ESTIMATORS,
    MIN_TRIALS,
    WITHOUT_REPLACEMENT,
    BestOfN,
    expected_best_curve,
)
from isotune.search.outcomes import JobOutcome, failure_reason
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
HISTORY, IMPORTANCES, EXPECTED_BEST = "optimization_history", "param_importances", "expected_best"
TOO_FEW_FOR_IMPORTANCES = "The number of trials is too small to compute importances"  # Optuna's
FIGURES = (HISTORY, IMPORTANCES, EXPECTED_BEST)  # each drawn as <name>.png
IID_SAMPLER = "RandomSampler"  # the one sampler whose trials are i.i.d. draws


@dataclass(frozen=True)
class TrialRow:
    """A finished trial as the report lists it: Optuna's state name (COMPLETE, PRUNED, FAIL), its
    searched values, its value (None unless COMPLETE), its jobs and, for FAIL, why."""

    number: int
    state: str
    values: Mapping[str, Any]
    value: float | None
    jobs: Sequence[JobOutcome]
    reason: str = ""


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
        held_out = _median(self.best_runs)
        return None if held_out is None or self.best.value is None else self.best.value - held_out


def _scores(runs: Sequence[JobOutcome]) -> dict[int, float]:
    return {run.seed: run.score for run in runs if run.score is not None}


def _median(runs: Sequence[JobOutcome]) -> float | None:
    scores = list(_scores(runs).values())
    return statistics.median(scores) if scores else None


def trials_table(trials: Sequence[TrialRow]) -> pd.DataFrame:
    """One row per job of every trial (a trial that ran no job: one row without a seed)."""
    rows = []
    for trial in trials:
        base = {"trial": trial.number, "state": trial.state, **trial.values, "value": trial.value}
        jobs = trial.jobs or [None]
        for job in jobs:
            rows.append(
                {
                    **base,
                    "seed": None if job is None else job.seed,
                    "score": None if job is None else job.score,
                    "learned": None if job is None else job.learned,
                    "job_status": None if job is None else job.status,
                    "job_dir": None if job is None else str(job.job_dir),
                    "reason": trial.reason,
                }
            )
    return pd.DataFrame(rows)


def write_report(
    folder: Path,
    trials: Sequence[TrialRow],
    held_out: HeldOut,
    maximize: bool,
    study: Any = None,
) -> str:
    """Write the files of the module docstring into ``folder``; the report's text."""
    curve = ExpectedBest.of(trials, maximize, study)
    text = report_text(trials, held_out, curve)
    write_text(folder / REPORT_FILE, text)
    write_text(folder / TRIALS_FILE, trials_table(trials).to_csv(index=False))
    write_text(
        folder / RESULTS_FILE, yaml.safe_dump(results_record(held_out, curve), sort_keys=False)
    )
    _figures(folder, curve, study)
    return text


def spent_value(trial: TrialRow) -> float | None:
    """What a trial spent adds to the expected best: its value when COMPLETE; when PRUNED, the
    median of the seeds it ran (it stopped looking worse, so that median stands for the value it
    did not finish); None for a FAIL, a draw that found nothing."""
    if trial.state == "PRUNED":
        return _median(trial.jobs)
    return trial.value if trial.state == "COMPLETE" else None


@dataclass(frozen=True)
class ExpectedBest:
    """The expected best by trials spent (:mod:`isotune.search.expected_best`) over every
    finished trial, each entering at :func:`spent_value`; ``curves`` by estimator, empty below
    :data:`MIN_TRIALS` trials or without a value; ``sampler``: the class that asked the trials."""

    trials: Sequence[TrialRow]
    values: Sequence[float | None]
    curves: Mapping[str, Sequence[BestOfN]]
    sampler: str | None

    @classmethod
    def of(cls, trials: Sequence[TrialRow], maximize: bool, study: Any = None) -> ExpectedBest:
        values = [spent_value(trial) for trial in trials]
        curves: dict[str, list[BestOfN]] = {}
        if len(values) >= MIN_TRIALS and any(v is not None for v in values):
            curves = {e: expected_best_curve(values, maximize, e) for e in ESTIMATORS}
        sampler = None if study is None else type(study.sampler).__name__
        return cls(trials, values, curves, sampler)

    @property
    def pruned(self) -> list[int]:
        return [t.number for t in self.trials if t.state == "PRUNED"]

    def record(self) -> dict[str, Any]:
        """``optimization_results.yaml``'s ``expected_best``."""
        return {
            "estimator": DEFAULT_ESTIMATOR,
            "sampler": self.sampler,
            "iid": self.sampler == IID_SAMPLER,
            "pruned_at_partial_median": self.pruned,
            "values": [None if v is None else float(v) for v in self.values],
            "curve": {
                estimator: [dataclasses.asdict(point) for point in points]
                for estimator, points in self.curves.items()
            },
        }

    def lines(self) -> list[str]:
        """The report's section: the curve with its band, or the values below MIN_TRIALS."""
        n, failed = len(self.values), sum(t.state == "FAIL" for t in self.trials)
        pruned = self.pruned
        lines = [
            "## Expected best dev score by trials spent (Dodge et al. 2019)",
            "",
            f"Over all {counted(n, 'trial')} spent: complete ones at their value, "
            + (
                f"{len(pruned)} pruned at the median of the seeds they ran (marked *: a value from "
                "fewer seeds than the others', where a curve over complete trials only would "
                "leave out the trials that looked worst and be too high), "
                if pruned
                else "none pruned, "
            )
            + (
                f"{failed} failed as draws that found nothing (the curve is given one of the n "
                "has a value; 'none' is the chance that none has)."
                if failed
                else "none failed."
            ),
        ]
        if self.sampler != IID_SAMPLER:
            lines += [
                "",
                f"The trials were asked by {self.sampler or 'a sampler not recorded here'}, not "
                "random search: each trial was chosen from the earlier ones, so this curve "
                "describes this search, not n i.i.d. draws from the space. "
                "`hydra/sweeper/sampler=random` gives the i.i.d. curve.",
            ]
        if not self.curves:
            lines += [
                "",
                f"Fewer than {MIN_TRIALS} trials (or none with a value): their values, not a "
                "curve.",
                "",
                markdown_table(
                    ["trial", "state", "value"],
                    [
                        [self._label(t), t.state, _f(v)]
                        for t, v in zip(self.trials, self.values, strict=True)
                    ],
                ),
            ]
            return lines
        default, other = self.curves[DEFAULT_ESTIMATOR], self.curves[WITHOUT_REPLACEMENT]
        lines += [
            "",
            f"Estimator: {DEFAULT_ESTIMATOR} (Dodge et al.'s, allentune's default); the band is "
            "the mean +- one SD of the best of n (allentune's closed form), clipped to the "
            f"values observed; {WITHOUT_REPLACEMENT} beside it (it ends at the observed best).",
            "",
            markdown_table(
                ["trials", "expected best", "SD", "band", WITHOUT_REPLACEMENT, "none"][
                    : 6 if failed else 5
                ],
                [
                    [
                        p.n,
                        _f(p.mean),
                        _f(p.sd),
                        f"[{_f(p.low)}, {_f(p.high)}]",
                        _f(q.mean),
                        f"{p.none:.3f}",
                    ][: 6 if failed else 5]
                    for p, q in zip(default, other, strict=True)
                ],
            ),
            "",
            "Values entered: "
            + ", ".join(
                f"{self._label(t)} {_f(v)}" for t, v in zip(self.trials, self.values, strict=True)
            )
            + ".",
        ]
        return lines

    @staticmethod
    def _label(trial: TrialRow) -> str:
        return f"{trial.number}{'*' if trial.state == 'PRUNED' else ''}"


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
            "best_median": _median(held_out.best_runs),
            "baseline_median": _median(held_out.baseline_runs),
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
        "not run" if tuning is None else _f(tuning),
        f"{_f(_median(runs))} (n = {len(scores)})",
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
            f"{_f(held_out.optimism)} (the winner's curse: it was chosen on the tuning seeds)."
        )
    return lines


def _paired_lines(held_out: HeldOut) -> list[str]:
    c = held_out.comparison
    interval = "none" if c.t_interval is None else f"[{_f(c.t_interval[0])}, {_f(c.t_interval[1])}]"
    lines = [
        f"Paired difference best - baseline over {c.n} report seeds: mean {_f(c.mean_difference)}, "
        f"median {_f(c.median_difference)}, 95% t interval {interval}; Wilcoxon p "
        f"{_f(c.wilcoxon_p)}, paired t-test p {_f(c.ttest_p)}.",
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


def _f(value: float | None) -> str:
    return "none" if value is None else f"{value:.4f}"


def _figures(folder: Path, curve: ExpectedBest, study: Any) -> None:
    """The expected-best curve, and Optuna's history and importances when ``study`` is given
    (a figure Optuna cannot draw, as importances from one complete trial, is logged and left
    out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if curve.curves:
        points = curve.curves[DEFAULT_ESTIMATOR]
        n = [p.n for p in points]
        figure, axes = plt.subplots(figsize=(5, 3.5))
        axes.fill_between(n, [p.low for p in points], [p.high for p in points], alpha=0.25)
        axes.plot(n, [p.mean for p in points], marker="o", label=DEFAULT_ESTIMATOR)
        axes.plot(
            n,
            [p.mean for p in curve.curves[WITHOUT_REPLACEMENT]],
            ls="--",
            label=WITHOUT_REPLACEMENT,
        )
        axes.set_xlabel(
            "trials spent" + (" (pruned at their partial median)" if curve.pruned else "")
        )
        axes.set_ylabel("expected best dev score")
        iid = "" if curve.sampler == IID_SAMPLER else f", {curve.sampler or 'sampler'}: not i.i.d."
        axes.set_title(f"Expected best, +- 1 SD (Dodge et al. 2019){iid}", fontsize=9)
        axes.legend(fontsize=8)
        figure.tight_layout()
        save_figure(figure, folder / f"{EXPECTED_BEST}.png")
        plt.close(figure)
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
