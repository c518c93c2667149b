"""Debug runs told apart: their numbers check the code, they are not results.

A run is a debug run when its command line chose a debug preset (``debug=limit``, ``fdr``,
``overfit``: ``conf/debug/``, recorded in its results.json's ``overrides``) or when it scored
part of its dev set only (``dev_examples`` in results.json: ``trainer.limit_val_batches`` below
all of it, as ``debug=limit`` sets). A report made of runs (a sweep's aggregate, a study's report,
a submission) says in one line (:func:`debug_line`) which of them are debug runs, so that a table
of 128 dev examples and two short epochs is never read as a result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DEBUG_GROUP = "debug"  # conf/debug/: the presets that shrink a run


def debug_description(result: Mapping[str, Any]) -> str | None:
    """What makes ``result`` (a run's results.json) a debug run's, as the report line says it
    (``debug=limit: 128 of 277 dev examples scored``); None for a run that is not one."""
    parts = [
        override
        for override in result.get("overrides") or ()
        if override.partition("=")[0].lstrip("+") == DEBUG_GROUP
        and override.partition("=")[2] not in ("", "null")
    ]
    examples = result.get("dev_examples") or {}
    scored, of = examples.get("scored"), examples.get("of")
    if scored is not None and of is not None and scored < of:
        parts.append(f"{scored} of {of} dev examples scored")
    return ": ".join(parts) or None


def debug_line(descriptions: Sequence[str | None]) -> str | None:
    """The line a report of runs carries when any of them is a debug run, from each run's
    :func:`debug_description`; None when none is."""
    described = [description for description in descriptions if description]
    if not described:
        return None
    why = "; ".join(dict.fromkeys(described))
    n, total = len(described), len(descriptions)
    if n == total:
        who = "These runs are debug runs" if n > 1 else "This run is a debug run"
    else:
        who = f"{n} of these {total} runs {'is a debug run' if n == 1 else 'are debug runs'}"
    return f"{who} ({why}): not results."
