"""The bookkeeping of a directory of runs: which completed, which failed, which jobs are missing
(listed, never a crash). A job is its sweep and job number (outside a sweep: its folder), so a
completed run stands in only for a failed run of the same job.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from isotune.errors import IsotuneError
from isotune.record.results import RESULTS_FILE, read_results

SWEEP_FILE = "multirun.yaml"
HYDRA_OVERRIDES = Path(".hydra", "overrides.yaml")  # Hydra's record of a job's task overrides
# The sweepers of a search (docs/search.md) and of a study's searches (docs/study.md), as a search
# folder's multirun.yaml names them: our own, whose folders continue by their command (the
# official hydra-optuna-sweeper lays its folders out otherwise).
SEARCH_SWEEPER = "hydra_plugins.isotune_launcher.optuna_sweeper.OptunaSweeper"
STUDY_SWEEPER = "hydra_plugins.isotune_launcher.study_sweeper.StudySweeper"
# Where a search lays out its runs: each trial's on the tuning seeds in ``trial-<n>/seed-<s>``,
# the winner's and the baseline's on the report seeds below ``report/``.
SEARCH_REPORT_FOLDER = "report"
SEARCH_REPORT_FILE = "search_report.md"  # the held-out report, in the search folder
JOURNAL_FILE = "optuna_journal.log"  # the study, in the search folder unless storage names one
TUNING, REPORT = "tuning", "report"  # the parts of a search a run can belong to


@dataclass(frozen=True)
class Run:
    """One ``results.json`` and the job directory it lies in."""

    path: Path
    result: dict[str, Any]
    # In a search folder: TUNING for a trial's run, REPORT for a run of the held-out report (their
    # seeds never overlap, so they are never paired); None outside a search. See search_parts.
    search_part: str | None = None

    @classmethod
    def read(cls, path: Path) -> Run:
        """An unreadable file counts as a failed run, so that it is reported and rerun."""
        try:
            return cls(path, read_results(path))
        except (OSError, ValueError) as error:
            return cls(path, {"status": "failed", "error": f"unreadable {RESULTS_FILE}: {error}"})

    @property
    def job_dir(self) -> Path:
        return self.path.parent

    @property
    def status(self) -> str | None:
        return self.result.get("status")

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def attempts(self) -> int:
        """How many times the run started in its folder (records older than attempts: one)."""
        return len(self.result.get("attempts") or [None])

    @property
    def failures(self) -> int:
        """How many of its attempts ended ``failed`` (a record older than attempts: one if it
        failed): a run failed, run again and failed again has two."""
        attempts = self.result.get("attempts")
        if not isinstance(attempts, list) or not attempts:
            return int(self.status == "failed")
        return sum(isinstance(a, dict) and a.get("status") == "failed" for a in attempts)

    def describe(self, now: datetime) -> str:
        """How an unfinished run stands; a ``running`` one with the age of its last update."""
        if self.status == "running":
            state = (
                f"running, last update {_age(self.result.get('updated_at'), now)}: still "
                "running, or killed (a live job rewrites results.json at every epoch end)"
            )
        elif self.status == "interrupted":
            stopped_by = self.result.get("interrupted_by", "SIGINT")  # older runs: Ctrl-C only
            state = f"interrupted ({stopped_by}) before it finished"
            if stopped_by == "SIGUSR2":  # a time limit's warning: submitit requeues the job
                state += ", waiting to be requeued if its launcher requeues it"
        else:
            state = f"{self.status}: {self.result.get('error')}"
        return state if self.attempts == 1 else f"{state} (attempt {self.attempts})"

    @cached_property
    def overrides(self) -> tuple[str, ...]:
        """The job's task overrides: those results.json records, else (a record without them)
        Hydra's ``.hydra/overrides.yaml``. results.json comes first because Hydra rewrites
        ``.hydra/`` as a job starts, before the run can refuse it: a refused job in another
        configuration's folder leaves its own overrides there."""
        recorded = self.result.get("overrides")
        if recorded is not None:
            return tuple(recorded)
        hydra_record = self.job_dir / HYDRA_OVERRIDES
        return tuple(_read_yaml(hydra_record) or ()) if hydra_record.is_file() else ()

    def field(self, name: str) -> Any:
        if self.result.get(name) is None:
            raise IsotuneError(
                f"{self.path} is marked completed but has no {name!r}; it was not written by "
                "isotune's training run. Move it out of the directory or rerun that job."
            )
        return self.result[name]


@dataclass(frozen=True)
class Sweep:
    """A Hydra multirun directory and its ``multirun.yaml``."""

    dir: Path
    config: dict[str, Any]

    @classmethod
    def load(cls, sweep_dir: Path) -> Sweep:
        path = Path(sweep_dir) / SWEEP_FILE
        if not path.is_file():
            raise IsotuneError(
                f"{sweep_dir} is not a Hydra multirun directory (no {SWEEP_FILE}); pass the "
                "directory that holds multirun.yaml (the hydra.sweep.dir of the sweep)."
            )
        return cls(Path(sweep_dir), _read_yaml(path))

    @property
    def sweeper(self) -> str:
        return self.config["hydra"]["sweeper"]["_target_"]

    @property
    def is_search(self) -> bool:
        """A search (or one of a study's): typing its command again continues it, rerunning its
        jobs would not."""
        return self.sweeper == SEARCH_SWEEPER or (
            self.sweeper == STUDY_SWEEPER and not self.is_study
        )

    @property
    def is_study(self) -> bool:
        """A study's own folder (docs/study.md), whose record is the study's and whose runs are
        its searches': each of those holds its Optuna journal, the study folder none."""
        return self.sweeper == STUDY_SWEEPER and not (self.dir / JOURNAL_FILE).is_file()

    @property
    def enumerable(self) -> bool:
        """Only the basic sweeper's jobs (also isotune's summarizing one, which is a basic
        sweeper) are a cartesian product known in advance."""
        return self.sweeper.endswith((".BasicSweeper", ".SummarizingSweeper"))

    def job_number(self, overrides: Sequence[str]) -> int | None:
        """The number of the job with these overrides (in any order), None if none has them."""
        if not self.enumerable:
            return None
        wanted = set(overrides)
        return next((n for n, job in enumerate(self.expected_jobs) if set(job) == wanted), None)

    @cached_property
    def expected_jobs(self) -> list[tuple[str, ...]]:
        """The overrides of every job in job-number order: the sweeper's ``params`` first, then
        the command line, as Hydra's basic sweeper reads them."""
        from hydra.errors import HydraException

        hydra = self.config["hydra"]
        params = hydra["sweeper"].get("params") or {}
        arguments = [f"{key}={value}" for key, value in params.items()]
        arguments += hydra["overrides"]["task"]
        try:
            return basic_sweep_jobs(arguments)
        except HydraException as error:
            raise IsotuneError(
                f"Can't expand the sweep {arguments} of {self.dir / SWEEP_FILE}: {error}"
            ) from error


def basic_sweep_jobs(arguments: Sequence[str]) -> list[tuple[str, ...]]:
    """The overrides of every job of ``python app.py -m <arguments>``, in job-number order,
    through Hydra's private ``BasicSweeper.split_arguments`` (no public API; pyproject pins
    ``<1.4``, and ``tests/test_aggregate.py`` checks it against a real multirun)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = OverridesParser.create().parse_overrides(list(arguments))
    batches = BasicSweeper.split_arguments(overrides, max_batch_size=None)
    return [tuple(job) for batch in batches for job in batch]


@dataclass(frozen=True)
class MissingJob:
    """A job a sweep expected that left no results.json (its process died, or never started)."""

    sweep: Sweep
    number: int
    overrides: tuple[str, ...]


def load_runs(directory: Path) -> list[Run]:
    return [Run.read(path) for path in sorted(Path(directory).rglob(RESULTS_FILE))]


def find_sweeps(directory: Path) -> list[Sweep]:
    return [Sweep.load(path.parent) for path in sorted(Path(directory).rglob(SWEEP_FILE))]


def innermost_sweep(run: Run, sweeps: Sequence[Sweep]) -> Sweep | None:
    """The sweep whose folder holds ``run`` most closely (a sweep inside another's folder)."""
    around = [sweep for sweep in sweeps if run.path.is_relative_to(sweep.dir)]
    return max(around, key=lambda sweep: len(sweep.dir.parts), default=None)


def job_id(run: Run, sweeps: Sequence[Sweep]) -> tuple[Path, int] | tuple[Path]:
    """Which job a run is: (sweep directory, job number) when the innermost sweep around it has
    a job with its overrides, whatever the folder (a ``rerun-<n>`` of a missing job counts as that
    job); else (its own folder,)."""
    sweep = innermost_sweep(run, sweeps)
    number = sweep.job_number(run.overrides) if sweep is not None else None
    return (run.job_dir,) if number is None else (sweep.dir, number)


def search_parts(runs: Sequence[Run], sweeps: Sequence[Sweep]) -> list[Run]:
    """``runs`` with the part of a search each belongs to (:attr:`Run.search_part`): pooling a
    winner's tuning and report seeds is the optimism the search's report measures."""
    parted = []
    for run in runs:
        sweep = innermost_sweep(run, sweeps)
        if sweep is not None and sweep.is_search:
            inside = run.path.relative_to(sweep.dir).parts
            run = replace(run, search_part=REPORT if inside[0] == SEARCH_REPORT_FOLDER else TUNING)
        parted.append(run)
    return parted


def unfinished_runs(runs: Sequence[Run], sweeps: Sequence[Sweep]) -> list[Run]:
    """Runs that did not complete (failed, interrupted, or still marked running), unless a
    completed run of the same job has since replaced them."""
    done = {job_id(run, sweeps) for run in runs if run.completed}
    return [run for run in runs if not run.completed and job_id(run, sweeps) not in done]


def missing_jobs(sweeps: Sequence[Sweep], runs: Sequence[Run]) -> list[MissingJob]:
    """Jobs of enumerable sweeps with no results.json at all; a job that left one, completed or
    not, is accounted for by the tables or by :func:`unfinished_runs`."""
    recorded = {job_id(run, sweeps) for run in runs}
    return [
        MissingJob(sweep, number, job)
        for sweep in sweeps
        if sweep.enumerable
        for number, job in enumerate(sweep.expected_jobs)
        if (sweep.dir, number) not in recorded
    ]


def latest_completed_runs(
    runs: Sequence[Run], key: Callable[[Run], Hashable]
) -> tuple[list[Run], list[list[Run]]]:
    """One completed run per ``key`` (configuration, task, seed), the latest to finish, and the
    groups that had several (a table over seeds counts each seed once)."""
    groups: dict[Hashable, list[Run]] = {}
    for run in runs:
        if run.completed:
            groups.setdefault(key(run), []).append(run)
    for group in groups.values():
        group.sort(key=lambda run: str(run.result.get("finished_at", "")))
    return [group[-1] for group in groups.values()], [g for g in groups.values() if len(g) > 1]


def _age(timestamp: str | None, now: datetime) -> str:
    """``3h05m ago (<timestamp>)``; a timestamp without UTC offset is this machine's time."""
    try:
        then = datetime.fromisoformat(str(timestamp))
    except ValueError:
        return f"unknown (updated_at {timestamp!r})"
    if then.tzinfo is None:
        then = then.astimezone()
    minutes = max(0, int((now - then).total_seconds()) // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m ago ({timestamp})"


def _read_yaml(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text())
