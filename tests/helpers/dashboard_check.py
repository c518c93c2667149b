"""Check a saved view's panels against what runs really logged: every key a panel names, and the
axis it draws against, must be one that some run's W&B file holds
(:mod:`isotune.dashboard.run_file`); a custom chart's table must be in some run's summary, with
every column the chart draws.

Works on the JSON of :func:`isotune.dashboard.views.view_json` (what ``--dry-run`` writes), so a
dashboard can be checked against a sweep's runs without W&B's servers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from fnmatch import fnmatchcase
from typing import Any

from isotune.dashboard.run_file import RunKeys

DEFAULT_STEP = "_step"  # W&B's own row counter: the axis of a key without a step metric


def panels(view: Any) -> Iterator[dict]:
    """Every panel of a view's JSON (those of a workspace's sections and a report's grids)."""
    if isinstance(view, dict):
        if "layout" in view and view.get("type") not in ("Section", "Workspace"):
            yield view
        else:
            for value in view.values():
                yield from panels(value)
    elif isinstance(view, list):
        for item in view:
            yield from panels(item)


def step_metric(key: str, runs: Iterable[RunKeys]) -> set[str]:
    """The axes runs draw ``key`` against: its own ``define_metric``, else the longest glob that
    matches it (W&B's most specific), else W&B's ``_step``."""
    axes = set()
    for run in runs:
        if key in run.step_metrics:
            axes.add(run.step_metrics[key])
            continue
        globs = [glob for glob in run.step_metrics if "*" in glob and fnmatchcase(key, glob)]
        axes.add(run.step_metrics[max(globs, key=len)] if globs else DEFAULT_STEP)
    return axes


def unlogged(view: Any, runs: list[RunKeys]) -> list[str]:
    """What in the panels of ``view`` no run logged (one line each; empty: all logged)."""
    history = set().union(*(run.history for run in runs))
    summary = set().union(*(run.summary for run in runs))
    problems = []
    for panel in panels(view):
        kind, title = panel["type"], panel.get("title")
        if kind == "LinePlot":
            pattern = panel.get("metric_regex")
            keys = [k for k in history if re.fullmatch(pattern, k)] if pattern else panel["y"]
            if pattern and not keys:
                problems.append(f"{title}: no logged key matches {pattern!r}")
            problems += [f"{title}: {key!r} never logged" for key in keys if key not in history]
            if panel["x"] not in history:
                problems.append(f"{title}: axis {panel['x']!r} never logged")
            for key in (k for k in keys if k in history):
                logging_runs = [run for run in runs if key in run.history]
                axes = step_metric(key, logging_runs) - {panel["x"]}
                if axes:
                    problems.append(f"{title}: runs draw {key!r} against {sorted(axes)}")
        elif kind == "BarPlot":
            missing = [key for key in panel["metrics"] if key not in summary]
            problems += [f"{title}: {key!r} not in any summary" for key in missing]
        elif kind == "ScatterPlot":
            for axis in ("x", "y"):
                if panel[axis]["name"] not in summary:
                    problems.append(f"{title}: {panel[axis]['name']!r} not in any summary")
        elif kind == "CustomChart":
            (table,) = panel["query"]["summaryTable"].values()
            title = panel["chart_strings"].get("title")
            columns = set().union(*(run.tables.get(table, ()) for run in runs))
            if not columns:
                problems.append(f"{title}: table {table!r} not in any summary")
            else:
                missing = [name for name in panel["chart_fields"].values() if name not in columns]
                problems += [f"{title}: {table!r} has no column {name!r}" for name in missing]
        elif kind == "MediaBrowser":
            missing = [key for key in panel["media_keys"] if key not in history]
            problems += [f"{title}: {key!r} never logged" for key in missing]
        else:
            problems.append(f"{title}: a {kind} panel, which this check cannot read")
    return problems
