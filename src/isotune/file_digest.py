"""A file's sha256, streamed: the one hash the project identifies files by. On the ground beside
``errors.py`` because both a run's record (provenance) and the model (the GGUF cache) need it, and
the model wing may not import the record wing."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 20  # bytes read at a time when hashing a file


def file_sha256(path: Path) -> str:
    """The sha256 of a file (what ``sha256sum`` prints), streamed through one buffer of a MiB as
    ``hashlib.file_digest`` does (Python 3.11+): a weight file of gigabytes costs its read, not
    its size in memory, and as fast (the packaged MiniLM's 91 MB: about 0.2 s)."""
    digest, buffer = hashlib.sha256(), bytearray(BLOCK)
    view = memoryview(buffer)
    with Path(path).open("rb", buffering=0) as file:
        while size := file.readinto(buffer):
            digest.update(view[:size])
    return digest.hexdigest()
