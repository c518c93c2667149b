"""Each task's metric set against scikit-learn / SciPy on fixed predictions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from isotune.data.metrics import build_metrics, compute_scores, predictions
from isotune.data.tasks import TaskSpec
from tests.helpers.tasks import TASK_DIR, load_task

REFERENCES = {
    "accuracy": accuracy_score,
    "f1": f1_score,
    "matthews_correlation": matthews_corrcoef,
    "pearson": lambda y, p: pearsonr(y, p)[0],
    "spearmanr": lambda y, p: spearmanr(y, p)[0],
}
EXPECTED_METRICS = {
    "cola": ["matthews_correlation"],
    "sst2": ["accuracy"],
    "mrpc": ["f1", "accuracy"],
    "stsb": ["pearson", "spearmanr"],
    "qqp": ["f1", "accuracy"],
    "mnli": ["accuracy"],
    "qnli": ["accuracy"],
    "rte": ["accuracy"],
    "wnli": ["accuracy"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_METRICS))
def test_task_metrics_match_references(name):
    task = load_task(name)
    assert list(task.metrics) == EXPECTED_METRICS[name]
    rng = np.random.default_rng(0)
    if task.is_regression:
        labels = rng.uniform(0, 5, size=200)
        logits = torch.tensor(labels + rng.normal(0, 1.5, size=200), dtype=torch.float32)[:, None]
        target = torch.tensor(labels, dtype=torch.float32)
    else:
        labels = rng.integers(0, task.num_labels, size=200)
        noisy = np.where(rng.random(200) < 0.7, labels, rng.integers(0, task.num_labels, size=200))
        logits = torch.nn.functional.one_hot(torch.tensor(noisy), task.num_labels).float()
        target = torch.tensor(labels)
    predicted = predictions(logits)
    metrics = build_metrics(task.metrics, task.num_labels)
    for start in range(0, 200, 64):  # accumulated over batches, as in validation
        metrics.update(predicted[start : start + 64], target[start : start + 64])
    scores = compute_scores(metrics)
    expected = {m: REFERENCES[m](labels, predicted.numpy()) for m in task.metrics}
    for metric, value in expected.items():
        assert scores[metric] == pytest.approx(value, abs=1e-5), metric
    if len(expected) > 1:
        assert scores["combined_score"] == pytest.approx(np.mean(list(expected.values())), abs=1e-5)
    else:
        assert "combined_score" not in scores
    assert task.primary_metric == task.metrics[0]


@pytest.mark.parametrize("constant", ["prediction", "label"])
def test_matthews_correlation_of_a_constant_is_zero_as_in_scikit_learn(constant):
    labels = np.array([1] * 7 + [0] * 3)
    predicted = np.array([1, 0, 1, 1, 0, 1, 1, 0, 1, 1])
    if constant == "prediction":
        predicted = np.ones_like(labels)  # a collapsed run: the majority class everywhere
    else:
        labels = np.ones_like(labels)
    metrics = build_metrics(["matthews_correlation"], 2)
    metrics.update(torch.tensor(predicted), torch.tensor(labels))
    score = compute_scores(metrics)["matthews_correlation"]
    assert score == matthews_corrcoef(labels, predicted) == 0.0


def test_regression_predictions_are_scores_not_argmax():
    logits = torch.tensor([[2.5], [0.3]])
    torch.testing.assert_close(predictions(logits), torch.tensor([2.5, 0.3]))
    torch.testing.assert_close(
        predictions(torch.tensor([[0.1, 0.9], [2.0, -1.0]])), torch.tensor([1, 0])
    )


def test_task_spec_validation_errors():
    config = OmegaConf.to_container(OmegaConf.load(TASK_DIR / "rte.yaml"))
    with pytest.raises(Exception, match="num_labels=3"):
        TaskSpec.from_config({**config, "num_labels": 3})
    with pytest.raises(Exception, match="bleu"):
        TaskSpec.from_config({**config, "metrics": ["bleu"]})
    with pytest.raises(Exception, match="primary_metric 'f1'"):
        TaskSpec.from_config({**config, "primary_metric": "f1"})
    task = TaskSpec.from_config(config)
    with pytest.raises(Exception, match="label 'maybe' is not a label of task rte"):
        task.encode_label("maybe", "dev.tsv, line 3")


def test_mnli_logs_matched_as_val_and_mismatched_separately():
    task = load_task("mnli")
    assert task.primary_split == "validation_matched"
    assert task.log_prefix("validation_matched") == "val"
    assert task.log_prefix("validation_mismatched") == "val_mismatched"
