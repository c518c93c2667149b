"""The dashboard's sections as W&B views, with ``wandb-workspaces`` (W&B's workspace and report
API): a project's saved workspace, and a sweep's report.

Every chart of :mod:`isotune.dashboard.layout` becomes a panel (runs grouped by their W&B group:
one line and a band per configuration). Building a view needs no network; :func:`view_json`
writes what was built for ``--dry-run`` and for runs without credentials.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import wandb_workspaces.reports.v2 as wr
import wandb_workspaces.workspaces as ws
from wandb_workspaces import expr

from isotune.atomic_files import write_text
from isotune.dashboard.layout import BAR, LINE, PROFILE, SCATTER, Chart, Section
from isotune.tracking.metric_keys import PROFILE_EPOCH

GROUP = "Group"  # the run attribute W&B groups by: wandb_logging.run_group's configuration
FIGURE_PREFIX = "figure/"  # sweeps.report.log_to_wandb logs each figure as figure/<name>
AGGREGATE_JOB = "aggregate"  # the job type of that summary run
# W&B's built-in line chart of a table (wandb.plot.line's): fields x, y and stroke, one line per
# value of the stroke column.
TABLE_LINE_CHART = "wandb/line/v0"


def panel(chart: Chart) -> Any:
    """The W&B panel of one chart."""
    if chart.kind == LINE:
        return wr.LinePlot(
            title=chart.title,
            x=chart.x,
            y=list(chart.y),
            metric_regex=chart.pattern,
            groupby=GROUP,
            groupby_aggfunc="mean",
            groupby_rangefunc="minmax",
        )
    if chart.kind == BAR:
        return wr.BarPlot(
            title=chart.title, metrics=list(chart.y), groupby=GROUP, groupby_aggfunc="mean"
        )
    if chart.kind == SCATTER:
        (y,) = chart.y
        return wr.ScatterPlot(
            title=chart.title, x=wr.SummaryMetric(chart.x), y=wr.SummaryMetric(y), regression=True
        )
    if chart.kind == PROFILE:
        (y,) = chart.y
        return wr.CustomChart(
            query={"summaryTable": {"tableKey": chart.table}},
            chart_name=TABLE_LINE_CHART,
            chart_fields={"x": chart.x, "y": y, "stroke": PROFILE_EPOCH},
            chart_strings={"title": chart.title},
        )
    kinds = ", ".join((LINE, BAR, SCATTER, PROFILE))
    raise ValueError(f"Unknown chart kind {chart.kind!r}; use one of {kinds}.")


def workspace(entity: str, project: str, sections: Iterable[Section], name: str) -> ws.Workspace:
    """A workspace of ``sections`` (optional ones collapsed), its runs grouped by W&B group and
    no automatic panels (one per key: hundreds for a sweep with isotropy on)."""
    return ws.Workspace(
        entity=entity,
        project=project,
        name=name,
        sections=[
            ws.Section(
                name=section.name,
                panels=[panel(chart) for chart in section.charts],
                is_open=not section.optional,
            )
            for section in sections
        ],
        runset_settings=ws.RunsetSettings(groupby=[expr.Metric(GROUP)]),
    )


def sweep_report(
    entity: str,
    project: str,
    title: str,
    texts: Sequence[tuple[str, str]],
    figures: Iterable[str],
    run_ids: Sequence[str],
    sections: Iterable[Section],
    searches: Sequence[tuple[str, str, Sequence[str]]] = (),
) -> wr.Report:
    """A report of one sweep: each of ``searches`` first, then ``texts`` (heading, Markdown), the
    aggregate's ``figures`` (names its summary run in the sweep's group ``title`` logged), and a
    panel grid per section over the sweep's runs (``run_ids``)."""
    summary_run = wr.Runset(
        entity=entity,
        project=project,
        name=f"summary run of {title}",
        filters=[expr.Metric(GROUP) == title, expr.Metric("JobType") == AGGREGATE_JOB],
    )

    def figure_grid(names: Iterable[str]) -> wr.PanelGrid:
        return wr.PanelGrid(
            runsets=[summary_run],
            panels=[
                wr.MediaBrowser(title=name, media_keys=[FIGURE_PREFIX + name]) for name in names
            ],
        )

    blocks: list[Any] = []
    for heading, markdown, names in searches:
        blocks += [wr.H2(heading), wr.MarkdownBlock(markdown), figure_grid(names)]
    for heading, markdown in texts:
        blocks += [wr.H2(heading), wr.MarkdownBlock(markdown)]
    blocks += [wr.H2("Figures"), figure_grid(figures)]
    runs = wr.Runset(
        entity=entity,
        project=project,
        name=title,
        filters=[expr.Metric("ID").isin(list(run_ids))],
        groupby=["group"],
    )
    for section in sections:
        blocks += [
            wr.H2(section.name),
            wr.PanelGrid(runsets=[runs], panels=[panel(chart) for chart in section.charts]),
        ]
    return wr.Report(entity=entity, project=project, title=title, blocks=blocks)


def view_json(view: Any) -> Any:
    """A view as JSON data: each of the library's objects as ``{"type": class, field: value}``
    (public fields that are set; filters as the library's own filter strings)."""
    if dataclasses.is_dataclass(view) and not isinstance(view, type):
        values = {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}
        fields = {
            name: view_json(value)
            for name, value in values.items()
            if not name.startswith("_") and value is not None
        }
        return {"type": type(view).__name__, **fields}
    if isinstance(view, Mapping):
        return {str(key): view_json(value) for key, value in view.items()}
    if isinstance(view, list | tuple):
        return [view_json(item) for item in view]
    if isinstance(view, str | int | float | bool) or view is None:
        return view
    return str(view)


def panels_of(view: Any) -> list[Any]:
    """Every panel of a workspace or report."""
    if isinstance(view, ws.Workspace):
        return [p for section in view.sections for p in section.panels]
    return [p for block in view.blocks if isinstance(block, wr.PanelGrid) for p in block.panels]


def write_json(view: Any, path: Path) -> Path:
    """``view`` as JSON into ``path``."""
    return write_text(path, json.dumps(view_json(view), indent=1) + "\n")
