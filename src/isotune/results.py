"""``results.json``: one file per run saying what ran and how it ended, for tables and reruns.

It is written when the run starts (status ``running``), rewritten at every epoch end with the
results so far and an ``updated_at`` time, and rewritten when the run ends: ``completed``,
``failed`` with the error, or ``interrupted`` by Ctrl-C or SIGTERM. A crashed job is thus never
mistaken for a missing one, and a job killed without a chance to record its end (SIGKILL, out of
memory) shows as a ``running`` file that stopped being updated.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

RESULTS_FILE = "results.json"


def write_results(output_dir: str | Path, results: dict[str, Any]) -> Path:
    """Write ``results.json`` atomically: readers never see a half-written file."""
    path = Path(output_dir) / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(results, indent=2, default=str) + "\n")
    os.replace(partial, path)
    return path


def read_results(path: str | Path) -> dict[str, Any]:
    """The results of one run; ``ValueError`` if the file is not JSON or not a JSON object."""
    results = json.loads(Path(path).read_text())
    if not isinstance(results, dict):
        raise ValueError(f"not a JSON object but {json.dumps(results)[:40]}")
    return results


def timestamp() -> str:
    """Now, with the UTC offset, so that a job's age reads right on a machine in another zone."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


class RunRecord:
    """The results of one run, updated as it goes and rewritten to disk at each change.

    ``write=False`` keeps the record in memory only: the other processes of a DDP run share the
    run folder with rank 0, which alone measures isotropy and writes the file.
    """

    def __init__(self, output_dir: str | Path, write: bool = True, **identity: Any) -> None:
        self.output_dir = Path(output_dir)
        self.write = write
        self._start = time.perf_counter()
        started_at = timestamp()
        self.results: dict[str, Any] = {
            "status": "running",
            "error": None,
            **identity,
            "output_dir": str(self.output_dir.resolve()),
            "started_at": started_at,
            "updated_at": started_at,
        }
        if self.write:
            write_results(self.output_dir, self.results)

    def update(self, **fields: Any) -> dict[str, Any]:
        """Rewrite results.json with ``fields``, the wall time and ``updated_at`` so far."""
        self.results.update(fields)
        self.results["wall_time_s"] = round(time.perf_counter() - self._start, 2)
        self.results["updated_at"] = timestamp()
        if self.write:
            write_results(self.output_dir, self.results)
        return self.results

    def finish(self, status: str, error: BaseException | None = None, **fields: Any) -> dict:
        self.results["status"] = status
        self.results["error"] = None if error is None else f"{type(error).__name__}: {error}"
        self.results["finished_at"] = timestamp()
        return self.update(**fields)
