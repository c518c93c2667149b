"""A sweep or search whose jobs run on SLURM stops on SIGTERM as it does on Ctrl-C.

With submitit's launcher the command that sent the jobs only waits for them. Python's default
SIGTERM (``kill``, a login node's session limit, the job the command itself runs in reaching its
time limit) ended that process at once, without the summary Ctrl-C prints: what ran, what is
still queued, and how to continue. Here SIGTERM raises :class:`SweepStopped`, a
``KeyboardInterrupt`` carrying the signal, which the sweepers handle as they handle Ctrl-C, and
exit with the shell's status for it (143). The jobs themselves go on: SLURM holds them, not this
process (:func:`isotune.sweeps.slurm_jobs.jobs_going_on` says which).

Only where jobs run elsewhere. The basic launcher runs each job in the sweep's own process, whose
run acts on SIGTERM where it can be continued from (:mod:`isotune.record.stopping`); the gpus
launcher passes it on to its workers.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import Any

SUBMITIT_PLUGIN = "hydra_plugins.hydra_submitit_launcher"


class SweepStopped(KeyboardInterrupt):
    """A sweep or search, waiting for jobs on a cluster, stopped by ``signal``."""

    def __init__(self, stopped_by: signal.Signals) -> None:
        super().__init__(stopped_by.name)
        self.signal = stopped_by


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SweepStopped(signal.Signals(signum))


def sigterm_stops_the_wait(launcher: Any) -> AbstractContextManager[None]:
    """While the block runs, SIGTERM raises :class:`SweepStopped` if ``launcher`` is
    submitit's, or built on it (it waits on jobs running elsewhere); any other launcher is left
    as it is."""
    waits = any(cls.__module__.startswith(SUBMITIT_PLUGIN) for cls in type(launcher).__mro__)
    return handled_by(signal.SIGTERM, _stop, waits)


@contextmanager
def handled_by(signum: signal.Signals, handler: Any, applies: bool) -> Iterator[None]:
    """While the block runs, ``handler`` handles ``signum`` if it ``applies`` (Python lets only
    the main thread set one), and the handler before it again after."""
    if not applies or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)
