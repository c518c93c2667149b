"""Errors a user can fix: reported as one clear message, never as a traceback; and a run stopped
by a signal, which is no error."""

import signal


class IsotuneError(Exception):
    """Bad input or a missing resource; the message names the bad value and the fix."""


class NonFiniteLossError(IsotuneError):
    """The training loss became NaN or infinite: the run stops instead of training on garbage."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT) or SIGTERM (``kill``, a cluster's time limit or
    preemption) after recording itself ``interrupted``; the entry point then exits with the
    shell's status for that signal, 128 + its number."""

    def __init__(self, stopped_by: signal.Signals) -> None:
        super().__init__(stopped_by.name)
        self.signal = stopped_by
