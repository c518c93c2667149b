"""The trivial predictor of a dev set, and whether a run beat it: failed runs told from worse ones.

Mosbach, Andriushchenko & Klakow (ICLR 2021) call a run *failed* when its dev score is not above
the majority-class baseline; without that line, a regularizer that breaks training reads as a
small negative effect. The trivial predictor is a constant, scored by the task's own metric
functions (:mod:`isotune.data.metrics`) so that a collapsed run and it score alike:
classification predicts the majority class (ties: the lower id; Matthews correlation of a
constant scored 0 as GLUE's scorer does), regression the labels' mean (its undefined correlation
counts as 0). A task with several metrics is judged by its primary one. Torch only, no
Lightning: a notebook judges a run as the training run does. Docs: docs/training.md.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import torch

from isotune.data.metrics import build_metrics, compute_scores
from isotune.data.tasks import TaskSpec
from isotune.norms.ranges import Range
from isotune.norms.values import finite_number

DECIMALS = 9  # a score equal to the trivial one in float noise is not above it
# A score beats the trivial one by at most 1 (accuracy 1 over 0), so a margin of 1 or more fails
# every run; such a margin is most likely points typed for a fraction (2 for 0.02).
MARGIN = Range(
    lambda v: finite_number(v) and 0 <= v < 1,
    "a number in [0, 1), in the metric's units (0.01 is one point; no score beats the trivial "
    "one by 1 or more, so every run would read FAILED TO LEARN)",
)


@dataclass(frozen=True)
class TrivialScore:
    """What a constant prediction scores on a dev set, by the task's primary metric."""

    predictor: str  # "majority class (not_entailment)", "mean of the dev labels (2.36)"
    metric: str
    score: float


def trivial_score(task: TaskSpec, labels: Sequence[float] | torch.Tensor) -> TrivialScore:
    """The trivial predictor of ``labels`` (those of the dev examples the run scores, in any
    order: :func:`isotune.training.recording.scored_examples`) and its score."""
    labels = torch.as_tensor(labels)
    if task.is_regression:
        mean = float(labels.float().mean())
        predicted = torch.full(labels.shape, mean)
        predictor = f"mean of the dev labels ({mean:.3g})"
        labels = labels.float()
    else:
        counts = torch.bincount(labels.long(), minlength=task.num_labels)
        majority = int(counts.argmax())  # the first of tied counts: the lower class id
        predicted = torch.full(labels.shape, majority)
        predictor = f"majority class ({task.labels[majority]})"
    with warnings.catch_warnings():  # torchmetrics: a constant has no variance, Spearman's buffer
        warnings.simplefilter("ignore")
        metrics = build_metrics(task.metrics, task.num_labels)
        metrics.update(predicted, labels)
        score = compute_scores(metrics)[task.primary_metric]
    return TrivialScore(predictor, task.primary_metric, score if math.isfinite(score) else 0.0)


def margin_problem(margin: object) -> str | None:
    """What is wrong with ``margin`` as ``failure.margin``, with the value meant where it looks
    like points (2 -> 0.02); None for a valid margin."""
    if MARGIN.holds(margin):
        return None
    points = finite_number(margin) and 1 <= margin <= 100
    meant = f"; {margin:g} looks like points: failure.margin={margin / 100:g}" if points else ""
    return f"failure.margin={margin!r}: must be {MARGIN.text}{meant}"


def learned(best: Mapping[str, float], trivial: TrivialScore, margin: float) -> bool | None:
    """Whether the best epoch's score is above the trivial one by more than ``margin`` (in the
    metric's units: 0.01 is one point of accuracy); None without a best epoch."""
    problem = margin_problem(margin)
    if problem is not None:
        raise ValueError(problem)
    score = best.get(trivial.metric)
    if score is None or not math.isfinite(score):
        return None if score is None else False
    return round(score - trivial.score, DECIMALS) > margin


def failure_record(trivial: TrivialScore, margin: float, best: Mapping[str, float]) -> dict:
    """results.json's fields: ``trivial`` (predictor, metric, score), ``margin``, ``learned``."""
    return {"trivial": asdict(trivial), "margin": margin, "learned": learned(best, trivial, margin)}
