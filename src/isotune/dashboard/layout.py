"""The dashboard's one definition: sections of charts, each naming the keys it draws and the key
it draws them against, all built from :mod:`isotune.tracking.metric_keys`.

The W&B workspace and report (:mod:`isotune.dashboard.views`) and the TensorBoard custom-scalars
layout (:mod:`isotune.dashboard.tensorboard`) are made from these sections, so the three show
the same charts. Plain data: nothing here imports W&B, TensorBoard or Lightning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from isotune.tracking.metric_keys import (
    DASHBOARD_MEASURES,
    DASHBOARD_PROFILE_MEASURES,
    EPOCH,
    ISO_EPOCH,
    LOSS,
    LOSS_REG,
    LOSS_TASK,
    PER_STEP,
    POST_NORM,
    PRE_NORM,
    PROFILE_LAYER,
    REG_PREFIX,
    STEP,
    best_key,
    iso_key,
    logged_per_step,
    params_key,
    profile_table_key,
    train_key,
    val_key,
)

LINE, BAR, SCATTER, PROFILE = "line", "bar", "scatter", "profile"
PRIMARY_PREFIX = "val"  # TaskSpec.log_prefix of a task's primary dev split
SCATTER_MEASURES = ("log_iw", "isoscore")  # best-epoch isotropy of the classifier input
ADAPTATION_COUNTS = ("trainable", "trainable_fraction")  # of metric_keys.PARAMETER_COUNTS


@dataclass(frozen=True)
class Chart:
    """One chart: ``y`` (keys, or ``pattern``, a regular expression of keys named at run time)
    against ``x``. ``line``: over a run's rows; ``bar``: each run's (or group's) summary value of
    ``y``; ``scatter``: one point per run, summary ``x`` against summary ``y``; ``profile``: the
    columns ``y`` against the column ``x`` of the run summary's ``table``, one line per epoch
    (a layer profile, :func:`~isotune.tracking.metric_keys.profile_table_key`)."""

    title: str
    x: str
    y: tuple[str, ...] = ()
    pattern: str | None = None
    kind: str = LINE
    table: str | None = None

    def keys(self, logged: Iterable[str]) -> set[str]:
        """The keys of ``logged`` this chart draws (``y``'s, those ``pattern`` matches, or its
        ``table``)."""
        if self.table is not None:
            return {self.table} & set(logged)
        if self.pattern is None:
            return set(self.y) & set(logged)
        return {key for key in logged if re.fullmatch(self.pattern, key)}


@dataclass(frozen=True)
class Section:
    """A titled group of charts; ``optional``: shown collapsed while it is not known whether the
    runs use it (the interventions and adaptation of a project that may have only baselines)."""

    name: str
    charts: tuple[Chart, ...]
    optional: bool = False


def dashboard_sections(primary_metrics: Mapping[str, str]) -> list[Section]:
    """Every section, for tasks named with their primary dev metric (``{"rte": "accuracy"}``):
    one score chart per primary metric, its tasks in the title."""
    tasks_of: dict[str, list[str]] = {}
    for task, metric in primary_metrics.items():
        tasks_of.setdefault(metric, []).append(task)
    scores = [
        Chart(f"dev {metric} ({', '.join(tasks)})", EPOCH, (val_key(PRIMARY_PREFIX, metric),))
        for metric, tasks in tasks_of.items()
    ]
    scores.append(Chart("dev loss", EPOCH, (val_key(PRIMARY_PREFIX, LOSS),)))
    scatter = [
        Chart(
            f"best-epoch {measure} against dev {metric}",
            best_key(iso_key(POST_NORM, measure)),
            (best_key(metric),),
            kind=SCATTER,
        )
        for metric in tasks_of
        for measure in SCATTER_MEASURES
    ]
    step = re.escape(PER_STEP)
    return [
        Section("Scores", tuple(scores)),
        _isotropy_section("Isotropy of the classifier input", POST_NORM),
        _isotropy_section("Isotropy of the pre-norm vector", PRE_NORM),
        Section("Isotropy against score", tuple(scatter)),
        Section(
            "Layer profiles",
            tuple(
                Chart(
                    f"{level}: {measure} by layer",
                    PROFILE_LAYER,
                    (measure,),
                    kind=PROFILE,
                    table=profile_table_key(level),
                )
                for level, measures in DASHBOARD_PROFILE_MEASURES.items()
                for measure in measures
            ),
            optional=True,
        ),
        Section(
            "Interventions",
            (
                Chart("task loss", STEP, (logged_per_step(train_key(LOSS_TASK)),)),
                Chart("weighted penalty", STEP, (logged_per_step(train_key(LOSS_REG)),)),
                Chart(
                    "measure the penalty acts on",
                    STEP,
                    pattern=re.escape(train_key(REG_PREFIX)) + r"\w+" + step,
                ),
            ),
            optional=True,
        ),
        Section(
            "Adaptation",
            tuple(
                Chart(params_key(count), STEP, (params_key(count),), kind=BAR)
                for count in ADAPTATION_COUNTS
            ),
            optional=True,
        ),
    ]


def _isotropy_section(title: str, view: str) -> Section:
    return Section(
        f"{title} ({view})",
        tuple(
            Chart(measure, ISO_EPOCH, (iso_key(view, measure),)) for measure in DASHBOARD_MEASURES
        ),
    )


def used_sections(sections: Iterable[Section], logged: Iterable[str]) -> list[Section]:
    """The sections whose charts draw a key of ``logged``, each with only those charts."""
    logged = set(logged)
    kept = []
    for section in sections:
        charts = tuple(chart for chart in section.charts if chart.keys(logged))
        if charts:
            kept.append(Section(section.name, charts, section.optional))
    return kept
