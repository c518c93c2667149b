"""One writer per run or sweep folder: a lock that dies with its process.

Two processes in one run folder (the same ``hydra.run.dir=`` typed twice, a rerun of a job that
is still alive) would both resume from its last.ckpt, both log every step into its metrics.csv
and overwrite each other's results.json. So a run takes its folder's lock before it writes
anything there, and a sweep (or a rerun of it) takes the sweep folder's: ``fcntl.flock`` on
``.isotune.lock``, which holds the pid of its owner. The kernel releases it when the process
ends however it ends (``kill -9`` too), so nothing stale is left; a second process is refused
with one message naming the first one's pid.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from isotune.errors import IsotuneError

LOCK_FILE = ".isotune.lock"

_held: dict[Path, int] = {}  # folder -> the open lock file this process holds it with


class FolderInUse(IsotuneError):
    """A live process already holds the folder."""


def hold(folder: str | Path, what: str = "run") -> bool:
    """Take ``folder``'s lock for this process, until :func:`release` or the process ends; True
    if taken now, False if this process held it already. :class:`FolderInUse` if another live
    process holds it."""
    folder = Path(folder).resolve()
    if folder in _held:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = _open(folder, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _pid_in(descriptor)
        os.close(descriptor)
        raise FolderInUse(
            f"The {what} folder {folder} is in use by another process, still alive: "
            f"{f'pid {pid}' if pid else 'its pid not yet written'}. Two processes in one folder "
            "would write the same files. Fix: wait for it to end (or stop it: "
            f"kill {pid or '<pid>'}), or run elsewhere."
        ) from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    _held[folder] = descriptor
    return True


def release(folder: str | Path) -> None:
    """Give up ``folder``'s lock (the file stays: removing it would race a process taking it)."""
    descriptor = _held.pop(Path(folder).resolve(), None)
    if descriptor is not None:
        os.close(descriptor)


def holder(folder: str | Path) -> int | None:
    """The pid of the live process that holds ``folder``'s lock (0 if it has not written its
    pid yet), or None where no process holds it."""
    folder = Path(folder).resolve()
    if folder in _held:
        return os.getpid()
    if not (folder / LOCK_FILE).is_file():
        return None
    descriptor = _open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _pid_in(descriptor)
    finally:
        os.close(descriptor)
    return None


def _open(folder: Path, flags: int) -> int:
    """The lock file, never through a symlink planted in its place."""
    try:
        return os.open(folder / LOCK_FILE, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise IsotuneError(
            f"Cannot open the lock file {folder / LOCK_FILE} ({error.strerror}); it must be a "
            "plain file (not a link). Fix: remove it, or run elsewhere."
        ) from None


def _pid_in(descriptor: int) -> int:
    """The pid the holder wrote; 0 in the moment between its taking the lock and writing it."""
    text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else 0
