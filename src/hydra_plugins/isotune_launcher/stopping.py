"""How a sweep or a search stops before its end: one path for both sweepers.

- A refusal before any job ran (an :class:`~isotune.errors.IsotuneError`: bad settings, a disk too
  small, jobs still held by SLURM) is its message, exit status 1 (the folder was named as the
  sweep or search started); a folder that holds nothing but its lock (taken as Hydra's multirun
  started, before any check) is removed, so a misspelt arm leaves no empty folder behind.
- Jobs of a search that have not ended (:class:`~isotune.errors.JobsNotEnded`), or a launcher
  that raised (submitit's raises at the first job SLURM failed, while the array's other jobs still
  run): the summary so far, why it stopped, the jobs that go on without it with the ``scancel`` that
  stops them, exit status 1.
- Ctrl-C or SIGTERM (:mod:`.waiting`): the summary so far and the jobs that go on, then the
  signal's exit status (130, 143). Where the jobs run in this process (Hydra's basic launcher), a
  job's run takes Ctrl-C as it takes SIGTERM, stopping at its safe point
  (:func:`~isotune.record.stopping.ctrl_c_in_a_sweep`); the ``gpus`` launcher does the same in its
  workers.

``again`` is the line that says how to continue (a search: the same command).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_launcher import BasicLauncher

from hydra_plugins.isotune_launcher.waiting import handled_by, sigterm_stops_the_wait
from isotune.errors import IsotuneError, JobsNotEnded
from isotune.record.folder_lock import LOCK_FILE
from isotune.record.stopping import ctrl_c_in_a_sweep
from isotune.sweeps.runs import SWEEP_FILE
from isotune.sweeps.slurm_jobs import jobs_going_on
from isotune.sweeps.summary import summarize_sweep

log = logging.getLogger(__name__)


@contextmanager
def stops_with_a_summary(folder: Path, launcher: Any, again: str | None = None) -> Iterator[None]:
    """Run the block (the sweep, search or study in ``folder``) and stop as the module docstring
    says."""
    try:
        # SIGINT is ctrl_c_in_a_sweep where the jobs run in this process (Hydra's basic launcher)
        here = isinstance(launcher, BasicLauncher)
        with sigterm_stops_the_wait(launcher), handled_by(signal.SIGINT, ctrl_c_in_a_sweep, here):
            yield
    except JobsNotEnded as stopped:
        _stop(folder, str(stopped), again, log.error)
        sys.exit(1)
    except IsotuneError as error:
        log.error(str(error))
        remove_if_only_locked(folder)
        sys.exit(1)
    except SystemExit:  # a job's own exit, or the gpus launcher's on a signal
        _stop(folder, None, again, log.warning)
        raise
    except KeyboardInterrupt as stop:
        _stop(folder, None, again, log.warning)
        sys.exit(128 + getattr(stop, "signal", signal.SIGINT))
    except Exception as error:
        if not (folder / SWEEP_FILE).is_file():
            raise  # no job was sent: Hydra's own error, as it is
        text = str(error).strip()
        first_line = text.splitlines()[0] if text else ""
        why = (
            f"The launcher stopped waiting: {type(error).__name__}: {first_line} (jobs still "
            "running on a cluster go on)"
        )
        _stop(folder, why, again, log.error)
        sys.exit(1)


def remove_if_only_locked(folder: Path) -> None:
    """Remove ``folder`` if its lock file is all it holds: the folder lock made it for a sweep
    refused before anything was written. Another process that took the lock meanwhile made the
    folder hold its own file again, and it stays."""
    if not only_locked(folder):
        return
    (folder / LOCK_FILE).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()


def only_locked(folder: Path) -> bool:
    """Whether ``folder`` holds its lock file and nothing else: the folder lock made it as the
    sweep started, and nothing has been written to it yet."""
    return folder.is_dir() and [path.name for path in folder.iterdir()] == [LOCK_FILE]


def _stop(folder: Path, why: str | None, again: str | None, say: Callable[[str], None]) -> None:
    """Say the summary so far, why it stopped, the jobs that go on and how to continue."""
    lines = [summarize_sweep(folder).text] if (folder / SWEEP_FILE).is_file() else []
    say("\n".join([*lines, *(line for line in (why, jobs_going_on(folder), again) if line)]))
