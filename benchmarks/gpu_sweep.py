"""A sweep of short jobs through ``hydra/launcher=gpus``, for ``gpu_check.py``: its wall time, the
jobs that completed, and the peak GPU memory of each job.

The peak memory is torch's own count, written by each job (:class:`PeakGpuMemory`, which the job
imports from this file): unlike nvidia-smi it needs no tool on the machine and no sampling, and it
stays per job although a worker process runs several jobs one after another.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import torch

from isotune.record.results import RESULTS_FILE, read_results

ROOT = Path(__file__).resolve().parents[1]
MEMORY_FILE = "gpu_memory.json"


class PeakGpuMemory(L.Callback):
    """Writes the job's peak GPU memory to ``<run folder>/gpu_memory.json``: torch's
    ``max_memory_reserved`` (what the caching allocator held, so what other jobs on the GPU could
    not use) and ``max_memory_allocated``, counted from the job's start. The CUDA context (about
    0.5 GB a process) is not included. Writes nothing on CPU."""

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if trainer.strategy.root_device.type == "cuda":
            gc.collect()  # what the worker's previous job left
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def teardown(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if trainer.strategy.root_device.type == "cuda" and stage == "fit":
            peaks = {
                "max_memory_reserved": torch.cuda.max_memory_reserved(),
                "max_memory_allocated": torch.cuda.max_memory_allocated(),
            }
            (Path(trainer.default_root_dir) / MEMORY_FILE).write_text(json.dumps(peaks))


def sweep_command(
    jobs_per_gpu: int,
    jobs: int,
    train_batches: int | float,
    model_dir: Path,
    glue_dir: Path,
    sweep_dir: Path,
    trainer: str = "gpu",
    epochs: int = 1,
    launcher: Sequence[str] = ("hydra/launcher=gpus",),
) -> list[str]:
    """``python train.py -m`` on the gpus launcher (or ``launcher``'s overrides): ``jobs`` jobs
    (seeds 1, 2, ...) of ``epochs`` epochs of ``train_batches`` (trainer.limit_train_batches; 1.0:
    all of RTE) with the default callbacks, each writing its peak GPU memory."""
    seeds = ",".join(str(seed) for seed in range(1, jobs + 1))
    return [
        sys.executable, str(ROOT / "train.py"), "-m",
        *launcher, f"hydra.launcher.jobs_per_gpu={jobs_per_gpu}",
        f"hydra.sweep.dir={sweep_dir}", f"seed={seeds}",
        f"model.name_or_path={model_dir}", f"paths.glue_dir={glue_dir}",
        f"trainer={trainer}", f"trainer.max_epochs={epochs}",
        f"trainer.limit_train_batches={train_batches}",
        "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
        f"+callbacks.gpu_memory._target_={Path(__file__).stem}.{PeakGpuMemory.__name__}",
    ]  # fmt: skip


def packed_on_slurm() -> tuple[str, ...] | None:
    """The overrides that send a sweep packed into one allocation of the SLURM that answers here
    (``bash scripts/local_slurm.sh start``, whose node has no GPU resource: the allocation asks
    for none and its worker pool finds this machine's GPUs); None where no SLURM answers."""
    if shutil.which("sbatch") is None:
        return None
    try:
        nodes = subprocess.run(["sinfo", "--noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if nodes.returncode != 0 or not nodes.stdout.strip():
        return None
    return (
        "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0", "hydra.launcher.allocations=1",
        f"hydra.launcher.cpus_per_task={os.cpu_count() or 1}", "hydra.launcher.mem_gb=16",
        "hydra.launcher.timeout_min=60",
    )  # fmt: skip


def run_sweep(command: list[str], sweep_dir: Path, timeout: float) -> dict:
    """Run a sweep command in ``sweep_dir``, stopping it and its workers after ``timeout``
    seconds: its wall time, exit status (None: stopped), output file and :func:`read_sweep`."""
    sweep_dir.mkdir(parents=True)
    # The jobs import PeakGpuMemory from this file's folder.
    paths = [str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    output = sweep_dir / "sweep.log"
    start = time.perf_counter()
    with output.open("w") as log:
        process = subprocess.Popen(
            command,
            cwd=sweep_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the launcher and its workers
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    wall_s = time.perf_counter() - start
    return {"wall_s": wall_s, "returncode": returncode, "output": output, **read_sweep(sweep_dir)}


def read_sweep(sweep_dir: Path) -> dict:
    """How many of the sweep's jobs completed, and the largest peak GPU memory of a job in GiB
    (None when no job recorded one)."""
    statuses = [read_results(path).get("status") for path in sweep_dir.glob(f"*/{RESULTS_FILE}")]
    peaks = [
        json.loads(path.read_text())["max_memory_reserved"] / 2**30
        for path in sweep_dir.glob(f"*/{MEMORY_FILE}")
    ]
    return {"completed": statuses.count("completed"), "peak_gib": max(peaks, default=None)}


if __name__ == "__main__":  # a part of gpu_check.py with no command of its own: --help says so
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    parser.error("it runs nothing by itself; run python benchmarks/gpu_check.py (--help)")
