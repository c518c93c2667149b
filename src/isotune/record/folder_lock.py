"""One writer per run or sweep folder: a lock that dies with its process.

Two processes in one run folder (the same ``hydra.run.dir=`` typed twice, a rerun of a job that
is still alive) would both resume from its last.ckpt, both log every step into its metrics.csv
and overwrite each other's results.json. So a run takes its folder's lock before it writes
anything there, and a sweep (or a rerun of it) takes the sweep folder's: a POSIX record lock
(``fcntl``) on the empty file ``.isotune.lock``. The kernel releases it when the process ends
however it ends (``kill -9`` too), so nothing stale is left, and tells who holds it, so a second
process is refused with one message naming the first one's pid without writing a byte (a
refused start leaves the folder byte-identical). Unlike ``flock``, the lock is not inherited by
forked children (data loader workers) and is seen across NFS clients.

A POSIX lock belongs to the process and goes when the process closes any descriptor of the
file, so this module opens a folder's lock file once per process and keeps it open.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from isotune.errors import IsotuneError

LOCK_FILE = ".isotune.lock"

_held: dict[Path, int] = {}  # folder -> the open lock file this process holds it with
_FLOCK = struct.Struct("hhqqi")  # struct flock: type, whence, start, length, pid (Linux)


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
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pid = _holder_pid(descriptor)
        os.close(descriptor)
        if pid is None:  # it ended between the two calls: try once more
            return hold(folder, what)
        raise FolderInUse(
            f"The {what} folder {folder} is in use by another process, still alive: pid {pid}. "
            "Two processes in one folder would write the same files. Fix: wait for it to end "
            f"(or stop it: kill {pid}), or run elsewhere."
        ) from None
    _held[folder] = descriptor
    return True


def release(folder: str | Path) -> None:
    """Give up ``folder``'s lock (the file stays: removing it would race a process taking it)."""
    descriptor = _held.pop(Path(folder).resolve(), None)
    if descriptor is not None:
        os.close(descriptor)


def holder(folder: str | Path) -> int | None:
    """The pid of the live process that holds ``folder``'s lock, or None where none does."""
    folder = Path(folder).resolve()
    if folder in _held:
        return os.getpid()
    if not (folder / LOCK_FILE).is_file():
        return None
    descriptor = _open(folder, os.O_RDONLY)
    try:
        return _holder_pid(descriptor)
    finally:
        os.close(descriptor)


def _holder_pid(descriptor: int) -> int | None:
    """Who holds a lock on the file that a write lock of this process would conflict with."""
    query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    kind, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(descriptor, fcntl.F_GETLK, query))
    return None if kind == fcntl.F_UNLCK else pid


def _open(folder: Path, flags: int) -> int:
    """The lock file, never through a symlink planted in its place."""
    try:
        return os.open(folder / LOCK_FILE, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise IsotuneError(
            f"Cannot open the lock file {folder / LOCK_FILE} ({error.strerror}); it must be a "
            "plain file (not a link). Fix: remove it, or run elsewhere."
        ) from None
