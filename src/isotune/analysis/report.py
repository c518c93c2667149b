"""What an analysis leaves: tables as CSV and Markdown, ``report.md``, and the loggers' copy.

The report's prose is ``report_template.md`` (shipped with the package), filled with
:meth:`str.format`; what each table, figure and key means is in ``docs/analysis.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from isotune.analysis.experiments import LAYER_MEASURES, MEASURES, SEPARABILITY, SETTINGS
from isotune.analysis.figures import FIGURES
from isotune.analysis.geometry import TOKEN_TYPES
from isotune.analysis.verdicts import Verdict
from isotune.atomic_files import write_text
from isotune.data.tasks import TaskSpec
from isotune.tracking.reporting import markdown_table
from isotune.training.instantiate import instantiate_all

TABLES = ("isotropy_by_layer", "local_structure", "enhancement", "outlier_dimensions")


def write_tables(tables: Mapping[str, pd.DataFrame], task: TaskSpec, output_dir: Path) -> None:
    """Each table as ``<name>.csv`` (every column) and ``<name>.md`` (the main ones)."""
    for name, table in tables.items():
        write_text(output_dir / f"{name}.csv", table.to_csv(index=False))
        write_text(output_dir / f"{name}.md", table_markdown(name, table, task) + "\n")


def table_markdown(name: str, table: pd.DataFrame, task: TaskSpec) -> str:
    """The main columns of one table as Markdown, numbers to four significant digits."""
    keys = {
        "isotropy_by_layer": ["model", "view", "layer", "n", *LAYER_MEASURES],
        "local_structure": ["model", "layer", "property", *SEPARABILITY, "majority", "n_classes"],
        "enhancement": ["setting", "view", "method", *MEASURES, *task.metrics],
        "outlier_dimensions": [
            "model",
            "dim",
            "variance_ratio",
            "variance_rank",
            "outlier",
            "slope" if task.is_regression else "threshold",
            "score",
        ],
    }[name]
    if name == "outlier_dimensions":  # every dimension is in the CSV; the outliers and the top here
        shown = table[table["tabulated"]]  # pretrained first, then by variance
        table = shown.sort_values(["model", "variance_rank"], ascending=[False, True])
    rows = [[_cell(value) for value in row] for row in table[keys].itertuples(index=False)]
    return markdown_table(keys, rows)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def new_directions_markdown(new: pd.DataFrame) -> str:
    """Per view, how many of the fine-tuned top directions are new, their ranks and variance."""
    rows = [
        [
            view,
            f"{int(group['new'].sum())} of {len(group)}",
            ", ".join(str(rank) for rank in group.loc[group["new"], "rank"]) or "-",
            f"{group.loc[group['new'], 'variance_ratio'].sum():.4g}",
            f"{group['max_abs_cos'].min():.4g}",
        ]
        for view, group in new.groupby("view", sort=False)
    ]
    header = ["view", "new", "their ranks", "their variance share", "smallest max abs cos"]
    return markdown_table(header, rows)


def intruder_dimensions_markdown(intruders: pd.DataFrame, most: int = 5) -> str:
    """The weight matrices with the most intruder dimensions (at most ``most`` of them)."""
    with_intruders = intruders[intruders["intruders"] > 0]
    if with_intruders.empty:
        return "No weight matrix has an intruder dimension."
    top = with_intruders.sort_values(["intruders", "min_max_abs_cos"], ascending=[False, True])
    rows = [
        [f"`{row.matrix}`", str(row.intruders), f"{row.min_max_abs_cos:.4g}"]
        for row in top.head(most).itertuples(index=False)
    ]
    return markdown_table(["matrix", "intruders", "smallest max abs cos"], rows)


def report_markdown(
    summary: Mapping[str, Any],
    tables: Mapping[str, pd.DataFrame],
    directions: Mapping[str, pd.DataFrame],
    verdicts: Sequence[Verdict],
    task: TaskSpec,
    cfg: DictConfig,
) -> str:
    """``report.md``: what was analysed, the verdict on T1-T5 with its numbers, figures, tables,
    the directions fine-tuning made dominant, and the outlier dimensions (O1, O2)."""
    template = resources.files("isotune.analysis").joinpath("report_template.md")
    metric = task.primary_metric
    recorded = summary["checkpoint_dev"]  # the last dev scores saved in the checkpoint
    recorded_text = (
        f"{recorded[metric]:.4f} at epoch {recorded['epoch']}" if recorded else "none recorded"
    )
    return template.read_text(encoding="utf-8").format(
        summary=summary,
        cfg=cfg,
        figures=FIGURES,
        task=task.name,
        metric=metric,
        last_layer=summary["num_layers"] - 1,
        token_types=", ".join(f"{name} {count}" for name, count in summary["token_types"].items()),
        recomputed=summary["finetuned_dev"][metric],
        recorded=recorded_text,
        verdicts=verdicts_markdown([v for v in verdicts if v.statement.startswith("T")]),
        outlier_verdicts=verdicts_markdown([v for v in verdicts if v.statement.startswith("O")]),
        outliers=summary["outlier_dimensions"],
        spearman=_spearman_text(summary["outlier_dimensions"]["variance_score_spearman"]),
        token_type_names=", ".join(TOKEN_TYPES),
        settings="\n".join(f"- `{name}`: {text}" for name, text in SETTINGS.items()),
        **{name: table_markdown(name, tables[name], task) for name in TABLES},
        new_directions=new_directions_markdown(directions["new_directions"]),
        intruder_dimensions=intruder_dimensions_markdown(directions["intruder_dimensions"]),
    )


def _spearman_text(spearman: Mapping[str, Any]) -> str:
    if spearman["rho"] is None:
        return "undefined (every dimension scores the same)"
    return f"{spearman['rho']:.3f} (p = {spearman['p']:.3g})"


def verdicts_markdown(verdicts: Sequence[Verdict]) -> str:
    return markdown_table(
        ["", "claim", "here", "numbers"],
        [[v.statement, v.claim, f"**{v.outcome}**", v.evidence] for v in verdicts],
    )


def log_to_loggers(
    cfg: DictConfig,
    summary: Mapping[str, Any],
    tables: Mapping[str, pd.DataFrame],
    figures: Mapping[str, Path],
    report: Path,
) -> None:
    """Log per-layer measures (step = layer), the enhancement results and, to W&B, the tables,
    figures, report and verdicts; then close the loggers."""
    loggers = instantiate_all(cfg.get("logger"))
    if not loggers:
        return
    layers, local = tables["isotropy_by_layer"], tables["local_structure"]
    per_layer: dict[int, dict[str, float]] = {}
    for row in layers.itertuples(index=False):
        values = per_layer.setdefault(row.layer, {})
        values.update({f"{row.model}/{row.view}/{m}": getattr(row, m) for m in LAYER_MEASURES})
    for row in local.itertuples(index=False):
        values = per_layer.setdefault(row.layer, {})
        values.update(
            {f"local/{row.model}/{row.property}/{s}": getattr(row, s) for s in SEPARABILITY}
        )
    last_layer = max(per_layer)
    numeric = tables["enhancement"].select_dtypes("number").columns
    enhancement = {
        f"enhance/{row['setting']}/{row['method']}/{column}": row[column]
        for row in tables["enhancement"].to_dict("records")
        for column in numeric
    }
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
        for layer, values in sorted(per_layer.items()):
            logger.log_metrics(values, step=layer)
        logger.log_metrics(enhancement, step=last_layer)
        if isinstance(logger, WandbLogger):
            for name in TABLES:
                logger.log_table(key=f"table/{name}", dataframe=tables[name])
            for name, path in figures.items():
                logger.log_image(key=f"figure/{name}", images=[str(path)], caption=[FIGURES[name]])
            run = logger.experiment
            run.save(str(report), base_path=str(report.parent), policy="now")
            run.summary.update(
                {f"verdict/{name}": v["outcome"] for name, v in summary["verdicts"].items()}
            )
            run.finish()
        else:
            logger.finalize("success")
