"""``results.json``: one file per run saying what ran and how it ended, for tables and reruns.

It is written when the run starts (status ``running``) and rewritten when it ends, ``completed``
or ``failed`` with the error, so a crashed or killed job is never mistaken for a missing one.
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
    return json.loads(Path(path).read_text())


class RunRecord:
    """The results of one run, updated as it goes and rewritten to disk at each change."""

    def __init__(self, output_dir: str | Path, **identity: Any) -> None:
        self.output_dir = Path(output_dir)
        self._start = time.perf_counter()
        self.results: dict[str, Any] = {
            "status": "running",
            "error": None,
            **identity,
            "output_dir": str(self.output_dir.resolve()),
            "started_at": datetime.now().isoformat(timespec="seconds"),
        }
        write_results(self.output_dir, self.results)

    def finish(self, status: str, error: BaseException | None = None, **fields: Any) -> dict:
        self.results.update(fields)
        self.results["status"] = status
        self.results["error"] = None if error is None else f"{type(error).__name__}: {error}"
        self.results["wall_time_s"] = round(time.perf_counter() - self._start, 2)
        self.results["finished_at"] = datetime.now().isoformat(timespec="seconds")
        write_results(self.output_dir, self.results)
        return self.results
