"""The tables of a sweep: scores over seeds, isotropy before and after, and the paired statistics.

Per configuration (:mod:`isotune.sweeps.comparisons`) x task: the median and std over seeds of the
best-epoch dev primary metric (small GLUE tasks are seed-sensitive), the change against the
baseline, and the isotropy before and after fine-tuning, as frames and Markdown, in the
configurations' order (each axis by its registry) and GLUE's task order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from isotune.errors import IsotuneError
from isotune.sweeps.comparisons import AXES, Configuration, Configurations
from isotune.sweeps.failures import failure_counts, learned_of, not_failed
from isotune.sweeps.intention_to_treat import trivial_of
from isotune.sweeps.runs import Run
from isotune.sweeps.seeds import SeedAxis
from isotune.tracking.metric_keys import POST_NORM, PRE_NORM, iso_key
from isotune.tracking.reporting import counted, markdown_table

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
AVERAGE = "avg"
# The classifier input's measures the report, its compact table and its figures show by default.
KEY_MEASURES = ("log_iw", "isoscore", "avg_cosine", "n_dominant")
MEASURE_LABELS = {  # with the value an isotropic cloud has (docs/isotropy.md)
    "log_iw": "log I(W) (natural log, ≤ 0; isotropic: 0)",
    "iw": "I(W) (0 to 1; isotropic: 1)",
    "isoscore": "IsoScore (0 to 1; isotropic: 1)",
    "avg_cosine": "average cosine (−1 to 1; isotropic: 0)",
    "n_dominant": "dominant directions (count; isotropic: 0)",
    "effective_rank": "effective rank (dimensions)",
}
SUMMARY_COLUMNS = ["task", "metric", "median", "std", "n", "baseline", "delta_vs_baseline"]
# The same over the runs that learned (isotune.sweeps.failures), and the failed runs' count.
LEARNED_COLUMNS = ["median_learned", "std_learned", "n_learned", "delta_learned", "failed"]


def configuration_columns() -> list[str]:
    """The columns that say which configuration a row is: each axis, the other overrides, and
    the configuration's name in the tables."""
    return [*AXES, "overrides", "configuration"]


def measure_key(measure: str, view: str = POST_NORM) -> str:
    """The results.json key of a measure of a view: ``iso/post_norm/log_iw``."""
    return iso_key(view, measure)


def measure_label(measure: str) -> str:
    return MEASURE_LABELS.get(measure, measure)


def _identity(run: Run, configurations: Configurations) -> list[Any]:
    """The configuration columns of a run (as :func:`configuration_columns`)."""
    config = Configuration.of(run)
    return [*dict(config.axes).values(), " ".join(config.overrides), configurations.name(config)]


def scores_frame(
    runs: Sequence[Run], configurations: Configurations, seeds: SeedAxis
) -> pd.DataFrame:
    """One row per completed run: its pairing seed (``seeds``), its best-epoch dev primary
    metric in percent, and whether it learned (True, False, None: unknown)."""
    rows = []
    for run in runs:
        metric = run.field("primary_metric")
        best = run.field("best")
        if metric not in best:
            raise IsotuneError(
                f"{run.path}: primary metric {metric!r} is not among its best-epoch metrics "
                f"{sorted(best)}; rerun that job."
            )
        identity = [*_identity(run, configurations), run.field("task"), seeds.key(run)]
        rows.append([*identity, metric, 100.0 * best[metric], learned_of(run)])
    columns = [*configuration_columns(), "task", "seed", "metric", "score", "learned"]
    frame = pd.DataFrame(rows, columns=columns).astype({"learned": object})
    return _sorted(frame, configurations, extra=["seed"])


def without_score_frame(
    runs: Sequence[Run], configurations: Configurations, seeds: SeedAxis
) -> pd.DataFrame:
    """One row per run that ended without a score, with its dev set's trivial score in percent:
    what the intention-to-treat line counts it at."""
    rows = [
        [
            configurations.name(Configuration.of(run)),
            run.field("task"),
            seeds.key(run),
            run.status,
            100.0 * trivial,
        ]
        for run in runs
        if (trivial := trivial_of(run)) is not None
    ]
    return pd.DataFrame(rows, columns=["configuration", "task", "seed", "status", "trivial"])


def summarize_scores(scores: pd.DataFrame, configurations: Configurations) -> pd.DataFrame:
    """Median, sample std and count over seeds per configuration x task, the ``avg`` task (mean of
    the per-task medians, for rows with every task), and each median's difference to its
    baseline's; the same over the runs that learned (NaN and n 0 where every run failed)."""
    if scores.empty:
        return pd.DataFrame(columns=[*configuration_columns(), *SUMMARY_COLUMNS, *LEARNED_COLUMNS])
    summary = _medians(scores, configurations)
    renamed = dict(
        zip(["median", "std", "n", "delta_vs_baseline"], LEARNED_COLUMNS[:-1], strict=True)
    )
    learned = _medians(not_failed(scores), configurations).rename(columns=renamed)
    keys = ["configuration", "task"]
    summary = summary.merge(learned[[*keys, *LEARNED_COLUMNS[:-1]]], on=keys, how="left")
    summary = summary.merge(failure_counts(scores)[[*keys, "failed"]], on=keys, how="left")
    summary["n_learned"] = summary["n_learned"].fillna(0).astype("Int64")
    summary["failed"] = summary["failed"].astype("Int64")
    return summary


def _medians(scores: pd.DataFrame, configurations: Configurations) -> pd.DataFrame:
    """:func:`summarize_scores` of one set of runs, without the failed runs' columns."""
    if scores.empty:
        return pd.DataFrame(columns=[*configuration_columns(), *SUMMARY_COLUMNS])
    metrics = scores.groupby("task")["metric"].unique()
    mixed = {task: list(names) for task, names in metrics.items() if len(names) > 1}
    if mixed:
        raise IsotuneError(
            f"Runs of one task were scored by different primary metrics {mixed}; aggregate the "
            "directories of each setting separately."
        )
    summary = (
        scores.groupby([*configuration_columns(), "task", "metric"], sort=False)["score"]
        .agg(median="median", std="std", n="count")
        .reset_index()
    )
    summary["n"] = summary["n"].astype("Int64")
    tasks = ordered(summary["task"], GLUE_TASKS)
    if len(tasks) > 1:
        complete = summary.groupby("configuration").filter(lambda g: len(g) == len(tasks))
        averages = complete.groupby(configuration_columns(), sort=False)["median"].mean()
        averages = averages.reset_index().assign(task=AVERAGE, metric="mean of medians")
        summary = pd.concat([summary, averages], ignore_index=True)

    pairs = list(configurations.baseline_names.items())
    summary = summary.merge(
        pd.DataFrame(pairs, columns=["configuration", "baseline"]), on="configuration", how="left"
    )
    reference = summary[["configuration", "task", "median"]].set_axis(
        ["baseline", "task", "baseline_median"], axis=1
    )
    summary = summary.merge(reference, on=["baseline", "task"], how="left")
    summary["delta_vs_baseline"] = summary["median"] - summary.pop("baseline_median")
    return _sorted(summary, configurations, tasks=[*tasks, AVERAGE])


def isotropy_frame(
    runs: Sequence[Run], configurations: Configurations, seeds: SeedAxis
) -> pd.DataFrame:
    """One row per completed run and isotropy measure: pretrained and best-epoch values."""
    rows = []
    for run in runs:
        isotropy = run.result.get("isotropy") or {}
        pretrained, finetuned = isotropy.get("pretrained") or {}, isotropy.get("best") or {}
        identity = [*_identity(run, configurations), run.field("task"), seeds.key(run)]
        for measure in sorted(set(pretrained) | set(finetuned)):
            rows.append([*identity, measure, pretrained.get(measure), finetuned.get(measure)])
    columns = [*configuration_columns(), "task", "seed", "measure", "pretrained", "finetuned"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({"pretrained": float, "finetuned": float})


def isotropy_epochs_frame(
    runs: Sequence[Run], configurations: Configurations, measures: Sequence[str], seeds: SeedAxis
) -> pd.DataFrame:
    """One row per completed run, epoch (0: pre-trained) and measure of the classifier input."""
    rows = []
    for run in runs:
        per_epoch = (run.result.get("isotropy") or {}).get("per_epoch") or {}
        name = configurations.name(Configuration.of(run))
        identity = [name, run.field("task"), seeds.key(run)]
        for epoch, values in per_epoch.items():
            for measure in measures:
                value = values.get(measure_key(measure))
                if value is not None and math.isfinite(value):
                    rows.append([*identity, int(epoch), measure, float(value)])
    columns = ["configuration", "task", "seed", "epoch", "measure", "value"]
    return _sorted(pd.DataFrame(rows, columns=columns), configurations, extra=["seed", "epoch"])


def summarize_isotropy(frame: pd.DataFrame, configurations: Configurations) -> pd.DataFrame:
    """Median over seeds of each measure, before and after fine-tuning."""
    summary = (
        frame.groupby([*configuration_columns(), "task", "measure"], sort=False)
        .agg(
            pretrained=("pretrained", "median"),
            finetuned=("finetuned", "median"),
            n=("seed", "size"),
        )
        .reset_index()
    )
    return _sorted(summary, configurations, extra=["measure"])


def ordered(values: Iterable[str], preferred: Iterable[str]) -> list[str]:
    """The distinct values, those in ``preferred`` first in its order, the rest alphabetically."""
    present, preferred = set(values), list(preferred)
    return [v for v in preferred if v in present] + sorted(present - set(preferred))


def _sorted(
    frame: pd.DataFrame,
    configurations: Configurations,
    tasks: Sequence[str] | None = None,
    extra: Sequence[str] = (),
) -> pd.DataFrame:
    """Rows by configuration (their order), task (``tasks``, default GLUE's order), ``extra``."""
    positions = {
        "configuration": configurations.names,
        "task": list(tasks) if tasks is not None else ordered(frame["task"], GLUE_TASKS),
    }
    return frame.sort_values(
        ["configuration", "task", *extra],
        key=lambda column: (
            column.map(positions[column.name].index) if column.name in positions else column
        ),
        ignore_index=True,
    )


def results_markdown(summary: pd.DataFrame, configurations: Configurations) -> str:
    """The paper-style table (median ± std (n) per task) and the Δ-to-baseline table, over all
    runs and, where a run failed to learn, over the runs that learned."""
    tasks = ordered(set(summary["task"]) - {AVERAGE}, GLUE_TASKS)
    columns = [*tasks, AVERAGE] if AVERAGE in set(summary["task"]) else tasks
    rows = list(dict.fromkeys(summary["configuration"]))
    cells = {(r.configuration, r.task): r for r in summary.itertuples(index=False)}

    def table(format_cell, names) -> str:
        body = [
            [name, *(format_cell(cells.get((name, task)), cells) for task in columns)]
            for name in names
        ]
        return markdown_table(["configuration", *columns], body)

    metric_of = dict(zip(summary["task"], summary["metric"], strict=True))
    failed = int(summary.loc[summary["task"] != AVERAGE, "failed"].sum())
    notes = [
        "Dev primary metric at the best epoch, in %: median ± sample std over seeds (n seeds; "
        "how many failed to learn: not above the trivial predictor by the margin).",
        "Metrics: " + ", ".join(f"{task} = {metric_of[task]}" for task in tasks) + ".",
    ]
    if AVERAGE in columns:
        notes.append(
            f"{AVERAGE}: mean of the per-task medians, only for rows with all {len(tasks)} tasks."
        )
        notes.append(averaged_metrics(f"{AVERAGE} column", {t: metric_of[t] for t in tasks}))
    sections = ["## Results", table(_score_cell, rows), "\n".join(filter(None, notes))]
    if failed:
        sections += [
            "## Results over the runs that learned",
            table(_learned_cell, rows),
            f"{counted(failed, 'run')} failed to learn, left out here (runs without a verdict, "
            "older than the check, are kept).",
        ]
    baselines = dict(zip(summary["configuration"], summary["baseline"], strict=True))
    compared = [name for name in rows if pd.notna(baselines[name])]
    if compared:
        sections += [
            "## Δ median vs the baseline (percentage points)",
            table(_delta_cell, compared),
            "Baselines: " + "; ".join(f"{name} vs {baselines[name]}" for name in compared) + ".",
        ]
        if failed:
            sections += [
                "## Δ median vs the baseline, over the runs that learned",
                table(_learned_delta_cell, compared),
            ]
    return "\n\n".join(sections) + "\n"


def task_metrics(summary: pd.DataFrame) -> dict[str, str]:
    """Each task's primary metric in a summary (:func:`summarize_scores`), in table order."""
    rows = summary.loc[summary["task"] != AVERAGE]
    metrics = dict(zip(rows["task"], rows["metric"], strict=True))
    return {task: metrics[task] for task in ordered(metrics, GLUE_TASKS)}


def averaged_metrics(average: str, metrics: Mapping[str, str]) -> str:
    """The sentence beside an ``average`` over tasks scored by different ``metrics`` (task ->
    metric): it adds an accuracy difference to an F1 one, as GLUE's own score averages its tasks'
    metrics, and says so; "" where every task has one metric."""
    if len(set(metrics.values())) < 2:
        return ""
    parts = [f"{metric} on {task}" for task, metric in metrics.items()]
    return (
        f"The {average} averages {', '.join(parts[:-1])} with {parts[-1]}, as GLUE's score "
        "averages its tasks' metrics."
    )


def _score_cell(row: Any, cells: dict) -> str:
    if row is None:
        return "–"
    if row.task == AVERAGE:
        return f"{row.median:.2f}"
    spread = f" ± {row.std:.2f}" if row.n > 1 else ""
    failed = f", {row.failed} failed" if row.failed else ""
    return f"{row.median:.2f}{spread} (n={row.n}{failed})"


def _learned_cell(row: Any, cells: dict) -> str:
    if row is None:
        return "–"
    if row.task == AVERAGE:
        return "–" if pd.isna(row.median_learned) else f"{row.median_learned:.2f}"
    if row.n_learned == 0:
        return f"all {row.n} failed"
    spread = f" ± {row.std_learned:.2f}" if row.n_learned > 1 else ""
    return f"{row.median_learned:.2f}{spread} (n={row.n_learned})"


def _delta_cell(row: Any, cells: dict) -> str:
    return "–" if row is None or pd.isna(row.delta_vs_baseline) else f"{row.delta_vs_baseline:+.2f}"


def _learned_delta_cell(row: Any, cells: dict) -> str:
    """The Δ over the runs that learned, or which side's runs all failed."""
    if row is None:
        return "–"
    baseline = cells.get((row.baseline, row.task))
    if row.task != AVERAGE and row.n_learned == 0:
        return "all failed"
    if row.task != AVERAGE and baseline is not None and baseline.n_learned == 0:
        return "baseline all failed"
    return "–" if pd.isna(row.delta_learned) else f"{row.delta_learned:+.2f}"


def isotropy_markdown(summary: pd.DataFrame) -> str:
    """Every measure of every view, pre-trained vs fine-tuned."""
    if summary.empty:
        return "## Isotropy\n\nNo isotropy measures in these runs.\n"
    body = [
        [
            r.configuration,
            r.task,
            r.measure,
            number_cell(r.pretrained),
            number_cell(r.finetuned),
            r.n,
        ]
        for r in summary.itertuples(index=False)
    ]
    header = ["configuration", "task", "measure", "pretrained", "fine-tuned (best)", "n"]
    note = "Median over seeds; fine-tuned = at the best epoch."
    return f"## Isotropy\n\n{markdown_table(header, body)}\n\n{note}\n"


def compact_isotropy_markdown(summary: pd.DataFrame, measures: Sequence[str]) -> str:
    """A few measures of the classifier input, one column each: ``pre-trained → fine-tuned``."""
    keys = [measure_key(m) for m in measures]
    shown = summary[summary["measure"].isin(keys)]
    if shown.empty:
        return f"No {', '.join(measures)} of the classifier input ({POST_NORM}) in these runs."
    body = []
    for (name, task), group in shown.groupby(["configuration", "task"], sort=False):
        by_measure = {r.measure: r for r in group.itertuples(index=False)}
        body.append([name, task, *(_change(by_measure.get(k)) for k in keys), group["n"].max()])
    return markdown_table(["configuration", "task", *map(measure_label, measures), "n"], body)


def outliers_markdown(summary: pd.DataFrame) -> str:
    """Per configuration and task, for each sentence view: the median number of outlier
    dimensions, pre-trained → best epoch, and the median number of the pre-trained ones still
    outliers at the best epoch (``outliers_kept``)."""
    views = (PRE_NORM, POST_NORM)
    keys = {measure_key(m, v) for v in views for m in ("n_outliers", "outliers_kept")}
    shown = summary[summary["measure"].isin(keys)]
    if shown.empty:
        return "No outlier dimensions in these runs (measured by the isotropy callback)."
    body = []
    for (name, task), group in shown.groupby(["configuration", "task"], sort=False):
        by_measure = {r.measure: r for r in group.itertuples(index=False)}
        cells = []
        for view in views:
            kept = by_measure.get(measure_key("outliers_kept", view))
            cells += [
                _change(by_measure.get(measure_key("n_outliers", view))),
                "–" if kept is None else number_cell(kept.finetuned),
            ]
        body.append([name, task, *cells, group["n"].max()])
    header = ["configuration", "task"]
    for view in views:
        header += [f"{view} outliers", f"{view} kept"]
    return markdown_table([*header, "n"], body)


def _change(row: Any) -> str:
    return "–" if row is None else f"{number_cell(row.pretrained)} → {number_cell(row.finetuned)}"


def number_cell(value: float | None) -> str:
    """Four significant digits; n/a for a missing or undefined value."""
    return "n/a" if value is None or pd.isna(value) else f"{value:.4g}"
