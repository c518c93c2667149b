"""Stopping a run on a signal, at a point it can be continued from, within seconds.

On SIGTERM (``kill``, ``scancel``, a preemption) or SIGUSR2 (SLURM's warning before a time
limit), a run in its training batches or validation stops at the next safe point (the end of the
batch, with a checkpoint to continue exactly there, or of the epoch); anywhere else it stops at
once, losing nothing since the last checkpoint. It records itself ``interrupted`` and exits,
then calls a handler installed before the run (submitit's, which requeues the job): the one
requeue mechanism, so Lightning's own SLURM requeueing is off (:func:`cluster_plugins`), as with
submitit's it would requeue twice. Ctrl-C alone stops a run at once; in a sweep's process
(:func:`ctrl_c_in_a_sweep`) it is a stop signal like SIGTERM, so one Ctrl-C stops every job of
the sweep at its safe point. Docs: docs/faults.md.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)


def ctrl_c_in_a_sweep(signum: int, frame: FrameType | None) -> None:
    """SIGINT's handler in a sweep's process: Python's own Ctrl-C (``KeyboardInterrupt``) outside
    a run; a run started under it stops on Ctrl-C as on SIGTERM (:meth:`StopRequest.install`)."""
    raise KeyboardInterrupt


class StopRequested(BaseException):
    """Raised where a stop signal is acted on. Not an ``Exception``: raised from the signal
    handler, it may land inside library code whose ``except Exception`` would swallow or reword
    it (transformers' tokenizers do). Not a ``KeyboardInterrupt`` either: Lightning turns that
    into ``SystemExit`` and blames Ctrl-C."""

    def __init__(self, stopped_by: signal.Signals) -> None:
        super().__init__(f"stopped by {stopped_by.name}")
        self.signal = stopped_by


class StopRequest:
    """Handles the stop signals for one run: while ``deferring``, notes the signal for the next
    safe point; otherwise raises :class:`StopRequested` at once."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self.deferring = False
        self.previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        """Handle the stop signals (from the main thread only, as Python allows)."""
        if threading.current_thread() is not threading.main_thread():
            return
        in_a_sweep = self.previous.get(signal.SIGINT, signal.getsignal(signal.SIGINT))
        ctrl_c = (signal.SIGINT,) if in_a_sweep is ctrl_c_in_a_sweep else ()
        for stop in (*STOP_SIGNALS, *ctrl_c):
            current = signal.getsignal(stop)
            if current != self.handle:
                self.previous.setdefault(stop, current)
                signal.signal(stop, self.handle)

    def uninstall(self) -> None:
        for stop, handler in self.previous.items():
            signal.signal(stop, handler)
        self.previous = {}

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None:  # a stop is under way: the first signal is the one acted on
            log.warning("Received %s while stopping", signal.Signals(signum).name)
            return
        self.signal = signal.Signals(signum)
        if not self.deferring:
            log.warning("Received %s: stopping now", self.signal.name)
            raise StopRequested(self.signal)
        log.warning("Received %s: stopping at the next safe point", self.signal.name)

    def hold(self) -> None:
        """From now on only note a signal (while the run records how it ended)."""
        self.deferring = True

    def hand_over(self) -> Callable[[], None] | None:
        """The handler that was there before the run (submitit's requeue), bound to the signal,
        to call once the run has recorded its end; None where there was none."""
        previous = self.previous.get(self.signal) if self.signal is not None else None
        if not callable(previous) or previous in (signal.default_int_handler, ctrl_c_in_a_sweep):
            return None
        stopped_by = self.signal
        return lambda: previous(stopped_by, None)


class StopAtSafePoint(L.Callback):
    """Acts on a :class:`StopRequest` at the safe points of training (module docstring). Lightning's
    own SIGTERM handler, installed as training starts, raises mid-validation and would lose the
    epoch's training, so this callback puts the request's back. It comes after
    :class:`~isotune.record.rng_state.BatchRngState`, so its checkpoint holds the generators' state
    after the batch."""

    def __init__(self, request: StopRequest, last_checkpoint: Path) -> None:
        self.request = request
        self.last_checkpoint = Path(last_checkpoint)
        self.saved = False

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.request.install()

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.request.deferring = False  # the Sigma_S pass may follow: nothing to save there
        if self.request.signal is not None:  # came during validation: last.ckpt is this point
            raise StopRequested(self.request.signal)

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, *args) -> None:
        if self.saved:  # the last batch's checkpoint is written and its metrics logged
            raise StopRequested(self.request.signal)
        self.request.deferring = True

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, *args) -> None:
        """With a signal pending, save this step (unless gradients are still accumulating, or
        the epoch ends here anyway) and stop before the next batch."""
        if self.request.signal is None or self.saved or _accumulating(trainer, args[-1]):
            return
        if not trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self.save(trainer)
            self.saved = True

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.request.deferring = False

    def save(self, trainer: L.Trainer) -> None:
        """Write this step's checkpoint as last.ckpt (atomically, as every checkpoint is:
        :class:`~isotune.record.checkpoints.RunCheckpointIO`), the whole training state: saying
        so keeps Lightning from logging "`weights_only` was not set", which reads as if the
        checkpoint were loaded unsafely."""
        trainer.save_checkpoint(self.last_checkpoint, weights_only=False)
        log.warning(
            "Saved %s at step %d (epoch %d, batch %d) to continue from",
            self.last_checkpoint,
            trainer.global_step,
            trainer.current_epoch + 1,
            trainer.fit_loop.epoch_loop.batch_idx + 1,
        )


def _accumulating(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether gradients of this batch wait for the next ones before an optimizer step (a
    checkpoint now would lose them)."""
    last = batch_idx + 1 >= trainer.num_training_batches
    return (batch_idx + 1) % trainer.accumulate_grad_batches != 0 and not last


def cluster_plugins() -> list:
    """Lightning's SLURM environment without its auto-requeue, inside a SLURM job; else none."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []
