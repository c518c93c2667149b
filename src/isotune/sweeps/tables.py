"""The papers' tables from completed runs: scores over seeds, and isotropy before and after.

Per model x norm x GLUE task: the median and std over seeds of the best-epoch dev primary metric
(as the IsoBN paper does: small GLUE tasks are seed-sensitive), the change against ``norm=none``,
and the isotropy of the embeddings before and after fine-tuning, as data frames and as Markdown.
Rows follow each axis's registry (:data:`AXIS_ORDER`) and GLUE's task order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from isotune.errors import IsotuneError
from isotune.norms import NORMS
from isotune.reporting import markdown_table
from isotune.sweeps.runs import RUN_KEY, Run

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
# The display order of a configuration axis is the order of its registry's keys; a value not in it
# (say, a norm of an older version) comes after them. A new axis adds its registry here.
AXIS_ORDER: dict[str, Iterable[str]] = {"norm": NORMS}
BASELINE_NORM = "none"
AVERAGE = "avg"

SUMMARY_COLUMNS = [*RUN_KEY[:3], "metric", "median", "std", "n", "delta_vs_none"]


def scores_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per completed run: its best-epoch dev primary metric, in percent."""
    rows = []
    for run in runs:
        metric = run.field("primary_metric")
        best = run.field("best")
        if metric not in best:
            raise IsotuneError(
                f"{run.path}: primary metric {metric!r} is not among its best-epoch metrics "
                f"{sorted(best)}; rerun that job."
            )
        model, norm, task, seed = run.key()
        rows.append((model, norm, task, seed, metric, 100.0 * best[metric]))
    return pd.DataFrame(rows, columns=[*RUN_KEY, "metric", "score"])


def summarize_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """Median, sample std and count over seeds per model x norm x task; the ``avg`` task (mean of
    a row's per-task medians, for rows that have every task, when there are several); and the
    difference of each median to the same model's ``norm=none`` median."""
    metrics = scores.groupby("task")["metric"].unique()
    mixed = {task: list(names) for task, names in metrics.items() if len(names) > 1}
    if mixed:
        raise IsotuneError(
            f"Runs of one task were scored by different primary metrics {mixed}; aggregate the "
            "directories of each setting separately."
        )
    summary = (
        scores.groupby(["model", "norm", "task", "metric"])["score"]
        .agg(median="median", std="std", n="count")
        .reset_index()
    )
    summary["n"] = summary["n"].astype("Int64")
    tasks = ordered(summary["task"], GLUE_TASKS)
    if len(tasks) > 1:
        complete_rows = summary.groupby(["model", "norm"]).filter(lambda g: len(g) == len(tasks))
        averages = complete_rows.groupby(["model", "norm"])["median"].mean().reset_index()
        averages[["task", "metric"]] = AVERAGE, "mean of medians"
        summary = pd.concat([summary, averages], ignore_index=True)

    baseline = summary.loc[summary["norm"] == BASELINE_NORM, ["model", "task", "median"]]
    summary = summary.merge(
        baseline.rename(columns={"median": "baseline"}), on=["model", "task"], how="left"
    )
    summary["delta_vs_none"] = summary["median"] - summary.pop("baseline")
    return _sorted(summary, [*tasks, AVERAGE])


def isotropy_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per completed run and isotropy measure: pretrained and best-epoch values."""
    rows = []
    for run in runs:
        isotropy = run.result.get("isotropy") or {}
        pretrained, finetuned = isotropy.get("pretrained") or {}, isotropy.get("best") or {}
        for measure in sorted(set(pretrained) | set(finetuned)):
            rows.append((*run.key(), measure, pretrained.get(measure), finetuned.get(measure)))
    return pd.DataFrame(
        rows, columns=[*RUN_KEY, "measure", "pretrained", "finetuned"], dtype=object
    )


def summarize_isotropy(frame: pd.DataFrame) -> pd.DataFrame:
    """Median over seeds of each measure, before and after fine-tuning."""
    frame = frame.astype({"pretrained": float, "finetuned": float})
    summary = (
        frame.groupby(["model", "norm", "task", "measure"])
        .agg(
            pretrained=("pretrained", "median"),
            finetuned=("finetuned", "median"),
            n=("seed", "size"),
        )
        .reset_index()
    )
    return _sorted(summary, ordered(summary["task"], GLUE_TASKS), extra=["measure"])


def ordered(values: Iterable[str], preferred: Iterable[str]) -> list[str]:
    """The distinct values, those in ``preferred`` first in its order, the rest alphabetically."""
    present, preferred = set(values), list(preferred)
    return [v for v in preferred if v in present] + sorted(present - set(preferred))


def _sorted(frame: pd.DataFrame, tasks: Sequence[str], extra: Sequence[str] = ()) -> pd.DataFrame:
    """Rows by model (alphabetically), norm (:data:`AXIS_ORDER`), ``tasks`` order, ``extra``."""
    positions = {axis: ordered(frame[axis], AXIS_ORDER.get(axis, ())) for axis in ("model", "norm")}
    positions["task"] = list(tasks)
    return frame.sort_values(
        ["model", "norm", "task", *extra],
        key=lambda column: (
            column.map(positions[column.name].index) if column.name in positions else column
        ),
        ignore_index=True,
    )


def results_markdown(summary: pd.DataFrame) -> str:
    """The paper-style table (median ± std (n) per task) and the Δ-to-``norm=none`` table."""
    tasks = ordered(set(summary["task"]) - {AVERAGE}, GLUE_TASKS)
    columns = [*tasks, AVERAGE] if AVERAGE in set(summary["task"]) else tasks
    rows = list(dict.fromkeys(zip(summary["model"], summary["norm"], strict=True)))
    cells = {(r.model, r.norm, r.task): r for r in summary.itertuples(index=False)}

    def table(format_cell, row_keys) -> str:
        body = [
            [model, norm, *(format_cell(cells.get((model, norm, task))) for task in columns)]
            for model, norm in row_keys
        ]
        return markdown_table(["model", "norm", *columns], body)

    metric_of = dict(zip(summary["task"], summary["metric"], strict=True))
    notes = [
        "Dev primary metric at the best epoch, in %: median ± sample std over seeds (n seeds).",
        "Metrics: " + ", ".join(f"{task} = {metric_of[task]}" for task in tasks) + ".",
    ]
    if AVERAGE in columns:
        notes.append(
            f"{AVERAGE}: mean of the per-task medians, only for rows with all {len(tasks)} tasks."
        )
    sections = ["## Results", table(_score_cell, rows), "\n".join(notes)]
    compared = [(model, norm) for model, norm in rows if norm != BASELINE_NORM]
    if compared:
        sections += [
            f"## Δ median vs norm={BASELINE_NORM} (percentage points)",
            table(_delta_cell, compared),
        ]
    return "\n\n".join(sections) + "\n"


def _score_cell(row: Any) -> str:
    if row is None:
        return "–"
    if row.task == AVERAGE:
        return f"{row.median:.2f}"
    spread = f" ± {row.std:.2f}" if row.n > 1 else ""
    return f"{row.median:.2f}{spread} (n={row.n})"


def _delta_cell(row: Any) -> str:
    return "–" if row is None or pd.isna(row.delta_vs_none) else f"{row.delta_vs_none:+.2f}"


def isotropy_markdown(summary: pd.DataFrame) -> str:
    if summary.empty:
        return "## Isotropy\n\nNo isotropy measures in these runs.\n"
    body = [
        [r.model, r.norm, r.task, r.measure, f"{r.pretrained:.4g}", f"{r.finetuned:.4g}", r.n]
        for r in summary.itertuples(index=False)
    ]
    header = ["model", "norm", "task", "measure", "pretrained", "fine-tuned (best)", "n"]
    note = "Median over seeds; fine-tuned = at the best epoch."
    return f"## Isotropy\n\n{markdown_table(header, body)}\n\n{note}\n"
