"""The figures of a sweep report, and the functions that prepare their numbers.

Per task: ``scores_<task>.png``, ``isotropy_epochs_<task>.png`` and
``isotropy_vs_score_<task>.png`` (a run that failed to learn is a hollow dot). The ``*_data``
functions compute from the same frames as the tables, so a figure never shows a number the
tables do not; the drawing functions only draw.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from isotune.atomic_files import save_figure
from isotune.sweeps.correlation import spearman
from isotune.sweeps.tables import GLUE_TASKS, measure_key, measure_label, ordered

FIGURES = {
    "scores": "Dev score of every seed per configuration, median marked",
    "isotropy_epochs": "Isotropy of the classifier input over the epochs (median, min-max band)",
    "isotropy_vs_score": "Best-epoch isotropy of the classifier input against the dev score",
}
POOLED = "pooled"  # the correlation over every configuration's runs together
FAILED_LABEL = "hollow: failed to learn"
DPI = 80


def scores_data(scores: pd.DataFrame) -> pd.DataFrame:
    """Every run's score with its configuration's median on the task (the results table's)."""
    points = scores[["configuration", "task", "metric", "seed", "score", "learned"]].copy()
    points["median"] = points.groupby(["configuration", "task"])["score"].transform("median")
    return points


def isotropy_epochs_data(epochs: pd.DataFrame) -> pd.DataFrame:
    """Median, min and max over seeds per task, measure, configuration and epoch."""
    return (
        epochs.groupby(["task", "measure", "configuration", "epoch"], sort=False)["value"]
        .agg(median="median", low="min", high="max", n="count")
        .reset_index()
    )


def isotropy_vs_score_data(
    scores: pd.DataFrame, isotropy: pd.DataFrame, measures: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each run's best-epoch value of each measure (x) and its score (y), and Spearman's rho per
    task and measure: over all runs (``pooled``) and within each configuration."""
    keys = {measure_key(m): m for m in measures}
    values = isotropy.loc[
        isotropy["measure"].isin(keys), ["configuration", "task", "seed", "measure", "finetuned"]
    ]
    values = values.assign(measure=values["measure"].map(keys)).rename(
        columns={"finetuned": "isotropy"}
    )
    points = scores[["configuration", "task", "seed", "score", "learned"]].merge(
        values.dropna(subset=["isotropy"]), on=["configuration", "task", "seed"], sort=False
    )
    order = {"task": ordered(scores["task"], GLUE_TASKS), "measure": list(measures)}
    points = points.sort_values(
        ["task", "measure"], key=lambda c: c.map(order[c.name].index), ignore_index=True
    )
    rows = []
    for (task, measure), group in points.groupby(["task", "measure"], sort=False):
        subsets = [(POOLED, group), *group.groupby("configuration", sort=False)]
        for name, subset in subsets:
            rho, p, n, note = spearman(subset["isotropy"].tolist(), subset["score"].tolist())
            rows.append([task, measure, name, n, rho, p, note])
    columns = ["task", "measure", "configuration", "n", "rho", "p", "note"]
    return points, pd.DataFrame(rows, columns=columns, dtype=object)  # None stays None


def draw_figures(
    scores: pd.DataFrame,
    curves: pd.DataFrame,
    points: pd.DataFrame,
    correlations: pd.DataFrame,
    names: Sequence[str],
    output_dir: Path,
) -> dict[str, Path]:
    """Every figure as ``<output_dir>/<kind>_<task>.png``; ``scores`` as the tables have them,
    the other frames from the ``*_data`` functions, ``names``: configurations in order."""
    colours = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(names)}
    figures = {}
    points_of = dict(list(scores_data(scores).groupby("task")))
    for task in ordered(points_of, GLUE_TASKS):
        task_scores = points_of[task]
        metric = task_scores["metric"].iloc[0]
        figures[f"scores_{task}"] = scores_figure(task_scores, task, metric)
        if (curves["task"] == task).any():
            figures[f"isotropy_epochs_{task}"] = isotropy_epochs_figure(
                curves[curves["task"] == task], task, colours
            )
        if (points["task"] == task).any():
            figures[f"isotropy_vs_score_{task}"] = isotropy_vs_score_figure(
                points[points["task"] == task],
                correlations[correlations["task"] == task],
                task,
                metric,
                colours,
            )
    paths = {}
    for name, figure in figures.items():
        paths[name] = Path(output_dir) / f"{name}.png"
        save_figure(figure, paths[name], dpi=DPI, bbox_inches="tight")  # legends under panels
        plt.close(figure)
    return paths


def scores_figure(points: pd.DataFrame, task: str, metric: str) -> plt.Figure:
    """Dots: one seed's best-epoch dev score each; bar: the configuration's median."""
    names = list(dict.fromkeys(points["configuration"]))
    figure, axis = plt.subplots(figsize=(max(4.0, 1.3 * len(names) + 2), 4.2), layout="constrained")
    for x, name in enumerate(names):
        runs = points[points["configuration"] == name]
        spread = [0.0] if len(runs) == 1 else [i / (len(runs) - 1) - 0.5 for i in range(len(runs))]
        _scatter(axis, [x + 0.3 * s for s in spread], runs["score"], runs["learned"], "tab:blue")
        axis.hlines(runs["median"].iloc[0], x - 0.3, x + 0.3, color="black", linewidth=2)
    axis.set_xticks(range(len(names)), names, rotation=20, ha="right")
    axis.set(
        title=f"{task}: dev {metric} of every seed (bar: median)",
        xlabel="configuration",
        ylabel=f"dev {metric} at the best epoch (%)",
        xlim=(-0.6, len(names) - 0.4),
    )
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize="small")
    return figure


def _scatter(axis, x, y, learned: pd.Series, colour, label: str | None = None) -> None:
    """Runs as dots of ``colour``: filled, or hollow for those that failed to learn (labelled
    once per axis, so the legend names the marker)."""
    failed = learned.map(lambda verdict: verdict is False).to_numpy()
    x, y = pd.Series(list(x)).to_numpy(), pd.Series(list(y)).to_numpy()
    axis.scatter(x[~failed], y[~failed], color=colour, alpha=0.8, s=25, label=label)
    if failed.any():
        labels = axis.get_legend_handles_labels()[1]
        axis.scatter(
            x[failed],
            y[failed],
            facecolors="none",
            edgecolors=colour,
            s=25,
            label=None if FAILED_LABEL in labels else FAILED_LABEL,
        )


def isotropy_epochs_figure(
    curves: pd.DataFrame, task: str, colours: Mapping[str, tuple]
) -> plt.Figure:
    """One panel per measure: a line per configuration (median over seeds), band min to max."""
    measures = list(dict.fromkeys(curves["measure"]))
    figure, axes = plt.subplots(
        1, len(measures), figsize=(4.2 * len(measures), 4.2), layout="constrained", squeeze=False
    )
    for axis, measure in zip(axes[0], measures, strict=True):
        for name, line in curves[curves["measure"] == measure].groupby("configuration", sort=False):
            colour = colours[name]
            axis.plot(line["epoch"], line["median"], marker="o", color=colour, label=name)
            axis.fill_between(line["epoch"], line["low"], line["high"], color=colour, alpha=0.2)
        axis.set(xlabel="epoch (0 = pre-trained)", ylabel=measure_label(measure))
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=min(3, len(labels)))
    figure.suptitle(f"{task}: isotropy of the classifier input (median over seeds, band min-max)")
    return figure


def isotropy_vs_score_figure(
    points: pd.DataFrame,
    correlations: pd.DataFrame,
    task: str,
    metric: str,
    colours: Mapping[str, tuple],
) -> plt.Figure:
    """One panel per measure: a dot per run, coloured by configuration; rho in title and legend.
    The legend sits under each panel, its labels wrapped to the panel's width, and the figure
    grows by its lines: a study's dozen long configuration names otherwise squeezed the panels
    to nothing and the legends out of the picture (matplotlib's "axes sizes collapsed to
    zero")."""
    measures = list(dict.fromkeys(points["measure"]))
    rhos = {(r.measure, r.configuration): r for r in correlations.itertuples(index=False)}
    labels = {
        (measure, name): textwrap.fill(f"{name}: {_rho_text(rhos[measure, name])}", LEGEND_WIDTH)
        for measure, name in points[["measure", "configuration"]]
        .drop_duplicates()
        .itertuples(index=False)
    }
    lines = max(
        sum(label.count("\n") + 1 for (m, _), label in labels.items() if m == measure)
        for measure in measures
    )
    figure, axes = plt.subplots(
        1,
        len(measures),
        figsize=(4.6 * len(measures), 4.6 + LEGEND_LINE_INCHES * lines),
        layout="constrained",
        squeeze=False,
    )
    for axis, measure in zip(axes[0], measures, strict=True):
        for name, runs in points[points["measure"] == measure].groupby("configuration", sort=False):
            label = labels[measure, name]
            _scatter(axis, runs["isotropy"], runs["score"], runs["learned"], colours[name], label)
        axis.set(
            title=f"pooled {_rho_text(rhos[measure, POOLED])}",
            xlabel=f"{measure_label(measure)}\nat the best epoch",
            ylabel=f"dev {metric} at the best epoch (%)",
        )
        axis.xaxis.set_major_locator(MaxNLocator(5))
        axis.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.25))
    figure.suptitle(f"{task}: isotropy of the classifier input against the score, one dot per run")
    return figure


LEGEND_LINE_INCHES = 0.26  # the height of one legend line at fontsize "small"
LEGEND_WIDTH = 55  # characters of a legend line under a 4.6-inch panel at fontsize "small"


def _rho_text(row) -> str:
    """``ρ = 0.90 (p = 0.083, n = 5)``, or why there is no rho."""
    if row.rho is None or pd.isna(row.rho):
        return f"ρ n/a (n = {row.n})"
    return f"ρ = {row.rho:.2f} (p = {row.p:.2g}, n = {row.n})"
