"""The pre-trained model's isotropy measures, measured once per sweep and read by its other jobs.

Epoch 0 of the isotropy callback encodes the probe with the pre-trained model and measures it.
Every seed of a sweep (or study) with the same model, task, probe, pooling and norm at
initialisation gets the same vectors, so the same numbers: on 2 CPU cores that pass was 3.1 s of
a 7.7 s warm job. A job that finds an entry for its key reads it instead; the key is a sha256 of
everything the pass reads (the weights it runs through, the padded batches it encodes, the
measures' settings, precision, device and versions), so a differing input is a new entry, never a
wrong one. Entries are JSON and PNG files written atomically (``measures.json`` last: a folder
without it is not an entry), read as data only: nothing in them is executed or unpickled.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from isotune.atomic_files import write_bytes, write_text

log = logging.getLogger(__name__)

FORMAT = 1  # raised when an entry's layout or the numbers' computation changes
MEASURES_FILE = "measures.json"
ENTRY_KEYS = ("values", "outliers", "massive", "figures")


def tensors_sha256(named: Iterable[tuple[str, Tensor]], digest: Any = None) -> Any:
    """Feed each tensor's name, dtype, shape and bytes to a sha256 (a new one unless given):
    two sets of tensors hash alike only when they are equal bit for bit."""
    digest = digest if digest is not None else hashlib.sha256()
    for name, tensor in named:
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest


def pretrained_key(
    weights: Mapping[str, Tensor], batches: Iterable[Mapping[str, Tensor]], settings: Mapping
) -> str:
    """The entry's name: a sha256 of the weights the probe pass runs through, the batches it
    encodes (padding included: it changes float32 vectors in their last bits) and ``settings``
    (JSON-able: the measures' options, precision, device, versions)."""
    digest = hashlib.sha256(json.dumps({"format": FORMAT, **settings}, sort_keys=True).encode())
    tensors_sha256(sorted(weights.items()), digest)
    for number, batch in enumerate(batches):
        tensors_sha256(((f"batch{number}.{k}", v) for k, v in sorted(batch.items())), digest)
    return digest.hexdigest()


class SharedPretrained:
    """Entries under ``folder`` (one sub-folder per key), shared by the jobs that name it."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def read(self, key: str) -> dict[str, Any] | None:
        """The entry of ``key`` (``values``, ``outliers``, ``massive`` and the paths of its
        ``figures``), or None where there is none or it is unreadable (then measured again)."""
        entry = self.folder / key
        try:
            found = json.loads((entry / MEASURES_FILE).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            log.warning("Measuring epoch 0 again: %s is unreadable (%s)", entry, error)
            return None
        if not isinstance(found, dict) or sorted(found) != sorted(ENTRY_KEYS):
            log.warning("Measuring epoch 0 again: %s holds no entry of this version", entry)
            return None
        found["figures"] = {view: entry / name for view, name in found["figures"].items()}
        if not all(path.is_file() for path in found["figures"].values()):
            return None
        return found

    def write(
        self,
        key: str,
        values: Mapping[str, float],
        outliers: Mapping[str, list[int]],
        massive: list[dict],
        figures: Mapping[str, Path],
    ) -> None:
        """Keep a measurement under ``key``: the figures first, ``measures.json`` last. Jobs that
        measured the same key at once write equal files; the last replace wins."""
        entry = self.folder / key
        for path in figures.values():
            write_bytes(entry / path.name, path.read_bytes())
        record = {
            "values": dict(values),
            "outliers": dict(outliers),
            "massive": massive,
            "figures": {view: path.name for view, path in figures.items()},
        }
        write_text(entry / MEASURES_FILE, json.dumps(record, allow_nan=True))
