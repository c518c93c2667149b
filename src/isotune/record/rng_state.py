"""Exact resume: the random-number generators' state travels with every checkpoint.

A resumed run makes other draws before its next step than the uninterrupted one did (sanity
validation, new DataLoader iterators, the isotropy probe), so restoring the state at load is not
enough: it is captured after every training batch and put back right before the next, in both
runs alike, so both train every step on identical random numbers wherever the checkpoint was
written. (The batch order is seeded by seed + epoch and resumes at its position:
``LengthGroupedBatchSampler``.)
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


class BatchRngState(L.Callback):
    """Captures the generators after each training batch (saved in checkpoints) and restores
    them before the next one, so a resumed run repeats the uninterrupted one."""

    def __init__(self) -> None:
        self.after_last_batch: dict[str, Any] | None = None

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, *args) -> None:
        # Callbacks run before ModelCheckpoint (Lightning orders checkpointing last), so a
        # checkpoint written at this batch's end, or at the epoch's end, holds this state.
        self.after_last_batch = capture_rng_state()

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, *args) -> None:
        # After the batch was fetched: creating an epoch's DataLoader iterator draws from torch's
        # generator at a different moment in a resumed run than in an uninterrupted one.
        if self.after_last_batch is not None:
            restore_rng_state(self.after_last_batch)

    def state_dict(self) -> dict[str, Any]:
        return {"after_last_batch": self.after_last_batch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.after_last_batch = state_dict["after_last_batch"]
