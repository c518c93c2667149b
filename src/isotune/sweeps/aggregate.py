"""Turn sweep folders into tables, paired statistics, figures and a report; list unfinished runs
(docs/sweeps.md#tables-statistics-report). The same configuration, task and seeds twice count
once, the latest completed run.

    python -m isotune.aggregate SWEEP [SWEEP ...] [--out DIR] [--baseline norm=batchnorm] [--wandb]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from isotune.atomic_files import write_text
from isotune.errors import IsotuneError
from isotune.record.debug_runs import debug_description, debug_line
from isotune.record.results import RESULTS_FILE
from isotune.sweeps import report
from isotune.sweeps.comparisons import (
    Configuration,
    Configurations,
    across_tasks,
    baseline_values,
    caveat,
    comparison_counts,
    paired_statistics,
)
from isotune.sweeps.failures import (
    failure_counts,
    failures_markdown,
    not_failed,
    with_failures,
)
from isotune.sweeps.figures import (
    POOLED,
    draw_figures,
    isotropy_epochs_data,
    isotropy_vs_score_data,
)
from isotune.sweeps.footprint import disk_used, readable
from isotune.sweeps.intention_to_treat import ended_without_score
from isotune.sweeps.mixed import Environments
from isotune.sweeps.runs import (
    SWEEP_FILE,
    MissingJob,
    Run,
    Sweep,
    find_sweeps,
    latest_completed_runs,
    load_runs,
    missing_jobs,
    search_parts,
    unfinished_runs,
)
from isotune.sweeps.seeds import SeedAxis, run_seeds
from isotune.sweeps.tables import (
    AVERAGE,
    KEY_MEASURES,
    compact_isotropy_markdown,
    isotropy_epochs_frame,
    isotropy_frame,
    isotropy_markdown,
    measure_key,
    outliers_markdown,
    results_markdown,
    scores_frame,
    summarize_isotropy,
    summarize_scores,
    task_metrics,
    without_score_frame,
)
from isotune.tracking.metric_keys import POST_NORM
from isotune.tracking.reporting import counted
from isotune.tracking.wandb_status import wandb_online

RESULTS_MD, ISOTROPY_MD, REPORT_MD = "results_table.md", "isotropy_table.md", "sweep_report.md"


@dataclass(frozen=True)
class HeldBack:
    """Runs a wing above leaves out of the tables (a sequential test's stated seeds between its
    looks), by their job folders, and why: the sentence printed above the tables."""

    job_dirs: frozenset[Path]
    why: str


@dataclass
class Aggregate:
    """Everything the tables, figures and report of a set of sweep folders are made of."""

    directories: list[Path]
    configurations: Configurations
    baseline: dict[str, str]  # the axes a configuration's baseline sets
    measures: Sequence[str]  # of the classifier input, in the report and figures
    seeds: SeedAxis  # the seed that pairs runs: the one that varies
    scores: pd.DataFrame  # one row per counted run
    summary: pd.DataFrame  # the results table
    failures: pd.DataFrame  # per configuration and task: runs, failed to learn, no verdict
    paired: pd.DataFrame
    paired_learned: pd.DataFrame  # over the runs that learned
    across: pd.DataFrame
    isotropy_runs: pd.DataFrame  # one row per counted run and measure
    isotropy: pd.DataFrame  # the isotropy table: medians over seeds
    curves: pd.DataFrame  # isotropy over the epochs
    points: pd.DataFrame  # best-epoch isotropy and score per run
    correlations: pd.DataFrame
    runs: list[Run]  # every results.json read
    unfinished: list[Run]
    missing: list[MissingJob]
    sweeps: list[Sweep]
    duplicates: list[tuple[str, list[Run]]]  # (configuration, task and seeds; its runs)
    environments: Environments  # of the counted runs: one, or a mix
    checked_at: datetime  # the age of running runs is counted to this time
    held_back: list[HeldBack]  # runs left out of the tables, and why

    def report(self) -> str:
        """The results tables, their environment and the runs' status, as Markdown."""
        return f"{self.results()}\n{self.environments.markdown()}\n\n{self.status()}"

    def results(self) -> str:
        """The results tables, under a line saying which runs are debug runs if any are."""
        debug = debug_line([debug_description(run.result) for run in self.runs])
        above = f"{debug}\n\n" if debug else ""
        above += "".join(f"{held.why}\n\n" for held in self.held_back)
        if self.summary.empty:
            return f"{above}No completed runs.\n"
        searches = report.searches_markdown(self.sweeps)
        tables = results_markdown(self.summary, self.configurations)
        return above + tables + (searches and f"\n{searches}")

    def status(self) -> str:
        shown = (self.runs, self.unfinished, self.missing, self.sweeps, self.duplicates)
        return report.status_markdown(*shown, self.checked_at)

    def tables(self) -> dict[str, pd.DataFrame]:
        """The tables written as ``<name>.csv`` and logged to W&B."""
        return {
            "results_table": self.summary,
            "failed_runs": self.failures,
            "paired_statistics": self.paired,
            "paired_statistics_learned": self.paired_learned,
            "across_tasks": self.across,
            "isotropy_table": self.isotropy,
            "isotropy_vs_score": self.correlations,
        }

    def sweep_report(self, figures: dict[str, Path]) -> str:
        """``sweep_report.md`` with ``figures`` (name: path) as images."""
        holm_wilcoxon, holm_t, _ = comparison_counts(self.paired)
        return report.sweep_report(
            title=", ".join(path.name for path in self.directories),
            directories=", ".join(f"`{path}`" for path in self.directories),
            completed=len(self.scores),
            duplicates=sum(len(runs) - 1 for _, runs in self.duplicates),
            unfinished=len(self.unfinished),
            missing=len(self.missing),
            checked_at=self.checked_at.isoformat(timespec="seconds"),
            shared=", ".join(f"`{part}`" for part in self.configurations.shared) or "nothing",
            baseline=" ".join(f"`{axis}={value}`" for axis, value in self.baseline.items()),
            results=self.results(),
            environment=self.environments.markdown(),
            failures=failures_markdown(self.failures),
            paired_by=self.seeds.name,
            paired=report.paired_markdown(self.paired),
            paired_learned=report.paired_learned_markdown(self.paired_learned),
            bootstrap=report.bootstrap_sentence(self.paired),
            holm_wilcoxon=holm_wilcoxon,
            holm_t=holm_t,
            caveat=caveat(self.paired),
            across=report.across_markdown(self.across, task_metrics(self.summary)),
            isotropy=compact_isotropy_markdown(self.isotropy, self.measures),
            view=POST_NORM,
            outliers=outliers_markdown(self.isotropy),
            correlations=report.correlations_markdown(self.correlations),
            pooled=POOLED,
            figures=report.figures_markdown(figures),
            status=self.status(),
        )


def aggregate(
    directories: Sequence[Path],
    baseline: Sequence[str] = (),
    measures: Sequence[str] = KEY_MEASURES,
    now: datetime | None = None,
    strict: bool = False,
    allow_unknown_code: bool = False,
    held_back: Callable[[Sequence[Sweep]], Sequence[HeldBack]] | None = None,
) -> Aggregate:
    """Read every run below ``directories`` (and their sweeps' multirun.yaml); ``baseline``:
    ``AXIS=VALUE`` choices over the default baseline; ``now`` dates the age of running runs;
    ``held_back(sweeps)`` names the runs a wing above leaves out of the tables."""
    directories = [Path(directory) for directory in directories]
    for directory in directories:
        if not directory.is_dir():
            raise IsotuneError(
                f"{directory} is not a directory; pass run or sweep output directories."
            )
    runs = list({run.path.resolve(): run for d in directories for run in load_runs(d)}.values())
    sweeps = list(
        {sweep.dir.resolve(): sweep for d in directories for sweep in find_sweeps(d)}.values()
    )
    runs = search_parts(runs, sweeps)
    if not runs and not sweeps:
        raise IsotuneError(
            f"No {RESULTS_FILE} and no {SWEEP_FILE} below {', '.join(map(str, directories))}: pass "
            "the output directory of a run or a sweep (e.g. logs/multirun/<date>), where each run "
            "writes results.json."
        )
    baseline_axes = baseline_values(baseline)

    def identity(run: Run) -> tuple[Configuration, str, int, int]:
        return Configuration.of(run), run.field("task"), *run_seeds(run)

    def placed(run: Run) -> Hashable | None:
        """None for a record that does not say its settings (an unreadable file, a start refused
        before recording them): listed among the failed runs, counted in no comparison."""
        try:
            return identity(run)
        except IsotuneError:
            return None

    left_out = list(held_back(sweeps)) if held_back is not None else []
    held = {job_dir.resolve() for group in left_out for job_dir in group.job_dirs}
    counted_runs = [run for run in runs if run.job_dir.resolve() not in held]
    kept, duplicate_groups = latest_completed_runs(counted_runs, key=identity)
    environments = Environments.of(kept)
    refused = environments.check_strict(allow_unknown_code) if strict else None
    if refused:
        raise IsotuneError(
            f"--strict: the {counted(len(kept), 'counted run')} below "
            f"{', '.join(map(str, directories))} do "
            f"not come from one environment: {refused}. Fix: rerun the runs that differ from one "
            "checkout and one environment (`python -m isotune.env <folder>` shows how a folder's "
            "runs differ from this machine, and the pip commands for their versions), aggregate "
            "the folders apart, or drop --strict to have the tables with this said in the report."
        )
    configurations = Configurations.of((Configuration.of(run) for run in kept), baseline_axes)
    seeds = SeedAxis.of(kept)
    scores = scores_frame(kept, configurations, seeds)
    without_score = without_score_frame(ended_without_score(runs, placed), configurations, seeds)
    summary = summarize_scores(scores, configurations)
    failures = failure_counts(scores)
    baselines = configurations.baseline_names
    paired = with_failures(
        paired_statistics(scores, configurations, without_score), failures, baselines, False
    )
    paired_learned = with_failures(
        paired_statistics(not_failed(scores), configurations), failures, baselines, True
    )
    isotropy_runs = isotropy_frame(kept, configurations, seeds)
    _check_measures(measures, isotropy_runs)
    points, correlations = isotropy_vs_score_data(scores, isotropy_runs, measures)
    duplicates = []
    for group in duplicate_groups:
        config, task, seed_init, seed_data = identity(group[-1])
        seeds_shown = f"seed_init={seed_init} seed_data={seed_data}"
        if seed_init == seed_data:
            seeds_shown = f"seed={seed_init}"
        duplicates.append((f"{configurations.name(config)} task={task} {seeds_shown}", group))
    return Aggregate(
        directories=directories,
        configurations=configurations,
        baseline=baseline_axes,
        measures=tuple(measures),
        seeds=seeds,
        scores=scores,
        summary=summary,
        failures=failures,
        paired=paired,
        paired_learned=paired_learned,
        across=across_tasks(paired, summary, AVERAGE),
        isotropy_runs=isotropy_runs,
        isotropy=summarize_isotropy(isotropy_runs, configurations),
        curves=isotropy_epochs_data(isotropy_epochs_frame(kept, configurations, measures, seeds)),
        points=points,
        correlations=correlations,
        runs=list(runs),
        unfinished=unfinished_runs(runs, sweeps),
        missing=missing_jobs(sweeps, runs),
        sweeps=sweeps,
        duplicates=duplicates,
        environments=environments,
        checked_at=now or datetime.now().astimezone(),
        held_back=left_out,
    )


def _check_measures(measures: Sequence[str], isotropy_runs: pd.DataFrame) -> None:
    """A measure no run recorded is a typo, unless the runs measured no isotropy at all."""
    prefix = measure_key("")
    recorded = {m.removeprefix(prefix) for m in isotropy_runs["measure"] if m.startswith(prefix)}
    unknown = [m for m in measures if m not in recorded]
    if recorded and unknown:
        names = ", ".join(sorted(recorded))
        raise IsotuneError(
            f"--measures {' '.join(unknown)}: no run recorded these for the classifier input "
            f"({POST_NORM}); choose among {names}."
        )


def write_outputs(result: Aggregate, directory: Path) -> tuple[list[Path], dict[str, Path], Path]:
    """Tables (Markdown and CSV), figures and the report into ``directory``; returns the tables'
    and figures' paths and the report's."""
    directory.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(
        result.scores,
        result.curves,
        result.points,
        result.correlations,
        result.configurations.names,
        directory,
    )
    outputs = {RESULTS_MD: result.report(), ISOTROPY_MD: isotropy_markdown(result.isotropy)}
    outputs |= {f"{name}.csv": table.to_csv(index=False) for name, table in result.tables().items()}
    for name, text in outputs.items():
        write_text(directory / name, text)
    report_path = _write_unless_only_checked(directory / REPORT_MD, result.sweep_report(figures))
    return [directory / name for name in outputs], figures, report_path


CHECKED = re.compile(r"\(checked [0-9T:+-]+\)")  # the time a report was made: sweep_report.md


def _write_unless_only_checked(path: Path, text: str) -> Path:
    """``text`` into ``path``, unless ``path`` already says the same but for the time it was
    checked: a carried folder regenerated with nothing changed stays as committed (``git
    status`` clean), while a running run's age, which is content, still rewrites it."""
    if path.is_file() and CHECKED.sub("", path.read_text()) == CHECKED.sub("", text):
        return path
    return write_text(path, text)


def main(
    argv: Sequence[str] | None = None,
    study_reports: Callable[[Sequence[Sweep], Path | None], Sequence[Path]] | None = None,
    held_back: Callable[[Sequence[Sweep]], Sequence[HeldBack]] | None = None,
) -> int:
    """The command; ``study_reports(sweeps, --out)`` writes the study folders' reports and
    ``held_back(sweeps)`` names the runs the tables leave out (the study wing's, above this one,
    which ``python -m isotune.aggregate`` passes)."""
    parser = argparse.ArgumentParser(
        prog="python -m isotune.aggregate",
        description="Tables over seeds, paired statistics against a baseline, figures and "
        f"{REPORT_MD} of every {RESULTS_FILE} below one or more sweep folders, plus the failed "
        "and missing runs of their sweeps.",
    )
    parser.add_argument("directories", nargs="+", type=Path, help="run or sweep output folders")
    parser.add_argument("--out", type=Path, help="output folder (default: the first folder)")
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="the baseline's value of an axis (default: norm=none); repeat for several axes",
    )
    parser.add_argument(
        "--measures",
        nargs="+",
        default=list(KEY_MEASURES),
        help=f"isotropy measures of the classifier input (default: {' '.join(KEY_MEASURES)})",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse runs that differ in code, packages, model or data (or do not record them)",
    )
    parser.add_argument(
        "--allow-unknown-code",
        action="store_true",
        help=(
            "with --strict, accept runs whose code is unknown (not run from a git checkout) or "
            "uncommitted (run from a tree with uncommitted changes)"
        ),
    )
    parser.add_argument("--wandb", action="store_true", help="also log everything to W&B")
    parser.add_argument(
        "--wandb-project",
        default=os.environ.get("WANDB_PROJECT", "isotune"),
        help="W&B project (default: $WANDB_PROJECT or isotune)",
    )
    args = parser.parse_args(argv)
    try:
        result = aggregate(
            args.directories,
            args.baseline,
            args.measures,
            strict=args.strict,
            allow_unknown_code=args.allow_unknown_code,
            held_back=held_back,
        )
    except IsotuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = args.out or args.directories[0]
    tables, figures, report_path = write_outputs(result, out)
    print(result.report())
    for study_report in study_reports(result.sweeps, args.out) if study_reports else ():
        print(f"\n{study_report.read_text()}Study report: {study_report}")
    for directory in args.directories:
        print(f"Disk used by {directory}: {readable(disk_used(directory))}")
    print("Wrote " + ", ".join(str(path) for path in [*tables, *figures.values()]))
    print(f"Report: {report_path}")
    if args.wandb:
        online, reason = wandb_online()
        folder = report.log_to_wandb(
            result.tables(),
            figures,
            report_path,
            args.wandb_project,
            group=args.directories[0].resolve().name,
            online=online,
        )
        if not online:
            print(f"W&B offline ({reason}): upload with `wandb sync {folder}`.")
    return 0
