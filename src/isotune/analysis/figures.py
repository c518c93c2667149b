"""The analysis figures, one per question (``docs/analysis.md``): isotropy per layer and the
last layer's spectrum (T1, T3), local structure (T2), enhancement (T4, T5), and the outlier
dimensions with their 1-D scores (O1, O2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import torch
from matplotlib.ticker import NullFormatter
from omegaconf import DictConfig

from isotune.analysis.experiments import (
    LAYER_MEASURES,
    MODELS,
    PROPERTIES,
    SEPARABILITY,
    SETTINGS,
)
from isotune.analysis.geometry import LayerVectors
from isotune.atomic_files import save_figure
from isotune.data.tasks import TaskSpec
from isotune.isotropy import spectrum
from isotune.tracking.metric_keys import PRE_NORM

MODEL_COLOURS = {"pretrained": "tab:blue", "finetuned": "tab:red"}
MEASURE_TITLES = {
    "iw": "I(W)",
    "log_iw": "log I(W)",
    "avg_cosine": "average cosine",
    "isoscore": "IsoScore",
    "n_dominant": "dominant directions",
    "effective_rank": "effective rank",
    "anisotropy": "anisotropy (top eigenvalue share)",
    "twonn": "intrinsic dimension (TwoNN)",
    "mle_id": "intrinsic dimension (MLE)",
}
FIGURES = {
    "isotropy_by_layer": "Isotropy per layer, pre-trained vs fine-tuned (T1, T3)",
    "spectrum": "Last-layer covariance spectrum (T3)",
    "local_structure": "Local structure of the token space per layer (T2)",
    "enhancement": "Isotropy enhancement: isotropy and task metric (T4, T5)",
    "outlier_variances": "Variance per dimension, pre-trained vs fine-tuned, outliers marked (O1)",
    "one_dimension": "1-D score of each dimension against its variance (O2)",
}


def draw_figures(
    tables: Mapping[str, pd.DataFrame],
    vectors: Mapping[str, LayerVectors],
    sentence_view: str,
    task: TaskSpec,
    cfg: DictConfig,
    outliers: Mapping,
    output_dir: Path,
) -> dict[str, Path]:
    """Every figure of the report as ``<output_dir>/<name>.png`` (``outliers``: the summary of
    the outlier experiment)."""
    dimensions = tables["outlier_dimensions"]
    figures = {
        "isotropy_by_layer": isotropy_figure(tables["isotropy_by_layer"]),
        "spectrum": spectrum_figure(vectors, sentence_view, cfg.isotropy.dominant_factor),
        "local_structure": local_structure_figure(tables["local_structure"]),
        "enhancement": enhancement_figure(tables["enhancement"], task.primary_metric),
        "outlier_variances": outlier_variances_figure(dimensions, outliers["factor"]),
        "one_dimension": one_dimension_figure(dimensions, outliers, task.primary_metric),
    }
    paths = {}
    for name, figure in figures.items():
        paths[name] = output_dir / f"{name}.png"
        save_figure(figure, paths[name], dpi=80)
        plt.close(figure)
    return paths


def isotropy_figure(table: pd.DataFrame) -> plt.Figure:
    """Line plots over layers: one row per level (tokens, sentences), one column per measure."""
    measures = [name for name in LAYER_MEASURES if name in MEASURE_TITLES and name != "iw"]
    figure, axes = plt.subplots(2, len(measures), figsize=(4 * len(measures), 7), squeeze=False)
    for row, view in enumerate(("tokens", "sentence")):
        for axis, measure in zip(axes[row], measures, strict=True):
            for model in MODELS:
                lines = table[(table.model == model) & (table.view == view)]
                axis.plot(
                    lines.layer, lines[measure], "o-", color=MODEL_COLOURS[model], label=model
                )
                stars = table[(table.model == model) & (table.view == PRE_NORM)]
                if len(stars):
                    axis.plot(
                        stars.layer,
                        stars[measure],
                        "*",
                        markersize=12,
                        color=MODEL_COLOURS[model],
                        label=f"{model} {PRE_NORM} (pooler output)",
                    )
            axis.set(title=f"{view}: {MEASURE_TITLES[measure]}", xlabel="layer (0 = embeddings)")
    axes[0][0].legend()
    axes[1][0].legend()
    figure.tight_layout()
    return figure


def spectrum_figure(
    vectors: Mapping[str, LayerVectors], sentence_view: str, factor: float
) -> plt.Figure:
    """Explained-variance ratios of the last layer's principal components, both models; the
    dashed line is the dominance threshold (factor x the mean eigenvalue)."""
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for axis, view in zip(axes, ("tokens", sentence_view), strict=True):
        for model in MODELS:
            layers = vectors[model]
            points = {
                "tokens": layers.tokens[-1],
                "sentence": layers.sentences[-1],
                PRE_NORM: layers.pre_norm,
            }[view]
            ratios = spectrum(points, factor).explained_variance_ratio
            dimensions = len(ratios)
            ratios = ratios[: len(points) - 1]  # the rest is zero: N points span N - 1 directions
            ranks = torch.arange(1, len(ratios) + 1)
            axis.loglog(ranks, ratios, color=MODEL_COLOURS[model], label=model)
            axis.axhline(factor / dimensions, color="grey", linestyle="--", linewidth=1)
        axis.set(
            title=f"last layer, {view}: explained variance",
            xlabel="principal component",
            ylabel="variance ratio",
        )
        axis.legend()
    figure.tight_layout()
    return figure


def local_structure_figure(table: pd.DataFrame) -> plt.Figure:
    """Purity and probe accuracy per layer for each token labelling; dashed: the majority share."""
    figure, axes = plt.subplots(len(SEPARABILITY), len(PROPERTIES), figsize=(11, 7), squeeze=False)
    for column, name in enumerate(PROPERTIES):
        for row, score in enumerate(SEPARABILITY):
            axis = axes[row][column]
            for model in MODELS:
                lines = table[(table.model == model) & (table.property == name)]
                axis.plot(lines.layer, lines[score], "o-", color=MODEL_COLOURS[model], label=model)
            chance = table[table.property == name].majority
            axis.axhline(chance.iloc[0], color="grey", linestyle="--", label="majority share")
            axis.set(title=f"{name}: {score}", xlabel="layer (0 = embeddings)")
    axes[0][0].legend()
    figure.tight_layout()
    return figure


def enhancement_figure(table: pd.DataFrame, metric: str) -> plt.Figure:
    """Bars per method: log I(W), IsoScore and the task metric, in each setting."""
    rows = ("log_iw", "isoscore", metric)
    figure, axes = plt.subplots(
        len(rows), len(SETTINGS), figsize=(5 * len(SETTINGS), 9), squeeze=False
    )
    for column, setting in enumerate(SETTINGS):
        bars = table[table.setting == setting]
        for row, measure in enumerate(rows):
            axis = axes[row][column]
            axis.bar(range(len(bars)), bars[measure], color="tab:purple")
            axis.set_xticks(range(len(bars)), bars.method, rotation=30, ha="right")
            axis.set(title=f"{setting}: {MEASURE_TITLES.get(measure, measure)}")
    figure.tight_layout()
    return figure


def outlier_variances_figure(table: pd.DataFrame, factor: float) -> plt.Figure:
    """Each dimension's variance over the mean variance, both models, on a log scale; outliers
    (at or above the dashed line, ``factor``) ringed and numbered."""
    figure, axis = plt.subplots(figsize=(12, 4.2))
    for model in MODELS:
        rows = table[table.model == model]
        colour = MODEL_COLOURS[model]
        axis.semilogy(rows.dim, rows.variance_ratio, ".", color=colour, alpha=0.6, label=model)
        outliers = rows[rows.outlier]
        axis.semilogy(outliers.dim, outliers.variance_ratio, "o", mfc="none", ms=10, color=colour)
        for row in outliers.itertuples(index=False):
            axis.annotate(str(row.dim), (row.dim, row.variance_ratio), color=colour, fontsize=8)
    axis.axhline(factor, color="grey", linestyle="--", linewidth=1, label=f"{factor:g}x the mean")
    floor = _ratio_floor(table.variance_ratio)
    hidden = int((table.variance_ratio < floor).sum())
    axis.set_ylim(floor, 2 * max(table.variance_ratio.max(), factor))
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set(
        title="variance per dimension of the sentence vector (training subset)"
        + (f"; {hidden} near-constant below the axis" if hidden else ""),
        xlabel="dimension",
        ylabel="variance / mean variance",
    )
    axis.legend()
    figure.tight_layout()
    return figure


def one_dimension_figure(table: pd.DataFrame, outliers: Mapping, metric: str) -> plt.Figure:
    """The fine-tuned model's 1-D dev score of each dimension against its variance ratio;
    outliers in red; the full model and the majority baseline as lines."""
    figure, axis = plt.subplots(figsize=(7, 4.5))
    rows = table[table.model == "finetuned"]
    plain, marked = rows[~rows.outlier], rows[rows.outlier]
    axis.semilogx(plain.variance_ratio, plain.score, ".", color="grey", label="dimension")
    axis.semilogx(marked.variance_ratio, marked.score, "o", color="tab:red", label="outlier")
    axis.axhline(outliers["full_score"], color="tab:green", label="full model")
    axis.axhline(outliers["baseline_score"], color="black", linestyle=":", label="majority")
    axis.axvline(outliers["factor"], color="grey", linestyle="--", linewidth=1)
    floor = _ratio_floor(rows.variance_ratio)
    hidden = int((rows.variance_ratio < floor).sum())
    axis.set_xlim(left=floor)
    axis.xaxis.set_minor_formatter(NullFormatter())  # a narrow log range labels every minor tick
    axis.set(
        title="fine-tuned: one dimension alone"
        + (f" ({hidden} near-constant left of the axis)" if hidden else ""),
        xlabel="variance / mean variance",
        ylabel=f"dev {metric} of the 1-D rule",
    )
    axis.legend()
    figure.tight_layout()
    return figure


def _ratio_floor(ratios: pd.Series) -> float:
    """Where a log axis of variance ratios starts: half the 1% quantile, so that a few
    near-constant dimensions (MiniLM has three, 1e-64 of the mean) do not flatten the rest."""
    return float(ratios[ratios > 0].quantile(0.01)) / 2
