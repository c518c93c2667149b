"""Outlier dimensions of the sentence vector, pre-trained against fine-tuned, and what one carries.

Two statements of Rudman, Chen & Eickhoff (EMNLP 2023) on one checkpoint (rules:
``docs/analysis.md``): the outlier dimensions of pre-training persist after fine-tuning (O1), and
a single outlier dimension can do most of the task (O2). Both read the sentence vector before the
norm (``pre_norm``: the encoder's own, as the paper reads its models' last-layer [CLS] state) of
the training subset, where the released code measures variances and fits its thresholds; every
dimension's 1-D rule (:mod:`.single_dimension`) is scored on the dev subset with the task's
primary metric, like the full model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd
import torch
from scipy import stats
from torch import Tensor

from isotune.analysis.experiments import MODELS, Inputs, task_scores
from isotune.analysis.single_dimension import SEARCHES, fit_lines, fit_stumps
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.isotropy import dimension_variances, outliers_from_variances, overlap
from isotune.norms.ranges import POSITIVE
from isotune.tracking.metric_keys import PRE_NORM


def one_dimension_scores(
    train: Tensor,
    train_labels: Tensor,
    dev: Tensor,
    dev_labels: Tensor,
    task: TaskSpec,
    search: str,
) -> pd.DataFrame:
    """Per dimension: the 1-D rule fitted on ``train`` and its dev score (the primary metric)."""
    if task.is_regression:
        lines = fit_lines(train, train_labels)
        predicted = lines.predict(dev).float()
        fitted = {"threshold": math.nan, "slope": lines.slope, "train_accuracy": math.nan}
    else:
        if search == "grid" and task.num_labels != 2:
            raise IsotuneError(
                f"outliers.search=grid is the released search for binary tasks; {task.name} has "
                f"{task.num_labels} classes. Fix: outliers.search=exact."
            )
        stumps = fit_stumps(train, train_labels, task.num_labels, search)
        predicted = stumps.predict(dev)
        fitted = {
            "threshold": stumps.threshold,
            "slope": math.nan,
            "train_accuracy": stumps.train_accuracy,
        }
    metric = task.primary_metric
    scores = [
        task_scores(task, predicted[:, dim], dev_labels)[metric] for dim in range(dev.shape[1])
    ]
    frame = pd.DataFrame({"dim": range(dev.shape[1]), "score": scores})
    for name, values in fitted.items():
        frame[name] = values.tolist() if isinstance(values, Tensor) else values
    return frame


def baseline_score(task: TaskSpec, train_labels: Tensor, dev_labels: Tensor) -> float:
    """What knowing nothing scores: the training majority class predicted for every dev example
    (regression: 0, the correlation of a constant prediction)."""
    if task.is_regression:
        return 0.0
    majority = torch.bincount(train_labels, minlength=task.num_labels).argmax()
    return task_scores(task, majority.repeat(len(dev_labels)), dev_labels)[task.primary_metric]


def outlier_experiment(
    inputs: Inputs, full_score: float, settings: Mapping
) -> tuple[pd.DataFrame, dict]:
    """The per-dimension table of both models and the summary the verdicts O1 and O2 read.

    Table: model, dim, variance (training subset, ddof 0), variance_ratio (to the mean),
    variance_rank (1 = largest), outlier, tabulated (an outlier or among the ``top_dims`` of
    largest variance: the report's rows), and the 1-D rule's threshold (or slope), training
    accuracy and dev score. ``full_score``: the fine-tuned model's own dev score.
    """
    if settings.search not in SEARCHES:
        raise IsotuneError(
            f"outliers.search={settings.search!r}: must be one of {list(SEARCHES)}. "
            "Fix: outliers.search=exact (or grid, the released search)."
        )
    factor, top_dims = settings.factor, settings.top_dims
    if not POSITIVE.holds(factor):
        raise IsotuneError(f"outliers.factor={factor!r}: must be {POSITIVE.text}.")
    task = inputs.models["finetuned"].task
    train_labels, dev_labels = inputs.train_labels, inputs.dev_labels
    frames, outliers = [], {}
    for model in MODELS:
        train, dev = inputs.train_vectors[model].pre_norm, inputs.dev_vectors[model].pre_norm
        variances = dimension_variances(train)
        found = outliers_from_variances(variances, factor)
        outliers[model] = found
        frame = one_dimension_scores(train, train_labels, dev, dev_labels, task, settings.search)
        frame.insert(0, "model", model)
        frame.insert(2, "variance", variances.tolist())
        frame.insert(3, "variance_ratio", (variances / variances.mean()).tolist())
        rank = variances.argsort(descending=True, stable=True).argsort() + 1
        frame.insert(4, "variance_rank", rank.tolist())
        frame.insert(5, "outlier", frame["dim"].isin(found.indices))
        frame.insert(6, "tabulated", frame["outlier"] | (frame["variance_rank"] <= top_dims))
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    baseline = baseline_score(task, train_labels, dev_labels)
    return table, _summary(table, outliers, full_score, baseline, settings)


def _defined(value: float) -> float | None:
    """``value``, or None (JSON null) where it is undefined: analysis.json stays standard JSON."""
    return None if math.isnan(value) else float(value)


def _summary(
    table: pd.DataFrame, outliers: Mapping, full: float, baseline: float, settings
) -> dict:
    """What analysis.json keeps; undefined numbers (e.g. the survival of no outliers) are null."""
    pretrained, finetuned = (outliers[model] for model in MODELS)
    shared = overlap(pretrained.indices, finetuned.indices)
    fine = table[table.model == "finetuned"]

    def best(rows: pd.DataFrame) -> dict | None:
        if rows.empty or rows["score"].isna().all():
            return None
        row = rows.loc[rows["score"].idxmax()]
        gain = full - baseline
        return {
            "dim": int(row["dim"]),
            "score": float(row["score"]),
            "variance_ratio": float(row["variance_ratio"]),
            "recovery": float((row["score"] - baseline) / gain) if gain > 0 else None,
        }

    scored = fine.dropna(subset=["score"])
    rho, p = (
        stats.spearmanr(scored["variance"], scored["score"])
        if len(scored) > 2 and scored["score"].nunique() > 1
        else (math.nan, math.nan)
    )
    return {
        "view": PRE_NORM,
        "factor": pretrained.factor,
        "search": settings.search,
        "pretrained": list(pretrained.indices),
        "finetuned": list(finetuned.indices),
        "kept": list(shared.kept),
        "survival": _defined(shared.survival),
        "jaccard": _defined(shared.jaccard),
        "principal": {"pretrained": pretrained.principal, "finetuned": finetuned.principal},
        "full_score": full,
        "baseline_score": baseline,
        "best_outlier": best(fine[fine.outlier]),
        "best_dimension": best(fine),
        "variance_score_spearman": {"rho": _defined(rho), "p": _defined(p), "n": len(scored)},
    }
