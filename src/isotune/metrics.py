"""Each GLUE task's official metrics, computed with torchmetrics (no metric code fetched online).

Names follow Hugging Face's ``run_glue.py`` so numbers compare directly; ``combined_score`` is the
mean of a task's metrics when it has several (MRPC, QQP, STS-B).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torchmetrics import (
    Accuracy,
    F1Score,
    MatthewsCorrCoef,
    Metric,
    MetricCollection,
    PearsonCorrCoef,
    SpearmanCorrCoef,
)

METRICS: dict[str, Callable[[int], Metric]] = {
    "accuracy": lambda num_labels: Accuracy(task="multiclass", num_classes=num_labels),
    "f1": lambda num_labels: F1Score(task="binary"),
    "matthews_correlation": lambda num_labels: MatthewsCorrCoef(
        task="binary" if num_labels == 2 else "multiclass", num_classes=num_labels
    ),
    "pearson": lambda num_labels: PearsonCorrCoef(),
    "spearmanr": lambda num_labels: SpearmanCorrCoef(),
}


def build_metrics(names: Sequence[str], num_labels: int) -> MetricCollection:
    """A collection computing the named metrics from predictions (see :func:`predictions`)."""
    unknown = [name for name in names if name not in METRICS]
    if unknown:
        raise ValueError(f"Unknown metrics {unknown}; available: {sorted(METRICS)}.")
    return MetricCollection({name: METRICS[name](num_labels) for name in names})


def predictions(logits: Tensor) -> Tensor:
    """Class ids from classification logits; the score itself for regression (one output)."""
    if logits.shape[-1] == 1:
        return logits.squeeze(-1).float()
    return logits.argmax(dim=-1)


def compute_scores(metrics: MetricCollection) -> dict[str, float]:
    """The metrics' values as floats, plus ``combined_score`` when there are several."""
    scores = {name: float(value) for name, value in metrics.compute().items()}
    if len(scores) > 1:
        scores["combined_score"] = float(torch.tensor(list(scores.values())).mean())
    return scores
