"""Material from elsewhere: a zip checkpoint that runs a shell command when unpickled, as one
shared by someone else could, to prove no route of the project runs it; and a folder's digest,
to prove a refused start wrote nothing there."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from isotune.record.folder_lock import LOCK_FILE


class RunsCode:
    """Unpickled, runs ``touch <marker>``: the file appears only if the checkpoint's code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def code_running_checkpoint(path: Path, marker: Path) -> Path:
    """A zip checkpoint with every key train.py writes, one of them an object that runs code."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "state_dict": {"weight": torch.zeros(2)},
            "hyper_parameters": {"task": {"name": "rte"}},
            "global_step": 4,
            "epoch": 0,
            "loops": {},
            "optimizer_states": [],
            "lr_schedulers": [],
            "callbacks": {"payload": RunsCode(marker)},
        },
        path,
    )
    return path


def folder_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and the SHA-256 of its bytes: equal before and after means
    nothing in the folder was written. The folder's lock file is left out: an empty file that
    any start creates where there is none, and whose lock the kernel keeps, not its bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != LOCK_FILE
    }
