"""Jobs per hour of a sweep of tiny jobs on the local SLURM (``scripts/local_slurm.sh``), sent as
one array task per job or packed into allocations that each run a worker pool (issue 64).

Each job: a 2-layer BERT of hidden 32 with random weights and MiniLM's tokenizer, RTE, one
training batch, then validation on the whole dev set with the isotropy callback at its defaults
(as ``bench_sweep.py --memory``). Both variants send the same ``--jobs`` seeds on CPU slots
(``gpus_per_node=0``):

- ``array``: one array task per job (``jobs_per_gpu=1``), ``cpus_per_task=1``, as many at once
  as the node's cores hold: each job starts a Python, imports torch, Lightning and Hydra, loads
  its model, and measures the pre-trained model's isotropy unless an earlier job wrote it;
- ``packed``: ``jobs_per_gpu=--per-allocation``, one allocation per that many cores: warm workers
  run the jobs in turn.

Jobs per hour: the jobs over the sweep command's wall time (submission, queueing and the
summary included), each variant once, ``--rounds`` times alternately:

    GLUE_DIR=../shared/data/glue python benchmarks/bench_slurm_packing.py --jobs 12
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_measures import make_tokenizer, save_random_encoder

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def variants(cores: int, per_allocation: int) -> dict[str, list[str]]:
    return {
        "array": ["hydra.launcher.cpus_per_task=1", f"hydra.launcher.array_parallelism={cores}"],
        "packed": [
            f"hydra.launcher.jobs_per_gpu={per_allocation}",
            f"hydra.launcher.cpus_per_task={per_allocation}",
            f"hydra.launcher.allocations={max(1, cores // per_allocation)}",
        ],
    }


def sweep_command(
    jobs: int, sweep_dir: Path, glue_dir: str, model_dir: Path, variant: list[str]
) -> list[str]:
    seeds = ",".join(str(seed) for seed in range(1, jobs + 1))
    return [
        sys.executable, str(ROOT / "train.py"), "-m",
        "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0", "hydra.launcher.mem_gb=2",
        f"hydra.sweep.dir={sweep_dir}", f"seed={seeds}", f"paths.glue_dir={glue_dir}",
        f"model.name_or_path={model_dir}", "debug=limit", "trainer.max_epochs=1",
        "trainer.limit_train_batches=1", "trainer.limit_val_batches=1.0",
        "trainer.enable_progress_bar=false", "logger=none",
        *variant,
    ]  # fmt: skip


def jobs_per_hour(command: list[str], jobs: int, cwd: Path) -> float:
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"the sweep failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return jobs / wall * 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--per-allocation", type=int, default=2, help="packed: jobs per allocation")
    args = parser.parse_args()
    # Absolute: the jobs run in folders of their own, where ../shared/data/glue names nothing.
    glue_dir = str(Path(os.environ.get("GLUE_DIR", ROOT / "data" / "glue")).resolve())
    cores = os.cpu_count() or 1
    (ROOT / "logs").mkdir(exist_ok=True)  # the jobs' folders where SLURM's nodes see them
    with tempfile.TemporaryDirectory(dir=ROOT / "logs") as scratch:
        scratch = Path(scratch)
        model_dir = save_random_encoder(scratch / "tiny", make_tokenizer(), TINY)
        found: dict[str, list[float]] = {}
        for round_ in range(args.rounds):
            for name, variant in variants(cores, args.per_allocation).items():
                sweep_dir = scratch / f"{name}-{round_}"
                command = sweep_command(args.jobs, sweep_dir, glue_dir, model_dir, variant)
                rate = jobs_per_hour(command, args.jobs, scratch)
                found.setdefault(name, []).append(rate)
                print(f"{name}, round {round_ + 1}: {rate:.0f} jobs per hour", flush=True)
    print(f"{args.jobs} jobs on {cores} cores of the local SLURM:")
    for name, rates in found.items():
        print(f"  {name}: {max(rates):.0f} jobs per hour (best of {len(rates)})")
    print(f"  packed / array: {max(found['packed']) / max(found['array']):.2f}")


if __name__ == "__main__":
    main()
