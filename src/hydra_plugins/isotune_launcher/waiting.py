"""A sweep or search whose jobs run on SLURM stops on SIGTERM as it does on Ctrl-C.

With submitit's launcher the command that sent the jobs only waits for them, and Python's default
SIGTERM (``kill``, a login node's session limit, its own job's time limit) ended it at once,
without the summary Ctrl-C prints. Here SIGTERM raises :class:`SweepStopped`, which the sweepers
handle as Ctrl-C (exit status 143); the jobs go on, held by SLURM. Other launchers are left as
they are: their jobs act on SIGTERM themselves (:mod:`isotune.record.stopping`).
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
    """While the block runs, SIGTERM raises :class:`SweepStopped` if ``launcher`` is (built on)
    submitit's."""
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
