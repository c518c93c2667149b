"""What one search of a study gave: its tuned value, every trial's value, and every run, the
held-out ones with the geometry of their classifier input and their score at the last epoch.

The geometry is read at the last epoch, beside that epoch's score: read at the best epoch, which
the dev score chose, a run that peaked early would carry its early geometry, and the score that
chose the epoch would be set against geometry it selected. A study is read from its folder and
record alone (:func:`read_study`), so its report can be made again from a folder carried anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from isotune.errors import IsotuneError
from isotune.record.debug_runs import debug_description
from isotune.record.results import RESULTS_FILE
from isotune.search.expected_best_report import spent_value
from isotune.search.outcomes import JobOutcome, TrialRow, read_outcome
from isotune.search.report import RESULTS_FILE as SEARCH_RESULTS_FILE
from isotune.search.report import TRIALS_FILE
from isotune.study.plan import TASK_KEY, override_values
from isotune.study.stated import OLD_ALPHA, StatedTest, stated_test
from isotune.sweeps.runs import JOURNAL_FILE, SWEEP_FILE, Run, Sweep
from isotune.sweeps.tables import measure_key

GEOMETRY = ("isoscore", "avg_cosine")  # of the classifier input at the last epoch
TUNING, REPORT = "tuning", "report"  # a run's phase


@dataclass(frozen=True)
class StudyRun:
    """One run of a study (``trial`` None for a report run): ``score`` at its best epoch (what
    the comparisons use), ``geometry`` and ``final_score`` at its last epoch."""

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
    started_at: str | None = None  # its results.json's: when its first attempt started
    final_score: float | None = None
    debug: str | None = None  # a report run's debug_description: what makes it a debug run
    trivial: float | None = None  # its dev set's trivial predictor's score (intention to treat)
    metric: str | None = None  # a report run's primary metric, what its score is
    failures: int = 0  # a report run's attempts that ended failed (:attr:`Run.failures`)

    @classmethod
    def of(cls, job: JobOutcome, task: str, arm: str, trial: int | None, **rest: Any) -> StudyRun:
        """A run from its job's outcome, so tuning and report runs (``trial`` None) take the
        outcome's fields alike."""
        phase = REPORT if trial is None else TUNING
        return cls(task, arm, phase, trial, job.seed, job.score, job.learned, job.status, **rest)


@dataclass(frozen=True)
class ArmOutcome:
    """One (task, arm) search: the best trial's values and tuning value, each trial's
    :func:`~isotune.search.expected_best_report.spent_value` in trial order, and every run."""

    task: str
    arm: str
    best_params: Mapping[str, Any]
    tuned_value: float | None
    trial_values: tuple[float | None, ...]
    runs: tuple[StudyRun, ...]
    chosen_on: str = "dev"  # the data its trials were chosen on (hydra.sweeper.tune_on)
    reported_on: str = "dev"  # the data its report runs report on

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
    """A study's searches as its record (``multirun.yaml``) plans them, with the test it stated
    before its runs (None: none; a sequential one's plan: :mod:`isotune.study.stated_looks`)."""

    outcomes: tuple[ArmOutcome, ...]
    baseline: str
    maximize: bool
    stated: StatedTest | None = None


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
    baseline = str(settings["baseline_arm"])
    stated = stated_test(
        _stated_as_meant(settings.get("stated"), sweep.config), [str(t) for t in tasks],
        list(settings["arms"]), baseline, report_seeds, record=True,
    )  # fmt: skip
    return StudyOutcome(outcomes, baseline, settings["direction"] == "maximize", stated)


def _stated_as_meant(stated: Any, config: Mapping[str, Any]) -> Any:
    """A study's stated test as it was meant: one recorded before a sequential test named its
    statistic's epoch (alpha still ``level``) scored at the runs' ``select_epoch`` (``best``)."""
    if not isinstance(stated, Mapping) or OLD_ALPHA not in stated or not stated.get("looks"):
        return stated
    return {"select_epoch": config.get("select_epoch", "best"), **stated}


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
    """The outcome of the search in ``folder``, its held-out runs those on the study's
    ``report_seeds`` (a folder continued under other report seeds keeps the old seeds' runs).
    The chosen trial is checked against ``trials.csv``, each report run against its values, so
    that a file edited or left from another search is refused by name."""
    trials = _trial_rows(folder)
    path = folder / SEARCH_RESULTS_FILE
    record = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    best, best_params = record.get("best_trial"), dict(record.get("best_params") or {})
    held_out = record.get("held_out") or {}
    if best is not None:
        _check_chosen(folder, trials, int(best), best_params, _number(record.get("best_value")))
    runs = [
        # job_dir: <search>/trial-<n>/seed-<s>, recorded at the path it ran at (a carried
        # folder's old one): relative to the study folder
        StudyRun.of(
            job, task, arm, trial.number, job_dir=str(Path(task, arm, *job.job_dir.parts[-2:]))
        )
        for trial in trials
        for job in trial.jobs
    ]
    if best is not None:
        report_dir = folder / "report" / f"trial-{int(best):03d}"
        for seed in report_seeds:
            if (report_dir / f"seed-{seed}").is_dir():
                runs.append(_report_run(report_dir / f"seed-{seed}", task, arm, best_params))
    return ArmOutcome(
        task=task,
        arm=arm,
        best_params=best_params,
        tuned_value=_number(record.get("best_value")),
        trial_values=tuple(spent_value(trial) for trial in trials),
        runs=tuple(runs),
        chosen_on=str(held_out.get("chosen_on", "dev")),
        reported_on=str(held_out.get("reported_on", "dev")),
    )


def _trial_rows(folder: Path) -> list[TrialRow]:
    """The search's finished trials in trial order, each with its jobs: ``trials.csv``, else, for
    a search stopped before its end, the trials its journal holds."""
    path = folder / TRIALS_FILE
    if not path.is_file():
        return _journal_rows(folder / JOURNAL_FILE)
    table = pd.read_csv(path)
    rows = []
    for number, jobs in table.groupby("trial", sort=True):
        first = jobs.iloc[0]
        rows.append(
            TrialRow(
                number=int(number),
                state=str(first["state"]),
                values={},
                value=_number(first.get("value")),
                jobs=[
                    JobOutcome(
                        job_dir=Path(str(job["job_dir"])),
                        seed=int(job["seed"]),
                        score=_number(job.get("score")),
                        learned=None if pd.isna(job.get("learned")) else bool(job["learned"]),
                        status=str(job.get("job_status")),
                        error=None,
                    )
                    for job in jobs.to_dict("records")
                    if not pd.isna(job.get("seed"))
                ],
            )
        )
    return rows


def _journal_rows(path: Path) -> list[TrialRow]:
    """The finished trials of the one study in the Optuna journal ``path`` (read only), with
    the jobs the search kept in each trial's user attributes; none without a journal."""
    if not path.is_file():
        return []
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(path)))
    names = optuna.get_all_study_names(storage)
    if len(names) != 1:
        raise IsotuneError(
            f"{path} holds {len(names)} Optuna studies ({', '.join(names)}), where a search's "
            "journal holds one: it is not a search's journal. Fix: move it out of the study."
        )
    return [
        TrialRow(
            number=trial.number,
            state=trial.state.name,
            values={},
            value=trial.value if trial.state.name == "COMPLETE" else None,
            jobs=[JobOutcome.from_record(job) for job in trial.user_attrs.get("jobs", [])],
        )
        for trial in optuna.load_study(study_name=names[0], storage=storage).trials
        if trial.state.is_finished()
    ]


def _check_chosen(
    folder: Path,
    trials: Sequence[TrialRow],
    best: int,
    best_params: Mapping[str, Any],
    best_value: float | None,
) -> None:
    """Refuse a chosen trial that ``trials.csv`` does not hold as a COMPLETE trial of that
    value: the two files would then describe different searches."""
    chosen = next((trial for trial in trials if trial.number == best), None)
    if chosen is None or chosen.state != "COMPLETE" or chosen.value != best_value:
        found = "no such trial" if chosen is None else f"{chosen.state} at {chosen.value}"
        raise IsotuneError(
            f"{folder / SEARCH_RESULTS_FILE} chose trial {best} (value {best_value}, "
            f"{dict(best_params)}), but {folder / TRIALS_FILE} has {found}: the two files are "
            "not of one search. Fix: type the study's command again in its folder, which "
            "writes both from the search's journal."
        )


def _report_run(job_dir: Path, task: str, arm: str, best_params: Mapping[str, Any]) -> StudyRun:
    """A held-out run, refused if its overrides do not set the chosen trial's values."""
    seed = int(job_dir.name.removeprefix("seed-"))
    outcome = read_outcome(job_dir, seed)
    geometry, started_at, final_score, debug, metric, failures = {}, None, None, None, None, 0
    if (job_dir / RESULTS_FILE).is_file():
        run = Run.read(job_dir / RESULTS_FILE)
        metric, failures = run.result.get("primary_metric"), run.failures
        started_at = run.result.get("started_at")
        debug = debug_description(run.result)
        _check_report_overrides(job_dir, run.overrides, best_params)
        if outcome.completed:
            final = (run.result.get("isotropy") or {}).get("final") or {}
            geometry = {
                measure: value
                for measure in GEOMETRY
                if (value := _number(final.get(measure_key(measure)))) is not None
            }
            final_score = _number((run.result.get("final") or {}).get(metric))
    return StudyRun.of(
        outcome,
        task,
        arm,
        None,
        geometry=geometry,
        job_dir=str(Path(task, arm, *job_dir.parts[-3:])),  # relative to the study folder
        started_at=started_at,
        final_score=final_score,
        debug=debug,
        trivial=outcome.trivial,
        metric=metric,
        failures=failures,
    )


def _check_report_overrides(
    job_dir: Path, overrides: Sequence[str], best_params: Mapping[str, Any]
) -> None:
    ran = dict(override.split("=", 1) for override in overrides if "=" in override)
    for key, chosen in best_params.items():
        if key not in ran or not _same_value(ran[key], chosen):
            raise IsotuneError(
                f"{job_dir} is a report run of the chosen trial, which set {key}={chosen}, but "
                f"it ran {key}={ran.get(key, '(not set)')}: it is not this arm's held-out run. "
                "Fix: move that folder out of the study and type the study's command again, "
                "which runs it with the chosen values."
            )


def _same_value(typed: str, chosen: Any) -> bool:
    if isinstance(chosen, (int, float)) and not isinstance(chosen, bool):
        try:
            return math.isclose(float(typed), float(chosen), rel_tol=1e-12)
        except ValueError:
            return False
    return typed == str(chosen)


def runs_table(outcomes: Sequence[ArmOutcome]) -> pd.DataFrame:
    """One row per run of the study (the study's CSV)."""
    fields = ("task", "arm", "phase", "trial", "seed", "score", "learned", "status", "final_score")
    rows = [
        {
            **{name: getattr(run, name) for name in fields},
            **{measure: run.geometry.get(measure) for measure in GEOMETRY},
            "job_dir": run.job_dir,
        }
        for outcome in outcomes
        for run in outcome.runs
    ]
    table = pd.DataFrame(rows, columns=[*fields, *GEOMETRY, "job_dir"])
    return table.astype({"trial": "Int64"})  # a report run has no trial: blank, not 0.0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
