"""Errors a user can fix: reported as one clear message, never as a traceback; and a run stopped
by a signal, which is no error."""

from __future__ import annotations

import errno
import signal
from collections.abc import Callable

from isotune.atomic_files import system_error


class IsotuneError(Exception):
    """Bad input or a missing resource; the message names the bad value and the fix."""


class NonFiniteLossError(IsotuneError):
    """The training loss became NaN or infinite: the run stops instead of training on garbage."""


class NoSpaceLeft(IsotuneError):
    """A write found its filesystem full (or the user's quota spent): the run stops ``failed``,
    and what it wrote before stays whole (:mod:`isotune.atomic_files`)."""

    ERRNOS = (errno.ENOSPC, errno.EDQUOT)

    @classmethod
    def behind(cls, error: BaseException) -> NoSpaceLeft | None:
        """The one message for ``error`` if a full disk or quota caused it, else None."""
        error = system_error(error)
        if error is None or error.errno not in cls.ERRNOS:
            return None
        where = error.filename or "a file"
        return cls(
            f"Cannot write {where}: {error.strerror}. The run stopped and is recorded "
            "failed; the files it wrote before are whole, its last checkpoint included. Fix: "
            "free space there (df -h shows it), or set paths.log_dir to a filesystem with room; "
            "then start the run again in its folder (it continues from its last.ckpt)."
        )


class JobsNotEnded(IsotuneError):
    """A search stopped because jobs of its last batch have not ended. Here, not beside the
    search loop, so the sweepers' stop catches it without importing Optuna at Hydra's scan."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT), SIGTERM (``kill``, a cluster's preemption or time
    limit) or SIGUSR2 (a cluster's warning before a time limit) after recording itself
    ``interrupted``, or ``completed`` where the signal came once it had trained to the end (the
    job, or the sweep, stops all the same). The entry point then calls ``hand_over`` where the
    signal had a handler before the run (submitit's, which requeues the job), else exits with the
    shell's status for that signal, 128 + its number."""

    def __init__(
        self,
        stopped_by: signal.Signals,
        hand_over: Callable[[], None] | None = None,
        completed: bool = False,
    ) -> None:
        super().__init__(stopped_by.name)
        self.signal = stopped_by
        self.hand_over = hand_over
        self.completed = completed  # the signal came as the run, trained, recorded its end


def first_line(error: BaseException) -> str:
    """``error`` in one line: its type and the first line of its message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
