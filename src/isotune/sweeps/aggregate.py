"""Turn a directory of runs into the papers' tables, and say which runs failed or are missing.

``python -m isotune.aggregate <dir>`` reads every ``results.json`` below a directory (the
bookkeeping of :mod:`isotune.sweeps.runs`), writes the tables of :mod:`isotune.sweeps.tables` next
to the runs as Markdown and CSV, optionally logs them to W&B, and reports the runs that did not
complete and the jobs of its sweeps that never left a ``results.json``; :mod:`isotune.sweeps.rerun`
reruns those.

    python -m isotune.aggregate <dir> [--wandb]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from isotune.errors import IsotuneError
from isotune.results import RESULTS_FILE
from isotune.sweeps.runs import (
    RUN_KEY,
    SWEEP_FILE,
    MissingJob,
    Run,
    Sweep,
    find_sweeps,
    latest_completed_runs,
    load_runs,
    missing_jobs,
    unfinished_runs,
)
from isotune.sweeps.tables import (
    SUMMARY_COLUMNS,
    isotropy_frame,
    isotropy_markdown,
    results_markdown,
    scores_frame,
    summarize_isotropy,
    summarize_scores,
)
from isotune.wandb_logging import wandb_online

RESULTS_MD, RESULTS_CSV = "results_table.md", "results_table.csv"
ISOTROPY_MD, ISOTROPY_CSV = "isotropy_table.md", "isotropy_table.csv"


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
