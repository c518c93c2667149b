"""A job's time from a few of its training steps timed on this machine: the preview's estimate
where no run of the sweep has completed yet (docs/sweeps.md#preview).

The job's config is built as its run builds it (:func:`isotune.training.fit.model_and_data`, its
trainer from ``trainer``), without its callbacks, logger or checkpoints, and nothing is written:
the trainer's folder is a temporary one, removed after. :data:`TIMED_STEPS` batches are timed end
(forward, backward, optimizer step), the first not counted (its warm-up), and the job's
time is the median batch times the batches it trains, the range from the fastest to the slowest
timed batch. Training batches only: the validation of each epoch, the isotropy probe and the
model's loading add to each job, so the estimate is low for a job with a large dev set.

A job bound elsewhere cannot be timed here (:func:`bound_elsewhere`): one sent to SLURM, or one
that trains on a GPU this machine lacks; its preview says so and how to get an estimate.
"""

from __future__ import annotations

import copy
import logging
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from isotune.data.own_data import complete_own_task
from isotune.sweeps.time_estimate import JobTime
from isotune.tracking.reporting import counted
from isotune.training.fit import model_and_data
from isotune.training.lightning_tips import silence_lightning_tips

TIMED_STEPS = 6  # batches run; the first warms up and is not counted
GPU_ACCELERATORS = ("gpu", "cuda")


def bound_elsewhere(job: DictConfig, launcher: DictConfig) -> str | None:
    """Why ``job`` (a composed job of the sweep, sent to ``launcher``) cannot be timed here, and
    how to get its estimate; None where it trains on this machine."""
    if "slurm" in str(launcher.get("_target_", "")).lower():
        partition = launcher.get("partition")
        where = f"partition {partition}" if partition else "the cluster's default partition"
        return (
            f"the jobs run on SLURM ({where}), not on this machine. To get one: type the preview "
            "again once some of its jobs completed in the folder (their wall times give it), or "
            f"on a node of {where} without hydra/launcher=slurm (srun ... python train.py -m "
            "... hydra.sweeper.preview=true), which times a few steps there"
        )
    devices = job.trainer.get("devices", 1)
    if str(devices) != "1":
        return (
            f"the jobs train on several devices at once (trainer.devices={devices}), which a "
            "timing here would start as processes of their own. To get one: type the preview "
            "again once some of its jobs completed in the folder (their wall times give it), or "
            "with trainer.devices=1 for the time of one device"
        )
    accelerator = str(job.trainer.get("accelerator", "auto"))
    if accelerator in GPU_ACCELERATORS and not torch.cuda.is_available():
        return (
            f"the jobs train on a GPU (trainer.accelerator={accelerator}) and this machine has "
            "none (torch sees no CUDA device). To get one: type the preview on the machine with "
            "the GPU, or again once some of its jobs completed in the folder (their wall times "
            "give it)"
        )
    return None


def time_training_steps(job: DictConfig, what: str, steps: int = TIMED_STEPS) -> JobTime:
    """``job``'s time (the config of one job, named ``what`` in the estimate's
    ``measured_from``) from ``steps`` of its training batches run here; nothing is written."""
    job = copy.deepcopy(job)
    own_data = complete_own_task(job)
    timer = BatchTimer(steps)
    with tempfile.TemporaryDirectory() as scratch, _lightning_quiet():
        model, datamodule = model_and_data(job, own_data)
        trainer: L.Trainer = instantiate(
            job.trainer,
            callbacks=[timer],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            default_root_dir=scratch,
        )
        trainer.fit(model, datamodule=datamodule)
    timed = timer.times[1:] or timer.times  # a job of one batch: its only one
    typical = statistics.median(timed)
    device = trainer.strategy.root_device.type.upper()
    return JobTime(
        typical * timer.batches,
        min(timed) * timer.batches,
        max(timed) * timer.batches,
        f"{counted(len(timed), 'training batch', 'training batches')} of {what} timed here on "
        f"{device} ({typical:.3g} s each, the median, x {timer.batches} batches; the range from "
        "the fastest to the slowest batch; training only: each epoch's validation and isotropy "
        "probe, and the model's loading, add to it)",
    )


@contextmanager
def _lightning_quiet() -> Iterator[None]:
    """Lightning's and Fabric's info lines (the seed set, the devices found) kept out of the
    preview while it times: they speak of a run that is not one."""
    silence_lightning_tips()
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class BatchTimer(L.Callback):
    """Times each training batch (its forward, backward and optimizer step) and stops the fit
    after ``steps`` of them; ``batches``: how many the job trains in all."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.times: list[float] = []
        self.batches = 0
        self._started = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.batches = int(trainer.estimated_stepping_batches) * trainer.accumulate_grad_batches

    def on_train_batch_start(self, *args: Any) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.times.append(time.perf_counter() - self._started)
        if len(self.times) >= self.steps:
            trainer.should_stop = True
