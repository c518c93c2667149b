"""``results.json``: one file per run saying what ran and how it ended, for tables and reruns.

It is written when an attempt starts (status ``running``), rewritten at every epoch end with the
results so far and an ``updated_at`` time, and rewritten when the attempt ends: ``completed``,
``failed`` with the error, or ``interrupted`` by a signal. A run resumed in its folder appends an
attempt instead of starting a new file. A crashed job is thus never mistaken for a missing one,
and a job killed without a chance to record its end (SIGKILL, out of memory) shows as a
``running`` file that stopped being updated.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from isotune.atomic_files import write_text
from isotune.record.provenance import describe_differences, differences

log = logging.getLogger(__name__)

RESULTS_FILE = "results.json"


def write_results(output_dir: str | Path, results: dict[str, Any]) -> Path:
    """Write ``results.json`` atomically (:mod:`isotune.atomic_files`): readers never see a
    half-written file, and a full disk or a kill leaves the previous one whole."""
    return write_text(
        Path(output_dir) / RESULTS_FILE, json.dumps(results, indent=2, default=str) + "\n"
    )


def read_results(path: str | Path) -> dict[str, Any]:
    """The results of one run; ``ValueError`` if the file is not JSON or not a JSON object."""
    try:
        results = json.loads(Path(path).read_text())
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    if not isinstance(results, dict):
        raise ValueError(f"not a JSON object but {json.dumps(results)[:40]}")
    return results


def kept_model_file(folder: str | Path, record: dict[str, Any]) -> Path | None:
    """The checkpoint a run's ``record`` (its results.json) names as its kept model, in its
    ``folder`` (where the run is now, moved or copied); None where it kept none
    (``checkpoint.keep=none``: ``best_checkpoint`` is null). Whether the file is still there is
    the reader's to check."""
    best = record.get("best_checkpoint")
    return Path(folder) / "checkpoints" / Path(best).name if best else None


def timestamp() -> str:
    """Now, with the UTC offset, so that a job's age reads right on a machine in another zone."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


class RunRecord:
    """The record of one run folder, updated as the run goes and rewritten at each change. Each
    start in its folder (a resume, a requeue) appends to ``attempts``, never overwriting one; the
    top-level fields are the latest attempt's state, ``wall_time_s`` counts every attempt. Nothing
    is written before :meth:`start`, so a refused start leaves an earlier record as it was.
    ``write=False`` keeps it in memory only: DDP's other processes share the folder with rank 0,
    which alone writes it."""

    def __init__(self, output_dir: str | Path, write: bool = True, **identity: Any) -> None:
        self.output_dir = Path(output_dir)
        self.write = write
        self.identity = identity
        self.earlier = _earlier_record(self.output_dir / RESULTS_FILE)
        self.results: dict[str, Any] = {}
        self.attempt: dict[str, Any] = {}
        self._start = time.perf_counter()

    @property
    def has_earlier_attempts(self) -> bool:
        return bool(self.earlier)

    def rebuild(self, saved: dict[str, Any], checkpoint: str) -> None:
        """Continue the record a checkpoint of this folder kept (its attempts, wall time and
        results as of that save), the folder's results.json being missing or unreadable; the
        record then says ``rebuilt_from`` that checkpoint."""
        self.earlier = {**saved, "rebuilt_from": checkpoint}

    def start(self, resumed_from: str | None = None, resumed_at_step: int | None = None) -> None:
        """Write the record with this attempt ``running`` after the earlier attempts."""
        self._start = time.perf_counter()
        started_at = timestamp()
        attempts = [_ended(attempt, self.earlier) for attempt in self.earlier.get("attempts", [])]
        self.attempt = {
            "started_at": started_at,
            "resumed_from": resumed_from,
            "resumed_at_step": resumed_at_step,
        }
        self.results = {
            "steps": 0,
            "history": [],
            **{key: value for key, value in self.earlier.items() if key not in _PER_ATTEMPT},
            "status": "running",
            "error": None,
            **self.identity,
            "output_dir": str(self.output_dir.resolve()),
            "started_at": self.earlier.get("started_at", started_at),
            "updated_at": started_at,
            "attempts": [*attempts, self.attempt],
        }
        self._write()

    def note_provenance(self, provenance: dict[str, Any]) -> None:
        """Record where this attempt came from (:mod:`isotune.record.provenance`), in the attempt
        and as the run's. A resume whose code, packages, model or data differ from the latest
        earlier attempt's logs one warning naming them and keeps them, old and new, in the
        attempt's and the run's ``provenance_changed``."""
        earlier = [a["provenance"] for a in self.results["attempts"][:-1] if a.get("provenance")]
        changed = differences(earlier[-1], provenance) if earlier else {}
        self.attempt["provenance"] = provenance
        if changed:
            self.attempt["provenance_changed"] = changed
            log.warning(
                "This attempt differs from the run's earlier attempt in %s: its results mix "
                "both (results.json says so in provenance_changed).",
                describe_differences(changed),
            )
        run_changed = {**self.results.get("provenance_changed", {}), **changed}
        self.update(provenance=provenance, provenance_changed=run_changed)

    def update(self, **fields: Any) -> dict[str, Any]:
        """Rewrite results.json with ``fields``, the wall time and ``updated_at`` so far."""
        if not self.results:
            self.start()
        self.results.update(fields)
        elapsed = round(time.perf_counter() - self._start, 2)
        earlier = sum(attempt.get("wall_time_s", 0.0) for attempt in self.results["attempts"][:-1])
        self.attempt.update(wall_time_s=elapsed, steps=self.results.get("steps"))
        self.results["wall_time_s"] = round(earlier + elapsed, 2)
        self.results["updated_at"] = timestamp()
        self._write()
        return self.results

    def finish(
        self,
        status: str,
        error: BaseException | str | None = None,
        interrupted_by: str | None = None,
        **fields: Any,
    ) -> dict:
        """End the record (and this attempt) ``completed``, ``failed`` with the error, or
        ``interrupted`` by a signal."""
        if not self.results:
            self.start()
        message = error if error is None or isinstance(error, str) else describe_error(error)
        finished_at = timestamp()
        self.results.update(status=status, error=message, finished_at=finished_at)
        self.results["interrupted_by"] = interrupted_by
        self.attempt.update(ended_at=finished_at, status=status, ended_by=interrupted_by or message)
        return self.update(**fields)

    def _write(self) -> None:
        if self.write:
            write_results(self.output_dir, self.results)


# Fields that describe one attempt's end, not carried from an earlier attempt into a new one.
_PER_ATTEMPT = ("status", "error", "interrupted_by", "finished_at", "wall_time_s")


def _ended(attempt: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """An earlier attempt as it ended; one still ``running`` was killed without a chance to
    record its end (SIGKILL, out of memory, a lost node), since its folder is being reused."""
    if attempt.get("status", "running") != "running":
        return attempt
    return {
        **attempt,
        "status": "killed",
        "ended_at": earlier.get("updated_at"),
        "ended_by": "no end recorded (SIGKILL, out of memory or a lost node); time of its "
        "last update",
    }


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _earlier_record(path: Path) -> dict[str, Any]:
    """The record an earlier attempt left in the folder ({} for none, or an unreadable one). A
    record from before attempts were kept becomes one attempt."""
    if not path.is_file():
        return {}
    try:
        earlier = read_results(path)
    except (OSError, ValueError):
        return {}
    if "attempts" not in earlier:
        earlier["attempts"] = [
            {
                "started_at": earlier.get("started_at"),
                "ended_at": earlier.get("finished_at") or earlier.get("updated_at"),
                "status": earlier.get("status"),
                "ended_by": earlier.get("interrupted_by") or earlier.get("error"),
                "steps": earlier.get("steps"),
                "wall_time_s": earlier.get("wall_time_s", 0.0),
            }
        ]
    return earlier
