"""A small filesystem of its own for a test (a tmpfs, as root), and a run that fills it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import pytest


@contextmanager
def small_disk(folder: Path, size: str = "32m") -> Iterator[Path]:
    """``folder`` as a tmpfs of ``size``, unmounted when the block ends; the test is skipped
    where mounting is not permitted (not root, or a container without the capability)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the test: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


class FillDiskAtEpoch(L.Callback):
    """As epoch ``epoch`` (0-based) starts, copies the run's checkpoints and results.json to
    ``keep`` (the test compares them afterwards), then fills the run's filesystem until less
    than half the smaller checkpoint fits (best.ckpt is the model only, by default): the epoch's
    first checkpoint save meets a full disk."""

    def __init__(self, epoch: int, keep: str) -> None:
        self.epoch = epoch
        self.keep = Path(keep)

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.current_epoch != self.epoch:
            return
        run = Path(trainer.default_root_dir)
        last = run / "checkpoints" / "last.ckpt"
        for saved in (last, last.with_name("best.ckpt"), run / "results.json"):
            shutil.copy2(saved, self.keep / saved.name)
        disk = os.statvfs(run)
        leave = min(saved.stat().st_size for saved in (last, last.with_name("best.ckpt"))) // 2
        with open(run.parent / "filler", "wb") as filler:
            filler.truncate(0)
            os.posix_fallocate(filler.fileno(), 0, disk.f_bavail * disk.f_frsize - leave)
