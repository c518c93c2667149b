"""A job's time from its parts timed on this machine: the preview's estimate where no run of the
sweep has completed yet (docs/sweeps.md#preview). The job is built as its run builds it, without
logger or checkpoints, in a temporary folder, and trains :data:`TIMED_STEPS` batches.
"""

from __future__ import annotations

import copy
import logging
import math
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from isotune.data.own_data import complete_own_task
from isotune.sweeps.gpu_slots import cpu_share
from isotune.sweeps.time_estimate import JobParts
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


def time_job(job: DictConfig, threads: int | None = None, steps: int = TIMED_STEPS) -> JobParts:
    """The parts of ``job`` (the config of one job) run and timed here (:class:`JobTimer`), with
    ``threads`` torch threads (None: this process's); nothing is written."""
    job = copy.deepcopy(job)
    own_data = complete_own_task(job)
    with tempfile.TemporaryDirectory() as scratch, _quiet(), _torch_threads(threads):
        started = time.perf_counter()
        model, datamodule = model_and_data(job, own_data)
        limit = job.trainer.get("limit_val_batches", 1.0)
        per_split = [
            _kept(len(datamodule.eval_batches(split)), limit) for split in model.task.eval_splits
        ]
        timer = JobTimer(started, steps, sum(per_split))
        trainer: L.Trainer = instantiate(
            job.trainer,
            callbacks=[timer, *_isotropy_monitor(job, scratch)],  # the probe after the load
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=min(steps, max(per_split, default=0)),
            default_root_dir=scratch,
        )
        trainer.fit(model, datamodule=datamodule)
        used = torch.get_num_threads()
        saving = time.perf_counter()  # one checkpoint with the optimizer's state, as last.ckpt
        trainer.save_checkpoint(f"{scratch}/timed.ckpt", weights_only=False)
        save = time.perf_counter() - saving
    device = trainer.strategy.root_device.type.upper()
    return timer.parts(f"{device} with {counted(used, 'torch thread')}", _probe_shared(job), save)


def _probe_shared(job: DictConfig) -> bool:
    """Whether the sweep's jobs share the epoch-0 measures: an isotropy callback whose
    ``shared_dir`` is set (read unresolved: it names the sweep's folder, which a preview has not
    made)."""
    settings = (job.get("callbacks") or {}).get("isotropy")
    return bool(settings) and OmegaConf.to_container(settings).get("shared_dir") is not None


def job_threads(launcher: DictConfig, at_once: int) -> int | None:
    """The torch threads of each job ``launcher`` runs ``at_once``: the ``gpus`` launcher's share
    (``threads_per_job``, else the cores split as it splits them); None for the others."""
    if not str(launcher.get("_target_", "")).endswith("GpusLauncher"):
        return None
    return launcher.get("threads_per_job") or cpu_share(at_once)


def _kept(batches: int, limit: int | float) -> int:
    """The batches of a loader of ``batches`` that Lightning's ``limit_*_batches`` keeps (an int:
    that many; a fraction: that share, rounded down)."""
    return min(batches, limit) if isinstance(limit, int) else int(batches * limit)


def _isotropy_monitor(job: DictConfig, scratch: str) -> list[L.Callback]:
    """The job's isotropy callback, its figures in ``scratch`` and sharing nothing (so that its
    epoch-0 probe runs here), or none where the job has none."""
    settings = (job.get("callbacks") or {}).get("isotropy")
    if not settings:
        return []
    return [instantiate(settings, output_dir=scratch, shared_dir=None)]


@contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """torch on ``threads`` threads meanwhile (None: as it is)."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def _quiet() -> Iterator[None]:
    """Lightning's, Fabric's and the isotropy callback's info lines kept out of the preview while
    it times: they speak of a run that is not one."""
    silence_lightning_tips()
    quieted = ("lightning.pytorch", "lightning.fabric", "isotune.callbacks.isotropy")
    loggers = [logging.getLogger(name) for name in quieted]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class JobTimer(L.Callback):
    """Times a job's parts as the fit goes (:class:`JobParts`) and stops it after ``steps`` training
    batches and the validation that follows: the load up to training (sanity validation included),
    the epoch-0 probe, each training batch (the first, its warm-up, not counted) and validation
    batch, and validation's end (metrics and isotropy measures). ``val_count``: the batches a pass
    validates; the trainer says how many training batches and passes the job runs."""

    def __init__(self, started: float, steps: int, val_count: int) -> None:
        self.steps = steps
        self.val_count = val_count
        self.train: list[float] = []
        self.val: list[float] = []
        self.load = self.probe = self.val_end = 0.0
        self.train_count = self.validations = self.epochs = 0
        self._started = self._mark = started

    def parts(self, timed_on: str, probe_shared: bool, save: float) -> JobParts:
        timed = self.train[1:] or self.train  # a job of one batch: its only one
        return JobParts(
            self.load, self.probe, tuple(timed), self.train_count, tuple(self.val), self.val_count,
            self.val_end, self.validations, timed_on, probe_shared, save, self.epochs + 1
        )  # fmt: skip

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._mark = time.perf_counter()
        self.load = self._mark - self._started
        self.train_count = int(trainer.estimated_stepping_batches) * trainer.accumulate_grad_batches
        per_epoch, every = trainer.num_training_batches, trainer.val_check_batch
        self.epochs = math.ceil(self.train_count / per_epoch)
        if trainer.check_val_every_n_epoch is None:  # every val_check_batch batches
            self.validations = self.train_count // every
        else:
            passes = max(1, per_epoch // every) if every <= per_epoch else 1
            self.validations = self.epochs // trainer.check_val_every_n_epoch * passes

    def on_train_epoch_start(self, *args: Any) -> None:
        if not self.train:  # the callbacks' train start, after this one's: the probe
            self.probe = time.perf_counter() - self._mark

    def on_train_batch_start(self, *args: Any) -> None:
        self._mark = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.train.append(time.perf_counter() - self._mark)
        if len(self.train) >= self.steps:
            trainer.should_stop = True  # validation follows, then the fit ends

    def on_validation_batch_start(self, *args: Any) -> None:
        self._mark = time.perf_counter()

    def on_validation_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self._mark, started = time.perf_counter(), self._mark
        if not trainer.sanity_checking:
            self.val.append(self._mark - started)

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.val_end = time.perf_counter() - self._mark
