"""A run killed between two epochs and resumed from its last.ckpt, next to the same run whole:
the comparison the resume tests of training, interventions and adaptation share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import lightning as L
import pytest
import torch

from isotune.training.run import train

KILL = f"+callbacks.kill={{_target_:{__name__}.KillAtEpochStart,epoch:2}}"  # after 2 epochs
KILL_AFTER_ONE = KILL.replace("epoch:2", "epoch:1")  # for two-epoch runs


class Killed(RuntimeError):
    """Stands for a job killed between two epochs."""


class KillAtEpochStart(L.Callback):
    """Stops the run as epoch ``epoch`` (0-based) starts, after the last epoch's checkpoints,
    while ``armed``: the resumed run has the same config (a resume checks it), disarmed."""

    armed = True

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.armed and trainer.current_epoch == self.epoch:
            raise Killed(f"killed at the start of epoch {self.epoch}")


def load(path) -> dict:
    return torch.load(path, weights_only=True)


class KilledAndResumed(NamedTuple):
    """A run whole, and the same run killed as epoch 3 starts then resumed from its last.ckpt."""

    full: dict  # results.json of each
    resumed: dict
    full_dir: Path
    killed_dir: Path
    resumed_dir: Path


def kill_and_resume(
    train_config, tmp_path: Path, *overrides: str, kill: str = KILL
) -> KilledAndResumed:
    full_dir, killed_dir, resumed_dir = tmp_path / "full", tmp_path / "killed", tmp_path / "resumed"
    full = train(train_config(*overrides, output_dir=full_dir))
    with pytest.raises(Killed):
        train(train_config(*overrides, kill, output_dir=killed_dir))
    resume = f"ckpt_path={killed_dir}/checkpoints/last.ckpt"
    with disarmed():
        resumed = train(train_config(*overrides, kill, resume, output_dir=resumed_dir))
    return KilledAndResumed(full, resumed, full_dir, killed_dir, resumed_dir)


@contextmanager
def disarmed() -> Iterator[None]:
    KillAtEpochStart.armed = False
    try:
        yield
    finally:
        KillAtEpochStart.armed = True
