"""Each GLUE task's official metrics, computed with torchmetrics (no metric code fetched online).

Names follow Hugging Face's ``run_glue.py`` so numbers compare directly (``macro_f1``, of
``task=files``, is scikit-learn's ``f1_score(average="macro")``); ``combined_score`` is the mean
of a task's metrics when it has several (MRPC, QQP, STS-B).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import (
    Accuracy,
    F1Score,
    Metric,
    MetricCollection,
    PearsonCorrCoef,
    SpearmanCorrCoef,
)
from torchmetrics.classification import MulticlassMatthewsCorrCoef


class MatthewsCorrelation(MulticlassMatthewsCorrCoef):
    """Matthews correlation as GLUE's official scorer (scikit-learn's ``matthews_corrcoef``) gives
    it: 0 when the predictions or the labels are constant, where the formula is 0/0. torchmetrics
    answers that case with a small value of the majority's sign (+0.026 for a constant prediction on
    CoLA's dev set), so a collapsed run would read as a little above chance."""

    def compute(self) -> Tensor:
        confmat = self.confmat.float()
        total = confmat.sum()
        for marginal in (confmat.sum(dim=0), confmat.sum(dim=1)):  # predicted, actual classes
            if total**2 - (marginal**2).sum() == 0:  # one class only: no variance
                return torch.zeros((), device=confmat.device)
        return super().compute()


class ConstantScoresZero:
    """A correlation (mixed into torchmetrics' Pearson or Spearman) that is exactly 0 when the
    predictions are constant, where it is 0/0, as docs/training.md promises for the trivial
    predictor and a collapsed regression run. torchmetrics answers a constant from float noise (the
    trivial predictor scored Pearson -1.65e-07 on STS-B), so the lowest and highest prediction are
    kept (reduced across processes) to tell a constant exactly."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("lowest", default=torch.tensor(math.inf), dist_reduce_fx="min")
        self.add_state("highest", default=torch.tensor(-math.inf), dist_reduce_fx="max")

    def update(self, preds: Tensor, target: Tensor) -> None:
        super().update(preds, target)
        if preds.numel():
            self.lowest = torch.minimum(self.lowest, preds.detach().min().to(self.lowest))
            self.highest = torch.maximum(self.highest, preds.detach().max().to(self.highest))

    def compute(self) -> Tensor:
        if self.lowest == self.highest:  # one value predicted: no variance
            return torch.zeros((), device=self.lowest.device)
        return super().compute()


class PearsonCorrelation(ConstantScoresZero, PearsonCorrCoef):
    """Pearson's r, 0 for constant predictions (:class:`ConstantScoresZero`)."""


class SpearmanCorrelation(ConstantScoresZero, SpearmanCorrCoef):
    """Spearman's rho, 0 for constant predictions (:class:`ConstantScoresZero`)."""


METRICS: dict[str, Callable[[int], Metric]] = {
    "accuracy": lambda num_labels: Accuracy(task="multiclass", num_classes=num_labels),
    "f1": lambda num_labels: F1Score(task="binary"),
    # F1 of each class, averaged with equal weights (scikit-learn's average="macro"): task=files
    "macro_f1": lambda num_labels: F1Score(
        task="multiclass", num_classes=num_labels, average="macro"
    ),
    "matthews_correlation": lambda num_labels: MatthewsCorrelation(num_classes=num_labels),
    "pearson": lambda num_labels: PearsonCorrelation(),
    "spearmanr": lambda num_labels: SpearmanCorrelation(),
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
