"""Rerun only the failed or missing jobs of a Hydra sweep, since a multirun cannot be resumed.

A failed (or never finished) job reruns in its own job directory with the overrides Hydra recorded
for it; a missing job (no results.json at all) runs in a new ``<sweep_dir>/rerun-<n>``. Each job is
one ``python <script> <overrides> hydra.run.dir=<dir>``, run from the sweep's original working
directory, one after another. Run it once the sweep has ended (a job still running looks
unfinished); it refuses while the workers of a ``gpus``-launcher sweep still hold their GPU slots.

    python -m isotune.rerun <sweep_dir> [--dry-run] [--script path/to/train.py]
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from isotune import gpu_slots
from isotune.aggregate import Sweep, failed_runs, load_runs, missing_jobs
from isotune.errors import IsotuneError

RERUN_DIR_PREFIX = "rerun-"
DEFAULT_SCRIPT = "train.py"


@dataclass(frozen=True)
class Rerun:
    """One job to run again: the command, where to run it from, and why."""

    argv: list[str]
    cwd: Path
    reason: str

    def shell(self) -> str:
        return f"cd {shlex.quote(str(self.cwd))} && {shlex.join(self.argv)}"


def training_script(sweep: Sweep, script: Path | None = None) -> Path:
    """``script`` if given; else the sweep's app (``hydra.job.name``.py in ``hydra.runtime.cwd``);
    else ``train.py`` in the current directory."""
    if script is not None:
        if not script.is_file():
            raise IsotuneError(f"--script {script} is not a file; pass the training script.")
        return script.resolve()
    hydra = sweep.config["hydra"]
    candidates = [
        Path(hydra["runtime"]["cwd"]) / f"{hydra['job']['name']}.py",
        Path.cwd() / DEFAULT_SCRIPT,
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    tried = " or ".join(map(str, candidates))
    raise IsotuneError(f"No training script at {tried}; pass its path with --script.")


def plan_reruns(sweep_dir: Path, script: Path | None = None) -> list[Rerun]:
    """The commands that rerun the sweep's failed jobs in place and its missing ones anew."""
    sweep = Sweep.load(sweep_dir)
    running = gpu_slots.held_slots(sweep.dir / gpu_slots.SWEEP_SLOT_DIR)
    if running:
        raise IsotuneError(
            f"The sweep {sweep.dir} is still running (its workers hold GPU slots {running}); "
            "rerun its failed or missing jobs once it has ended."
        )
    script = training_script(sweep, script)
    cwd = Path(sweep.config["hydra"]["runtime"]["cwd"])
    cwd = cwd if cwd.is_dir() else Path.cwd()
    runs = load_runs(sweep.dir)

    def command(overrides: Sequence[str], job_dir: Path) -> list[str]:
        if not overrides:
            raise IsotuneError(
                f"{job_dir} records no overrides (no .hydra/overrides.yaml, none in results.json), "
                "so its job is unknown; rerun it by hand or delete the directory."
            )
        return [sys.executable, str(script), *overrides, f"hydra.run.dir={job_dir.resolve()}"]

    reruns = [
        Rerun(command(run.overrides, run.job_dir), cwd, f"failed: {run.error}")
        for run in failed_runs(runs)
    ]
    first_free = next_rerun_index(sweep.dir)
    reruns += [
        Rerun(
            command(job.overrides, sweep.dir / f"{RERUN_DIR_PREFIX}{first_free + i}"),
            cwd,
            "missing",
        )
        for i, job in enumerate(missing_jobs([sweep], runs))
    ]
    return reruns


def next_rerun_index(sweep_dir: Path) -> int:
    """One past the highest ``rerun-<n>`` already there, so reruns never share a directory."""
    pattern = re.compile(rf"{RERUN_DIR_PREFIX}(\d+)")
    taken = [int(m[1]) for p in sweep_dir.iterdir() if (m := pattern.fullmatch(p.name))]
    return max(taken, default=-1) + 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m isotune.rerun",
        description="Rerun the failed or missing jobs of a Hydra sweep, one after another.",
    )
    parser.add_argument("sweep_dir", type=Path, help="the sweep directory (holds multirun.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument(
        "--script",
        type=Path,
        help="training script (default: the sweep's app in its original working directory, "
        f"else ./{DEFAULT_SCRIPT})",
    )
    args = parser.parse_args(argv)
    try:
        reruns = plan_reruns(args.sweep_dir, args.script)
    except IsotuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not reruns:
        print(f"Nothing to rerun in {args.sweep_dir}: no failed or missing jobs.")
        return 0
    failures = 0
    for rerun in reruns:
        print(f"# {' '.join(rerun.reason.split())}\n{rerun.shell()}", flush=True)
        if not args.dry_run:
            failures += subprocess.run(rerun.argv, cwd=rerun.cwd).returncode != 0
    if not args.dry_run:
        print(f"Reran {len(reruns)} jobs, {failures} failed again.")
    return int(failures > 0)


if __name__ == "__main__":
    sys.exit(main())
