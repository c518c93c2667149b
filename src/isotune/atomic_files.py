"""Files written whole or not at all: checkpoints, results.json, metrics.csv, reports, figures
(the guarantees and the tests that hold them: docs/security.md#writes-and-run-folders).

The temporary file lies in the destination's own folder, so the last step is a rename, never a
copy across filesystems (a /tmp staging file moved to NFS or Lustre is copied straight into its
final name); it is created with ``O_EXCL``, which refuses to follow a symlink, and ``os.replace``
renames over a link planted at the destination, so a write never leaves its folder. A link in
place of a *folder* on the way would lead every write below it out: :func:`links_leaving` finds
them. Stdlib only: the library's figures use it too.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, NoReturn


def write_atomically(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write`` with a binary file that becomes ``path`` once it returns: flushed, fsync'd,
    renamed over ``path``, the folder fsync'd. On any error the temporary file is removed and the
    error re-raised (a system error as an ``OSError`` naming ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(descriptor, 0o666 & ~_umask())  # mkstemp's 0600 would hide it from the group
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        _raise_naming(path, error)
    _sync_folder(path.parent)
    return path


def append_bytes(path: str | Path, data: bytes) -> Path:
    """``data`` added at the end of the existing file ``path``, whole or not at all (a growing
    record such as metrics.csv costs its new rows, not the file): on any error the file is cut
    back to its length before. A SIGKILL mid-write can leave a last line cut short, which
    :func:`complete_lines` leaves out. A symlink at ``path`` is refused (``O_NOFOLLOW``)."""
    path = Path(path)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    try:
        size = os.fstat(descriptor).st_size
        try:
            left = memoryview(data)
            while left:
                left = left[os.write(descriptor, left) :]
            os.fsync(descriptor)
        except BaseException as error:
            os.ftruncate(descriptor, size)
            _raise_naming(path, error)
    finally:
        os.close(descriptor)
    return path


def complete_lines(data: bytes) -> bytes:
    """``data`` up to its last newline: without a last line a kill cut short."""
    return data[: data.rfind(b"\n") + 1]


def write_bytes(path: str | Path, data: bytes) -> Path:
    return write_atomically(path, lambda file: file.write(data))


def write_text(path: str | Path, text: str) -> Path:
    """``text`` as UTF-8 (reports, tables, JSON), whatever the machine's locale."""
    return write_bytes(path, text.encode("utf-8"))


def save_figure(figure: Any, path: str | Path, **savefig: Any) -> Path:
    """A matplotlib figure as ``path``, in the format its suffix names (``.png``)."""
    path = Path(path)
    return write_atomically(
        path, lambda file: figure.savefig(file, format=path.suffix.lstrip("."), **savefig)
    )


def _raise_naming(path: Path, error: BaseException) -> NoReturn:
    """Re-raise ``error``; a system error as an ``OSError`` naming ``path`` (a write() names no
    file)."""
    cause = system_error(error)
    if cause is not None and cause.filename is None:
        raise OSError(cause.errno, cause.strerror, str(path)) from None
    raise error


def system_error(error: BaseException | None) -> OSError | None:
    """The system's error behind ``error``, if any: torch.save reports a full disk as a
    RuntimeError ("unexpected pos ...") raised while handling the write's ``OSError``."""
    while error is not None and not isinstance(error, OSError):
        error = error.__cause__ or error.__context__
    return error


@functools.cache
def _umask() -> int:
    """The process's umask (only settable, so set and put back; once, the first time)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable; filesystems that cannot sync a folder are left as they
    are (the file's own data is already synced)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def links_leaving(folder: str | Path) -> list[tuple[Path, Path]]:
    """Every symbolic link inside ``folder``, at any depth, whose target lies outside it (dangling
    or not), with that target: writes through these would leave the folder. Links are not followed
    while looking; a link whose target stays inside (W&B's ``wandb/latest-run``) is not listed."""
    root = Path(os.path.realpath(folder))
    leaving = []
    for parent, folders, files in os.walk(root):  # does not descend into linked folders
        for name in sorted(folders + files):
            path = Path(parent) / name
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                if not target.is_relative_to(root):
                    leaving.append((Path(folder) / path.relative_to(root), target))
    return leaving
