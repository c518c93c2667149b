"""What one search of a study gave: its tuned value, every trial's value, and every run, the
held-out ones with the geometry of their classifier input at the best epoch.

Read from the search's folder as :mod:`isotune.search.report` leaves it (``trials.csv``,
``optimization_results.yaml``, ``report/trial-<n>/seed-<s>/``); a search that has not reached its
report yet gives what it has, and the study report says which searches are unfinished. A whole
study is read from its folder and its record alone (:func:`read_study`), so that its report can be
made again from a folder carried anywhere, by any later code, without running anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from isotune.record.results import RESULTS_FILE
from isotune.search.outcomes import read_outcome
from isotune.search.report import RESULTS_FILE as SEARCH_RESULTS_FILE
from isotune.search.report import TRIALS_FILE
from isotune.study.plan import TASK_KEY, override_values
from isotune.sweeps.runs import SWEEP_FILE, Run, Sweep
from isotune.sweeps.tables import measure_key

GEOMETRY = ("isoscore", "avg_cosine")  # of the classifier input at the best epoch
TUNING, REPORT = "tuning", "report"  # a run's phase


@dataclass(frozen=True)
class StudyRun:
    """One run of a study: its phase, trial (None for a report run), seed and what it gave."""

    task: str
    arm: str
    phase: str
    trial: int | None
    seed: int
    score: float | None
    learned: bool | None
    status: str
    geometry: Mapping[str, float] = field(default_factory=dict)
    job_dir: str = ""


@dataclass(frozen=True)
class ArmOutcome:
    """One (task, arm) search: the best trial's values and tuning value, what each trial spent
    adds to the expected best in trial order (:func:`isotune.search.report.spent_value`: None
    for a failed trial), and every run (tuning and report)."""

    task: str
    arm: str
    best_params: Mapping[str, Any]
    tuned_value: float | None
    trial_values: tuple[float | None, ...]
    runs: tuple[StudyRun, ...]

    @property
    def held_out(self) -> tuple[StudyRun, ...]:
        return tuple(run for run in self.runs if run.phase == REPORT)

    def held_out_scores(self) -> dict[int, float]:
        """``{report seed: score}`` of the held-out runs that have a score."""
        return {run.seed: run.score for run in self.held_out if run.score is not None}

    @property
    def finished(self) -> bool:
        """Whether the search reached its held-out report."""
        return bool(self.held_out)


@dataclass(frozen=True)
class StudyOutcome:
    """A study's searches as its record (``multirun.yaml``) plans them: each (task, arm)'s
    outcome, task by task, the baseline arm and whether a higher score is better."""

    outcomes: tuple[ArmOutcome, ...]
    baseline: str
    maximize: bool


def read_study(folder: Path) -> StudyOutcome | None:
    """The study in ``folder`` as its sweeper reads it at its end: its tasks (the command line's
    ``task``, else the preset's ``tasks``), arms, baseline arm, direction and report seeds from
    its record; None where ``folder`` holds no study's record."""
    if not (Path(folder) / SWEEP_FILE).is_file() or not (sweep := Sweep.load(folder)).is_study:
        return None
    settings = sweep.config["hydra"]["sweeper"]
    tasks = _typed_tasks(sweep.config["hydra"]["overrides"]["task"]) or settings["tasks"]
    report_seeds = [int(seed) for seed in settings["report_seeds"]]
    outcomes = tuple(
        read_arm(Path(folder) / str(task) / str(arm), str(task), str(arm), report_seeds)
        for task in tasks
        for arm in settings["arms"]
    )
    return StudyOutcome(
        outcomes, str(settings["baseline_arm"]), settings["direction"] == "maximize"
    )


def _typed_tasks(overrides: Sequence[str]) -> list[str]:
    """The tasks of a ``task=`` override on the study's command line (``task=rte,mrpc``), as
    Hydra parses it; none where none was typed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    tasks: list[str] = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.get_key_element() == TASK_KEY:
            tasks = override_values(override)
    return tasks


def read_arm(folder: Path, task: str, arm: str, report_seeds: Sequence[int]) -> ArmOutcome:
    """The outcome of the search in ``folder`` (see the module docstring), its held-out runs
    those on the study's ``report_seeds``: a folder continued under other report seeds keeps
    the old seeds' runs, which are not this study's pairs."""
    trials = _read_trials(folder / TRIALS_FILE)
    record = _read_yaml(folder / SEARCH_RESULTS_FILE)
    runs = [
        StudyRun(
            task=task,
            arm=arm,
            phase=TUNING,
            trial=int(row["trial"]),
            seed=int(row["seed"]),
            score=_number(row.get("score")),
            learned=None if pd.isna(row.get("learned")) else bool(row["learned"]),
            status=str(row.get("job_status")),
            # <search>/trial-<n>/seed-<s>, recorded at the path it ran at (a carried folder's old
            # one): relative to the study folder
            job_dir=str(Path(task, arm, *Path(str(row.get("job_dir"))).parts[-2:])),
        )
        for row in trials.to_dict("records")
        if not pd.isna(row.get("seed"))
    ]
    best = record.get("best_trial")
    if best is not None:
        report_dir = folder / "report" / f"trial-{int(best):03d}"
        for seed in report_seeds:
            if (report_dir / f"seed-{seed}").is_dir():
                runs.append(_report_run(report_dir / f"seed-{seed}", task, arm))
    return ArmOutcome(
        task=task,
        arm=arm,
        best_params=dict(record.get("best_params") or {}),
        tuned_value=_number(record.get("best_value")),
        trial_values=tuple(_spent(group) for _, group in trials.groupby("trial", sort=True)),
        runs=tuple(runs),
    )


def _report_run(job_dir: Path, task: str, arm: str) -> StudyRun:
    seed = int(job_dir.name.removeprefix("seed-"))
    outcome = read_outcome(job_dir, seed)
    geometry = {}
    if outcome.completed:
        best = (Run.read(job_dir / RESULTS_FILE).result.get("isotropy") or {}).get("best") or {}
        for measure in GEOMETRY:
            value = _number(best.get(measure_key(measure)))
            if value is not None:
                geometry[measure] = value
    return StudyRun(
        task=task,
        arm=arm,
        phase=REPORT,
        trial=None,
        seed=seed,
        score=outcome.score,
        learned=outcome.learned,
        status=outcome.status,
        geometry=geometry,
        job_dir=str(Path(task, arm, *job_dir.parts[-3:])),  # relative to the study folder
    )


def _spent(jobs: pd.DataFrame) -> float | None:
    """A trial's value when COMPLETE, the median of its runs' scores when PRUNED, else None (as
    :func:`isotune.search.report.spent_value` counts it)."""
    state = jobs["state"].iloc[0]
    if state == "COMPLETE":
        return float(jobs["value"].iloc[0])
    scores = jobs["score"].dropna()
    return float(scores.median()) if state == "PRUNED" and len(scores) else None


def runs_table(outcomes: Sequence[ArmOutcome]) -> pd.DataFrame:
    """One row per run of the study (the study's CSV)."""
    rows = [
        {
            "task": run.task,
            "arm": run.arm,
            "phase": run.phase,
            "trial": run.trial,
            "seed": run.seed,
            "score": run.score,
            "learned": run.learned,
            "status": run.status,
            **{measure: run.geometry.get(measure) for measure in GEOMETRY},
            "job_dir": run.job_dir,
        }
        for outcome in outcomes
        for run in outcome.runs
    ]
    columns = ["task", "arm", "phase", "trial", "seed", "score", "learned", "status"]
    return pd.DataFrame(rows, columns=[*columns, *GEOMETRY, "job_dir"])


def _read_trials(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=["trial", "state", "value", "seed"])
    return pd.read_csv(path)


def _read_yaml(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text()) or {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
