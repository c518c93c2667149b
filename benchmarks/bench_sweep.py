"""Jobs per hour of a sweep of short real jobs on the ``gpus`` launcher without GPUs (CPU jobs in
reused worker processes), before and after the sweep shares epoch 0's isotropy measures.

Each job is MiniLM on RTE: one training batch, then validation on the whole dev set (277
examples) with the isotropy callback at its defaults, as in issue 55's measurement. The two
variants alternate, a whole sweep each, ``--rounds`` times:

- ``before``: every job encodes and measures the probe with the pre-trained model itself
  (``callbacks.isotropy.shared_dir=null``) and steps foreach AdamW (``optim.fused=false``), as
  the code did before;
- ``after``: the defaults: the sweep's first job measures epoch 0 and the others read it;
  fused AdamW.

Per variant: jobs per hour (jobs over the sweep's wall time), and from the jobs' logs
(millisecond stamps; one worker runs the jobs in turn) what a warm job costs, from the previous
job's last line to its own last (everything the worker spends on it: Hydra composing the job,
loading the model and data, training, validation, the callback, checkpoint and records), and of
that its start-up, up to its first line. The warm jobs' median after / before is the goal's ratio
(issue 55: at most 0.65).

    GLUE_DIR=../shared/data/glue python benchmarks/bench_sweep.py --jobs 3 --rounds 1

``--memory N``: does a warm worker's memory creep? One sweep of N tiny jobs (a 2-layer BERT of
hidden 32 with random weights and MiniLM's tokenizer, RTE, one training batch and the whole dev
set, the callback at its defaults) in one reused ``gpus`` worker; each job writes the worker's
resident memory as the job ends (:class:`ResidentMemory`). Prints every job's, and the last
over the first (issue 55: within 10%, so at most 1.10 after 20 jobs):

    GLUE_DIR=../shared/data/glue python benchmarks/bench_sweep.py --memory 20
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import lightning as L
from gpu_measures import make_tokenizer, save_random_encoder
from gpu_sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "before": ["callbacks.isotropy.shared_dir=null", "optim.fused=false"],
    "after": [],
}
LOG_STAMP = "%Y-%m-%d %H:%M:%S,%f"
MEMORY_FILE = "resident_memory.json"
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


class ResidentMemory(L.Callback):
    """Writes the process's resident memory (VmRSS, MiB) as a fit ends, to
    ``<run folder>/resident_memory.json``: in a reused worker, what the jobs before left. With
    it, what tells a leak from a one-time cost: the modules imported so far (a job's first use
    of a code path imports it once) and the objects the garbage collector tracks (what the
    jobs before left alive)."""

    def teardown(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            found = {
                "resident_mib": resident_mib(),
                "modules": len(sys.modules),
                "objects": len(gc.get_objects()),
            }
            (Path(trainer.default_root_dir) / MEMORY_FILE).write_text(json.dumps(found))


def resident_mib() -> float:
    """This process's resident set size in MiB, from /proc/self/status (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line in /proc/self/status: resident memory is read on Linux")


def sweep_command(jobs: int, sweep_dir: Path, glue_dir: str, variant: list[str]) -> list[str]:
    """``python train.py -m`` of ``jobs`` seeds, one CPU job at a time in one reused worker."""
    seeds = ",".join(str(seed) for seed in range(1, jobs + 1))
    return [
        sys.executable, str(ROOT / "train.py"), "-m",
        "hydra/launcher=gpus", "hydra.launcher.n_jobs=1",
        f"hydra.sweep.dir={sweep_dir}", f"seed={seeds}", f"paths.glue_dir={glue_dir}",
        "debug=limit", "trainer.max_epochs=1", "trainer.limit_train_batches=1",
        "trainer.limit_val_batches=1.0", "trainer.enable_progress_bar=false",
        *variant,
    ]  # fmt: skip


def job_span(log: Path) -> tuple[datetime.datetime, datetime.datetime]:
    """When a job's log begins and ends (its first and last stamped lines)."""
    stamps = [
        datetime.datetime.strptime(line[1:24], LOG_STAMP)
        for line in log.read_text().splitlines()
        if line.startswith("[20")
    ]
    return stamps[0], stamps[-1]


def read_jobs(sweep_dir: Path, jobs: int) -> tuple[list[float], list[float]]:
    """For each job after the first (warm): the seconds from the previous job's last log line to
    its own last, and of them the start-up, up to its own first line."""
    spans = [job_span(sweep_dir / str(n) / "train.log") for n in range(jobs)]
    warm = [(spans[n][1] - spans[n - 1][1]).total_seconds() for n in range(1, jobs)]
    gaps = [(spans[n][0] - spans[n - 1][1]).total_seconds() for n in range(1, jobs)]
    return warm, gaps


def spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"
    )


def memory_command(jobs: int, sweep_dir: Path, glue_dir: str, model_dir: Path) -> list[str]:
    """The sweep of ``jobs`` tiny jobs, each writing the worker's resident memory as it ends."""
    return [
        *sweep_command(jobs, sweep_dir, glue_dir, [f"model.name_or_path={model_dir}"]),
        f"+callbacks.resident_memory._target_={Path(__file__).stem}.{ResidentMemory.__name__}",
    ]


def read_resident(sweep_dir: Path, jobs: int) -> list[dict]:
    """What each job's :class:`ResidentMemory` recorded as it ended, in job order."""
    return [json.loads((sweep_dir / str(n) / MEMORY_FILE).read_text()) for n in range(jobs)]


def memory_creep(jobs: int, glue_dir: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = save_random_encoder(Path(scratch) / "tiny", make_tokenizer(), TINY)
        sweep_dir = Path(scratch) / "sweep"
        command = memory_command(jobs, sweep_dir, glue_dir, model_dir)
        result = run_sweep(command, sweep_dir, timeout=3600)
        if result["completed"] != jobs:
            sys.exit(
                f"{result['completed']} of {jobs} jobs completed; see {result['output']}:\n"
                f"{result['output'].read_text()[-3000:]}"
            )
        found = read_resident(sweep_dir, jobs)
    print(f"{jobs} tiny jobs in one worker, {result['wall_s']:.0f} s; as each ended:")
    for name, what in (
        ("resident_mib", "resident MiB"),
        ("modules", "modules"),
        ("objects", "objects"),
    ):
        print(f"- {what}: " + ", ".join(f"{job[name]:.0f}" for job in found))
    resident = [job["resident_mib"] for job in found]
    print(
        f"resident after job {jobs} / after job 1: {resident[-1] / resident[0]:.3f} "
        "(goal: at most 1.10)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4, help="jobs per sweep (seeds 1..jobs), >= 2")
    parser.add_argument("--rounds", type=int, default=2, help="sweeps of each variant, alternated")
    parser.add_argument(
        "--memory", type=int, metavar="N", help="instead: resident memory over N tiny jobs"
    )
    args = parser.parse_args()
    glue_dir = os.environ.get("GLUE_DIR")
    if not glue_dir:
        parser.error("set GLUE_DIR to the GLUE data (RTE is read from it)")
    glue_dir = str(Path(glue_dir).resolve())
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU jobs, as on this machine
    if args.memory is not None:
        if args.memory < 2:
            parser.error(f"--memory {args.memory}: give at least 2 jobs to compare")
        memory_creep(args.memory, glue_dir)
        return
    found = {name: {"rate": [], "warm": [], "gaps": []} for name in VARIANTS}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for name, variant in VARIANTS.items():
                sweep_dir = Path(scratch) / f"{name}{round_}"
                command = sweep_command(args.jobs, sweep_dir, glue_dir, variant)
                result = run_sweep(command, sweep_dir, timeout=3600)
                if result["completed"] != args.jobs:
                    sys.exit(
                        f"{name}: {result['completed']} of {args.jobs} jobs completed; see "
                        f"{result['output']}:\n{result['output'].read_text()[-3000:]}"
                    )
                warm, gaps = read_jobs(sweep_dir, args.jobs)
                found[name]["rate"].append(3600 * args.jobs / result["wall_s"])
                found[name]["warm"] += warm
                found[name]["gaps"] += gaps
                print(
                    f"round {round_ + 1} {name}: sweep {result['wall_s']:.1f} s, warm jobs "
                    f"{', '.join(f'{w:.2f}' for w in warm)} s",
                    flush=True,
                )
    print(f"\n{args.jobs} jobs a sweep, {args.rounds} sweeps of each variant, alternated:")
    for name, values in found.items():
        print(
            f"- {name}: {statistics.median(values['rate']):.0f} jobs/hour (median of sweeps); "
            f"warm job {spread(values['warm'])}, its start-up {spread(values['gaps'])}"
        )
    warm = {name: statistics.median(values["warm"]) for name, values in found.items()}
    rate = {name: statistics.median(values["rate"]) for name, values in found.items()}
    print(
        f"warm job after / before: {warm['after'] / warm['before']:.3f}; "
        f"jobs per hour after / before: {rate['after'] / rate['before']:.3f}"
    )


if __name__ == "__main__":
    main()
