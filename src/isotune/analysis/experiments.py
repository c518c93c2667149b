"""The three measurements of a geometry analysis, each a table (``docs/analysis.md``).

- :func:`isotropy_by_layer` (T1, T3): every isotropy measure per model, view and layer;
- :func:`local_structure` (T2): how separable token type and frequency are per model and layer;
- :func:`enhancement_experiment` (T4, T5): isotropy and task metric after each enhancement
  method, for the fine-tuned head and for linear probes.

The names here (models, views, measures, methods, settings) are the tables' vocabulary, shared
by the verdicts, the figures and the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from isotune.analysis.geometry import LayerVectors, probe_predictions, separability
from isotune.data.metrics import build_metrics, compute_scores, predictions
from isotune.data.tasks import TaskSpec
from isotune.isotropy import layer_profile, measure_all
from isotune.isotropy.enhance import (
    all_but_the_top,
    cluster_based,
    cluster_labels,
    cluster_zero_mean,
    standardize,
    zero_mean,
)
from isotune.model.classifier import GLUEClassifier
from isotune.tracking.metric_keys import POST_NORM, PRE_NORM

MODELS = ("pretrained", "finetuned")
MEASURES = ("iw", "log_iw", "avg_cosine", "isoscore", "n_dominant", "effective_rank")
# Per layer also Razzhigaev et al.'s anisotropy and the intrinsic dimension (layer_profile's).
LAYER_MEASURES = (*MEASURES, "anisotropy", "twonn", "twonn_microscope", "mle_id")
PROPERTIES = ("token_type", "frequency")
SEPARABILITY = ("purity", "probe_accuracy")
METHODS = (
    "none",
    "zero_mean",
    "cluster_zero_mean",
    "all_but_the_top",
    "cluster_based",
    "standardize",
)
# The enhancement experiment's settings: the sentence vectors each one transforms, and what then
# scores them (the report lists these descriptions).
SETTING_VIEWS = {
    "finetuned_head": POST_NORM,
    "pretrained_probe": PRE_NORM,
    "finetuned_probe": POST_NORM,
}
SETTINGS = {
    "finetuned_head": f"fine-tuned classifier (its own head) on its transformed `{POST_NORM}` "
    "vectors",
    "pretrained_probe": f"linear probe on the pre-trained `{PRE_NORM}` vectors",
    "finetuned_probe": f"linear probe retrained on the fine-tuned `{POST_NORM}` vectors",
}


@dataclass(frozen=True)
class Inputs:
    """What the experiments read, collected once by :func:`isotune.analysis.run.analyze`: one
    object, not the same long argument list handed to each experiment."""

    models: Mapping[str, GLUEClassifier]  # MODELS
    dev_vectors: Mapping[str, LayerVectors]  # of the dev sample (with the token sample)
    train_vectors: Mapping[str, LayerVectors]  # of the probes' training subset
    dev_labels: Tensor
    train_labels: Tensor
    seed: int


def sentence_view(pooling: str) -> str:
    """The view of the model's sentence vector (before the norm) in :func:`isotropy_by_layer`:
    ``pre_norm`` (the pooler output) with ``pooler`` pooling, else the last layer's ``sentence``,
    which is the same vector."""
    return PRE_NORM if pooling == "pooler" else "sentence"


def isotropy_by_layer(
    vectors: Mapping[str, LayerVectors], pooling: str, dominant_factor: float, seed: int
) -> pd.DataFrame:
    """Every measure of :func:`~isotune.isotropy.measure_all` and of
    :func:`~isotune.isotropy.layer_profile` per model, view and layer.

    Views: ``tokens`` (the token sample), ``sentence`` (the model's pooling of each layer; for
    ``pooler`` pooling each layer's [CLS] state) and, for ``pooler`` pooling, ``pre_norm`` (the
    pooler output, last layer only).
    """
    rows = []
    for model, layers in vectors.items():
        views = {"tokens": layers.tokens, "sentence": layers.sentences}
        if pooling == "pooler":
            views[PRE_NORM] = [None] * (layers.num_layers - 1) + [layers.pre_norm]
        for view, per_layer in views.items():
            for layer, points in enumerate(per_layer):
                if points is None:
                    continue
                measures = measure_all(points, dominant_factor=dominant_factor, seed=seed)
                profile = layer_profile(points)
                rows.append(
                    {
                        "model": model,
                        "view": view,
                        "layer": layer,
                        "n": len(points),
                        **measures,
                        **{name: profile[name] for name in LAYER_MEASURES if name not in measures},
                    }
                )
    return pd.DataFrame(rows)


def local_structure(
    vectors: Mapping[str, LayerVectors],
    labels: Mapping[str, Tensor],
    settings: Mapping,
    seed: int,
) -> pd.DataFrame:
    """Separability of each token labelling (type, frequency bucket) per model and layer, on one
    seeded subset of at most ``settings.max_points`` sampled tokens."""
    count = len(next(iter(labels.values())))
    generator = torch.Generator().manual_seed(seed)
    keep = torch.randperm(count, generator=generator)[: settings.max_points].sort().values
    rows = []
    for model, layers in vectors.items():
        for layer, points in enumerate(layers.tokens):
            for name, values in labels.items():
                scores = separability(
                    points[keep], values[keep], settings.n_clusters, settings.folds, seed
                )
                rows.append({"model": model, "layer": layer, "property": name, **scores})
    return pd.DataFrame(rows)


def enhancements(settings: Mapping, seed: int) -> dict[str, Callable[[Tensor], Tensor]]:
    """The methods of :mod:`isotune.isotropy.enhance` with the configured settings, ``none``
    first."""

    def clusters(X: Tensor) -> Tensor:
        return cluster_labels(X, min(settings.n_clusters, len(X)), seed)

    return {
        "none": lambda X: X,
        "zero_mean": zero_mean,
        "cluster_zero_mean": lambda X: cluster_zero_mean(X, clusters(X)),
        "all_but_the_top": lambda X: all_but_the_top(X, settings.abtt_components),
        "cluster_based": lambda X: cluster_based(X, clusters(X), settings.cluster_components),
        "standardize": standardize,
    }


def task_scores(task: TaskSpec, predicted: Tensor, labels: Tensor) -> dict[str, float]:
    """The task's dev metrics of predictions (class ids, or scores for regression)."""
    metrics = build_metrics(task.metrics, task.num_labels)
    metrics.update(predicted, labels)
    return compute_scores(metrics)


@torch.no_grad()
def enhancement_experiment(
    inputs: Inputs, settings: Mapping, dominant_factor: float
) -> pd.DataFrame:
    """Isotropy and task metric after each enhancement method, in three settings.

    ``finetuned_head``: the methods transform the fine-tuned ``post_norm`` vectors of the dev
    set, and the fine-tuned head (eval mode) classifies the result. ``pretrained_probe`` /
    ``finetuned_probe``: a linear probe is trained on the (transformed) ``pre_norm`` /
    ``post_norm`` vectors of the training subset and scored on those of the dev set; the methods
    are unsupervised and fitted on both splits together, so both get the same transformation.
    Isotropy is measured on the dev vectors.
    """
    finetuned, seed = inputs.models["finetuned"], inputs.seed
    task = finetuned.task
    methods = enhancements(settings, seed)
    rows = []

    def row(setting: str, method: str, points: Tensor, predicted: Tensor) -> None:
        measures = measure_all(points, dominant_factor=dominant_factor, seed=seed)
        scores = task_scores(task, predicted, inputs.dev_labels)
        rows.append(
            {
                "setting": setting,
                "view": SETTING_VIEWS[setting],
                "method": method,
                **{name: measures[name] for name in MEASURES},
                **scores,
            }
        )

    for method, transform in methods.items():
        points = transform(inputs.dev_vectors["finetuned"].post_norm)
        logits = finetuned.head(finetuned.dropout(points.to(finetuned.device))).cpu()
        row("finetuned_head", method, points, predictions(logits))
    for model in MODELS:
        setting = f"{model}_probe"
        view = SETTING_VIEWS[setting]  # LayerVectors names its sentence vectors as the views
        train, dev = (
            getattr(vectors[model], view) for vectors in (inputs.train_vectors, inputs.dev_vectors)
        )
        for method, transform in methods.items():
            both = transform(torch.cat([train, dev]))
            train_points, dev_points = both[: len(train)], both[len(train) :]
            predicted = probe_predictions(
                train_points, inputs.train_labels, dev_points, task.is_regression, seed
            )
            row(setting, method, dev_points, predicted)
    return pd.DataFrame(rows)


def metric_values(table: pd.DataFrame, setting: str, method: str) -> dict[str, float]:
    """The task metrics of one row of the enhancement table."""
    found = table.set_index(["setting", "method"]).loc[(setting, method)]
    return {name: float(value) for name, value in found.drop(["view", *MEASURES]).items()}
