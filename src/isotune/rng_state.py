"""Exact resume: the random-number generators' state travels with every epoch-end checkpoint.

Dropout masks (and anything else drawn from the global generators) depend on every draw made
since seeding. A run resumed from ``last.ckpt`` makes different draws before its first training
step than the uninterrupted run did (sanity validation, creating the DataLoader iterators, the
isotropy probe), so restoring the saved state when the checkpoint is loaded is not enough. Instead
the state is captured at each epoch's end and put back right before the next epoch's first
training step, in the uninterrupted run and in the resumed one alike: both then train that epoch
on identical random numbers. (The length-grouped batch order is seeded by seed + epoch and needs
no state.) An interruption mid-epoch resumes from the last epoch end.
"""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch


def capture_rng_state() -> dict[str, Any]:
    """The state of Python's, NumPy's, torch's CPU and (where present) every CUDA generator."""
    state = {
        "python": random.getstate(),
        # Plain Python values: checkpoints load with torch.load(weights_only=True).
        "numpy": _plain_numpy_state(np.random.get_state()),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _plain_numpy_state(state: tuple) -> tuple:
    name, keys, position, has_gauss, cached_gaussian = state
    return name, keys.tolist(), int(position), int(has_gauss), float(cached_gaussian)


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng_state` returned (CUDA only where it was captured)."""
    random.setstate(state["python"])
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state(
        (name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian)
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class EpochRngState(L.Callback):
    """Captures the generators at each epoch's end (saved in checkpoints) and restores them at
    the next epoch's first training batch, so a resumed run repeats the uninterrupted one."""

    def __init__(self) -> None:
        self.epoch_end_state: dict[str, Any] | None = None

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        # Callbacks run before ModelCheckpoint (Lightning orders checkpointing last), so the
        # checkpoints written at this epoch end hold this state.
        self.epoch_end_state = capture_rng_state()

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx):
        # After the epoch's DataLoader iterator exists: its creation draws from torch's generator
        # at a different moment in a resumed run than in an uninterrupted one.
        if batch_idx == 0 and self.epoch_end_state is not None:
            restore_rng_state(self.epoch_end_state)
            self.epoch_end_state = None

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_end_state": self.epoch_end_state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch_end_state = state_dict["epoch_end_state"]
