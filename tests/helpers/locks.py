"""A folder's lock held by another live process, as a run or a sweep in it would hold it; a run
held alive until the test lets it go."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lightning as L

HOLD = (
    "import sys; from isotune.record import folder_lock; folder_lock.hold(sys.argv[1]); "
    "print('held', flush=True); sys.stdin.read()"
)


@contextmanager
def held_by_another_process(folder: Path) -> Iterator[subprocess.Popen]:
    """A Python process holding ``folder``'s lock until the block ends, then killed with
    SIGKILL (as ``kill -9`` would: the lock must not outlive it)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()


class WaitForFile(L.Callback):
    """Holds a run as training starts (writing ``<path>.waiting`` then) until ``path`` exists: a
    test starts a second process in the run's folder meanwhile, with the first one alive and
    writing nothing."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.path.with_suffix(".waiting").touch()
        while not self.path.exists():
            time.sleep(0.05)
