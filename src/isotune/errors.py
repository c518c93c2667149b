"""Errors a user can fix: reported as one clear message, never as a traceback; and a run stopped
by a signal, which is no error."""

import signal
from collections.abc import Callable


class IsotuneError(Exception):
    """Bad input or a missing resource; the message names the bad value and the fix."""


class NonFiniteLossError(IsotuneError):
    """The training loss became NaN or infinite: the run stops instead of training on garbage."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT), SIGTERM (``kill``, a cluster's preemption or time
    limit) or SIGUSR2 (a cluster's warning before a time limit) after recording itself
    ``interrupted``. The entry point then calls ``hand_over`` where the signal had a handler
    before the run (submitit's, which requeues the job), else exits with the shell's status for
    that signal, 128 + its number."""

    def __init__(
        self, stopped_by: signal.Signals, hand_over: Callable[[], None] | None = None
    ) -> None:
        super().__init__(stopped_by.name)
        self.signal = stopped_by
        self.hand_over = hand_over
