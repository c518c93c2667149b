"""Turn a directory of runs into the papers' tables, and say which runs failed or are missing.

Every run writes a ``results.json``; this module reads all of them below a directory and reports,
per model x norm x GLUE task, the median and std over seeds of the best-epoch dev primary metric
(as the IsoBN paper does: small GLUE tasks are seed-sensitive), the change against ``norm=none``,
and the isotropy of the embeddings before and after fine-tuning. It lists the runs that did not
complete (failed, interrupted, or still ``running``: alive, or killed if its last update is old)
and, for a Hydra sweep directory (one holding ``multirun.yaml``), the jobs that never left a
``results.json``; :mod:`isotune.sweeps.rerun` reruns those. A job is its sweep and job number (a run
outside a sweep: its folder), so a completed run stands in only for a failed run of the same job.

The table functions need only pandas; Hydra is imported only to expand a sweep's overrides.

    python -m isotune.aggregate <dir> [--wandb]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from isotune.errors import IsotuneError
from isotune.reporting import markdown_table
from isotune.results import RESULTS_FILE, read_results
from isotune.wandb_logging import wandb_online

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
NORM_ORDER = ("none", "batchnorm", "isobn")
BASELINE_NORM = "none"
AVERAGE = "avg"
SWEEP_FILE = "multirun.yaml"
RUN_KEY = ("model", "norm", "task", "seed")

SUMMARY_COLUMNS = [*RUN_KEY[:3], "metric", "median", "std", "n", "delta_vs_none"]

RESULTS_MD, RESULTS_CSV = "results_table.md", "results_table.csv"
ISOTROPY_MD, ISOTROPY_CSV = "isotropy_table.md", "isotropy_table.csv"


@dataclass(frozen=True)
class Run:
    """One ``results.json`` and the job directory it lies in."""

    path: Path
    result: dict[str, Any]

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

    def describe(self, now: datetime) -> str:
        """How an unfinished run stands; a ``running`` one with the age of its last update."""
        if self.status == "running":
            return (
                f"running, last update {_age(self.result.get('updated_at'), now)}: still running, "
                "or killed (a live job rewrites results.json at every epoch end)"
            )
        if self.status == "interrupted":
            return "interrupted (Ctrl-C) before it finished"
        return f"{self.status}: {self.result.get('error')}"

    @cached_property
    def overrides(self) -> tuple[str, ...]:
        """The job's task overrides: Hydra's own record in ``.hydra/overrides.yaml``, else the
        copy in results.json."""
        hydra_record = self.job_dir / ".hydra" / "overrides.yaml"
        if hydra_record.is_file():
            return tuple(_read_yaml(hydra_record) or ())
        return tuple(self.result.get("overrides") or ())

    def field(self, name: str) -> Any:
        if self.result.get(name) is None:
            raise IsotuneError(
                f"{self.path} is marked completed but has no {name!r}; it was not written by "
                "isotune's training run. Move it out of the directory or rerun that job."
            )
        return self.result[name]

    def key(self) -> tuple[Any, ...]:
        return tuple(self.field(name) for name in RUN_KEY)


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
    def enumerable(self) -> bool:
        """Only the basic sweeper's jobs are a cartesian product known in advance."""
        return self.sweeper.endswith(".BasicSweeper")

    def job_number(self, overrides: Sequence[str]) -> int | None:
        """The number of the job with these overrides (in any order), None if none has them."""
        if not self.enumerable:
            return None
        wanted = set(overrides)
        return next((n for n, job in enumerate(self.expected_jobs) if set(job) == wanted), None)

    @cached_property
    def expected_jobs(self) -> list[tuple[str, ...]]:
        """The overrides of every job in job-number order, expanded from the sweep's overrides
        as Hydra's basic sweeper does (its ``params`` first, then the command line)."""
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        hydra = self.config["hydra"]
        params = hydra["sweeper"].get("params") or {}
        arguments = [f"{key}={value}" for key, value in params.items()]
        arguments += hydra["overrides"]["task"]
        try:
            overrides = OverridesParser.create().parse_overrides(arguments)
            batches = BasicSweeper.split_arguments(overrides, max_batch_size=None)
        except HydraException as error:
            raise IsotuneError(
                f"Can't expand the sweep {arguments} of {self.dir / SWEEP_FILE}: {error}"
            ) from error
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


def job_id(run: Run, sweeps: Sequence[Sweep]) -> tuple[Path, int] | tuple[Path]:
    """Which job a run is: (sweep directory, job number) when the innermost sweep around it has
    a job with its overrides, whatever the folder (a ``rerun-<n>`` of a missing job counts as that
    job); else (its own folder,)."""
    sweeps_around = [sweep for sweep in sweeps if run.path.is_relative_to(sweep.dir)]
    sweep = max(sweeps_around, key=lambda sweep: len(sweep.dir.parts), default=None)
    number = sweep.job_number(run.overrides) if sweep is not None else None
    return (run.job_dir,) if number is None else (sweep.dir, number)


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


def latest_completed_runs(runs: Sequence[Run]) -> tuple[list[Run], list[list[Run]]]:
    """One completed run per model/norm/task/seed, the latest to finish, and the groups that had
    several (a table over seeds assumes every other setting is the same)."""
    groups: dict[tuple[Any, ...], list[Run]] = {}
    for run in runs:
        if run.completed:
            groups.setdefault(run.key(), []).append(run)
    for group in groups.values():
        group.sort(key=lambda run: str(run.result.get("finished_at", "")))
    return [group[-1] for group in groups.values()], [g for g in groups.values() if len(g) > 1]


def scores_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per completed run: its best-epoch dev primary metric, in percent."""
    rows = []
    for run in runs:
        metric = run.field("primary_metric")
        best = run.field("best")
        if metric not in best:
            raise IsotuneError(
                f"{run.path}: primary metric {metric!r} is not among its best-epoch metrics "
                f"{sorted(best)}; rerun that job."
            )
        model, norm, task, seed = run.key()
        rows.append((model, norm, task, seed, metric, 100.0 * best[metric]))
    return pd.DataFrame(rows, columns=[*RUN_KEY, "metric", "score"])


def summarize_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """Median, sample std and count over seeds per model x norm x task; the ``avg`` task (mean of
    a row's per-task medians, for rows that have every task, when there are several); and the
    difference of each median to the same model's ``norm=none`` median."""
    metrics = scores.groupby("task")["metric"].unique()
    mixed = {task: list(names) for task, names in metrics.items() if len(names) > 1}
    if mixed:
        raise IsotuneError(
            f"Runs of one task were scored by different primary metrics {mixed}; aggregate the "
            "directories of each setting separately."
        )
    summary = (
        scores.groupby(["model", "norm", "task", "metric"])["score"]
        .agg(median="median", std="std", n="count")
        .reset_index()
    )
    summary["n"] = summary["n"].astype("Int64")
    tasks = ordered(summary["task"], GLUE_TASKS)
    if len(tasks) > 1:
        complete_rows = summary.groupby(["model", "norm"]).filter(lambda g: len(g) == len(tasks))
        averages = complete_rows.groupby(["model", "norm"])["median"].mean().reset_index()
        averages[["task", "metric"]] = AVERAGE, "mean of medians"
        summary = pd.concat([summary, averages], ignore_index=True)

    baseline = summary.loc[summary["norm"] == BASELINE_NORM, ["model", "task", "median"]]
    summary = summary.merge(
        baseline.rename(columns={"median": "baseline"}), on=["model", "task"], how="left"
    )
    summary["delta_vs_none"] = summary["median"] - summary.pop("baseline")
    return _sorted(summary, [*tasks, AVERAGE])


def isotropy_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per completed run and isotropy measure: pretrained and best-epoch values."""
    rows = []
    for run in runs:
        isotropy = run.result.get("isotropy") or {}
        pretrained, finetuned = isotropy.get("pretrained") or {}, isotropy.get("best") or {}
        for measure in sorted(set(pretrained) | set(finetuned)):
            rows.append((*run.key(), measure, pretrained.get(measure), finetuned.get(measure)))
    return pd.DataFrame(
        rows, columns=[*RUN_KEY, "measure", "pretrained", "finetuned"], dtype=object
    )


def summarize_isotropy(frame: pd.DataFrame) -> pd.DataFrame:
    """Median over seeds of each measure, before and after fine-tuning."""
    frame = frame.astype({"pretrained": float, "finetuned": float})
    summary = (
        frame.groupby(["model", "norm", "task", "measure"])
        .agg(
            pretrained=("pretrained", "median"),
            finetuned=("finetuned", "median"),
            n=("seed", "size"),
        )
        .reset_index()
    )
    return _sorted(summary, ordered(summary["task"], GLUE_TASKS), extra=["measure"])


def ordered(values: Iterable[str], preferred: Sequence[str]) -> list[str]:
    """The distinct values, those in ``preferred`` first in its order, the rest alphabetically."""
    present = set(values)
    return [v for v in preferred if v in present] + sorted(present - set(preferred))


def _sorted(frame: pd.DataFrame, tasks: Sequence[str], extra: Sequence[str] = ()) -> pd.DataFrame:
    positions = {
        "model": ordered(frame["model"], ()),
        "norm": ordered(frame["norm"], NORM_ORDER),
        "task": list(tasks),
    }
    return frame.sort_values(
        ["model", "norm", "task", *extra],
        key=lambda column: (
            column.map(positions[column.name].index) if column.name in positions else column
        ),
        ignore_index=True,
    )


def results_markdown(summary: pd.DataFrame) -> str:
    """The paper-style table (median ± std (n) per task) and the Δ-to-``norm=none`` table."""
    tasks = ordered(set(summary["task"]) - {AVERAGE}, GLUE_TASKS)
    columns = [*tasks, AVERAGE] if AVERAGE in set(summary["task"]) else tasks
    rows = list(dict.fromkeys(zip(summary["model"], summary["norm"], strict=True)))
    cells = {(r.model, r.norm, r.task): r for r in summary.itertuples(index=False)}

    def table(format_cell, row_keys) -> str:
        body = [
            [model, norm, *(format_cell(cells.get((model, norm, task))) for task in columns)]
            for model, norm in row_keys
        ]
        return markdown_table(["model", "norm", *columns], body)

    metric_of = dict(zip(summary["task"], summary["metric"], strict=True))
    notes = [
        "Dev primary metric at the best epoch, in %: median ± sample std over seeds (n seeds).",
        "Metrics: " + ", ".join(f"{task} = {metric_of[task]}" for task in tasks) + ".",
    ]
    if AVERAGE in columns:
        notes.append(
            f"{AVERAGE}: mean of the per-task medians, only for rows with all {len(tasks)} tasks."
        )
    sections = ["## Results", table(_score_cell, rows), "\n".join(notes)]
    compared = [(model, norm) for model, norm in rows if norm != BASELINE_NORM]
    if compared:
        sections += [
            f"## Δ median vs norm={BASELINE_NORM} (percentage points)",
            table(_delta_cell, compared),
        ]
    return "\n\n".join(sections) + "\n"


def _score_cell(row: Any) -> str:
    if row is None:
        return "–"
    if row.task == AVERAGE:
        return f"{row.median:.2f}"
    spread = f" ± {row.std:.2f}" if row.n > 1 else ""
    return f"{row.median:.2f}{spread} (n={row.n})"


def _delta_cell(row: Any) -> str:
    return "–" if row is None or pd.isna(row.delta_vs_none) else f"{row.delta_vs_none:+.2f}"


def isotropy_markdown(summary: pd.DataFrame) -> str:
    if summary.empty:
        return "## Isotropy\n\nNo isotropy measures in these runs.\n"
    body = [
        [r.model, r.norm, r.task, r.measure, f"{r.pretrained:.4g}", f"{r.finetuned:.4g}", r.n]
        for r in summary.itertuples(index=False)
    ]
    header = ["model", "norm", "task", "measure", "pretrained", "fine-tuned (best)", "n"]
    note = "Median over seeds; fine-tuned = at the best epoch."
    return f"## Isotropy\n\n{markdown_table(header, body)}\n\n{note}\n"


def status_markdown(
    unfinished: Sequence[Run],
    missing: Sequence[MissingJob],
    sweeps: Sequence[Sweep],
    duplicates: Sequence[Sequence[Run]],
    now: datetime,
) -> str:
    """Unfinished and missing jobs (rerun them with ``python -m isotune.rerun <sweep_dir>``)."""
    lines = [f"## Failed or unfinished runs ({len(unfinished)})", ""]
    lines += [f"- {run.job_dir}: {run.describe(now)}" for run in unfinished] or ["None."]
    lines += ["", f"## Missing runs ({len(missing)})", ""]
    missing_lines = [
        f"- {job.sweep.dir} #{job.number}: {' '.join(job.overrides)}" for job in missing
    ]
    lines += missing_lines or ["None."]
    lines += [
        f"- {sweep.dir}: unknown, its sweeper {sweep.sweeper} has no fixed list of jobs"
        for sweep in sweeps
        if not sweep.enumerable
    ]
    if (unfinished or missing) and sweeps:
        lines += [
            "",
            "Rerun them (--dry-run shows the commands first; runs still marked running, which "
            "may be alive, only with --include-running):",
        ]
        lines += [f"    python -m isotune.rerun {sweep.dir}" for sweep in sweeps]
    if duplicates:
        lines += ["", "## Duplicate runs (the table keeps the latest of each)", ""]
        lines += [
            "- "
            + " ".join(
                f"{name}={value}" for name, value in zip(RUN_KEY, group[-1].key(), strict=True)
            )
            + ": "
            + ", ".join(str(run.job_dir) for run in group)
            for group in duplicates
        ]
    return "\n".join(lines) + "\n"


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


@dataclass
class Aggregate:
    """Everything the tables and the status report of one directory are made of."""

    summary: pd.DataFrame
    isotropy: pd.DataFrame
    unfinished: list[Run]
    missing: list[MissingJob]
    sweeps: list[Sweep]
    duplicates: list[list[Run]]
    checked_at: datetime  # the age of running runs is counted to this time

    def report(self) -> str:
        """The results tables and the unfinished/missing/duplicate runs, as Markdown."""
        tables = results_markdown(self.summary) if len(self.summary) else "No completed runs.\n"
        status = status_markdown(
            self.unfinished, self.missing, self.sweeps, self.duplicates, self.checked_at
        )
        return f"{tables}\n{status}"


def aggregate(directory: Path, now: datetime | None = None) -> Aggregate:
    """Read every run below ``directory`` (and its sweeps' multirun.yaml) into tables; ``now``
    (default: the current time, with its UTC offset) dates the age of running runs."""
    directory = Path(directory)
    if not directory.is_dir():
        raise IsotuneError(f"{directory} is not a directory; pass a run or sweep output directory.")
    runs, sweeps = load_runs(directory), find_sweeps(directory)
    if not runs and not sweeps:
        raise IsotuneError(
            f"No {RESULTS_FILE} and no {SWEEP_FILE} below {directory}: pass the output directory "
            "of a run or a sweep (e.g. logs/multirun/<date>), where each run writes results.json."
        )
    kept, duplicates = latest_completed_runs(runs)
    scores = scores_frame(kept)
    isotropy = isotropy_frame(kept)
    return Aggregate(
        summary=pd.DataFrame(columns=SUMMARY_COLUMNS) if scores.empty else summarize_scores(scores),
        isotropy=summarize_isotropy(isotropy),
        unfinished=unfinished_runs(runs, sweeps),
        missing=missing_jobs(sweeps, runs),
        sweeps=sweeps,
        duplicates=duplicates,
        checked_at=now or datetime.now().astimezone(),
    )


def write_tables(result: Aggregate, directory: Path) -> list[Path]:
    """Write the Markdown and CSV tables next to the runs they summarise."""
    outputs = {
        RESULTS_MD: result.report(),
        RESULTS_CSV: result.summary.round(4).to_csv(index=False),
        ISOTROPY_MD: isotropy_markdown(result.isotropy),
        ISOTROPY_CSV: result.isotropy.round(6).to_csv(index=False),
    }
    for name, text in outputs.items():
        (Path(directory) / name).write_text(text)
    return [Path(directory) / name for name in outputs]


def log_to_wandb(result: Aggregate, directory: Path, project: str) -> None:
    import wandb

    run = wandb.init(
        project=project,
        job_type="aggregate",
        name=f"aggregate-{Path(directory).name}",
        config={"directory": str(directory)},
    )
    run.log(
        {
            "results_table": wandb.Table(dataframe=result.summary),
            "isotropy_table": wandb.Table(dataframe=result.isotropy),
        }
    )
    run.finish()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m isotune.aggregate",
        description="Tables over seeds (median ± std per model x norm x task) of every "
        f"{RESULTS_FILE} below a directory, written into it as {RESULTS_MD}/.csv and "
        f"{ISOTROPY_MD}/.csv, plus the failed and missing runs of its sweeps.",
    )
    parser.add_argument("directory", type=Path, help="a run or sweep output directory")
    parser.add_argument("--wandb", action="store_true", help="also log the tables to W&B")
    parser.add_argument(
        "--wandb-project",
        default=os.environ.get("WANDB_PROJECT", "isotune"),
        help="W&B project (default: $WANDB_PROJECT or isotune)",
    )
    args = parser.parse_args(argv)
    try:
        result = aggregate(args.directory)
    except IsotuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    written = write_tables(result, args.directory)
    print(result.report())
    print(isotropy_markdown(result.isotropy))
    print("Wrote " + ", ".join(str(path) for path in written))
    if args.wandb:
        online, reason = wandb_online()
        if online:
            log_to_wandb(result, args.directory, args.wandb_project)
        else:
            print(f"Not logged to W&B ({reason}).")
    return 0
