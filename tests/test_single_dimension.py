"""The 1-D rules of the outlier analysis against brute force and the released code's loop
(``isotune.analysis.single_dimension``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score

from isotune.analysis.single_dimension import exact_stumps, fit_lines, fit_stumps, grid_stumps


def brute_force_best_accuracy(x: np.ndarray, y: np.ndarray, classes: int) -> float:
    """Every threshold between two distinct values (and above all of them), every pair of
    classes for the two sides: the best training accuracy any stump reaches."""
    values = np.unique(x)
    thresholds = [*((values[:-1] + values[1:]) / 2), values[-1]]
    best = 0.0
    for t in thresholds:
        for below in range(classes):
            for above in range(classes):
                best = max(best, float(np.mean(np.where(x <= t, below, above) == y)))
    return best


def released_max_var_predict(
    train: np.ndarray, train_labels: np.ndarray, dev: np.ndarray
) -> tuple[float, int, np.ndarray]:
    """The released ``max_var_predict`` loop, restated for one dimension: the threshold, the
    rule and the dev predictions."""
    threshold, best_threshold, best_acc, rule = np.mean(train), 0, 0, 0
    for epsilon in np.linspace(-50, 50, 201):
        preds = np.where(train <= threshold + epsilon, 0, 1)
        acc = accuracy_score(preds, train_labels)
        if max(acc, 1 - acc) > best_acc:
            best_acc = max(acc, 1 - acc)
            best_threshold = threshold + epsilon
            rule = np.argmax([acc, 1 - acc])
    if rule == 0:
        predicted = np.where(dev <= best_threshold, 0, 1)
    else:
        predicted = np.where(dev >= best_threshold, 0, 1)
    return best_threshold, int(rule), predicted


def labelled_cloud(classes: int, seed: int = 0, n: int = 120, d: int = 6):
    """Points whose dimension 1 carries the label, with integer-rounded dimension 4 (ties)."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(classes, (n,), generator=generator)
    X = torch.randn(n, d, generator=generator, dtype=torch.float64)
    X[:, 1] += 1.5 * y
    X[:, 4] = X[:, 4].round()
    return X, y


@pytest.mark.parametrize("classes", [2, 3])
def test_exact_stumps_reach_the_brute_force_optimum_and_predict_what_they_fit(classes):
    X, y = labelled_cloud(classes)
    stumps = exact_stumps(X, y, classes)
    predicted = stumps.predict(X)
    for dim in range(X.shape[1]):
        best = brute_force_best_accuracy(X[:, dim].numpy(), y.numpy(), classes)
        assert stumps.train_accuracy[dim].item() == pytest.approx(best)
        assert (predicted[:, dim] == y).double().mean().item() == pytest.approx(best)
    assert stumps.train_accuracy.argmax().item() == 1


def test_a_stump_is_never_worse_than_the_majority_class():
    X = torch.zeros(10, 2, dtype=torch.float64)  # nothing to split on
    y = torch.tensor([1, 1, 1, 0, 0, 1, 1, 0, 1, 1])
    stumps = exact_stumps(X, y, 2)
    assert stumps.train_accuracy.tolist() == [0.7, 0.7]
    assert (stumps.predict(X) == 1).all()


def test_the_exact_threshold_is_the_midpoint_of_the_split():
    X = torch.tensor([[0.1], [0.2], [0.6], [0.7]], dtype=torch.float64)
    stumps = exact_stumps(X, torch.tensor([0, 0, 1, 1]), 2)
    assert stumps.threshold.item() == pytest.approx(0.4)
    assert (stumps.below.item(), stumps.above.item(), stumps.train_accuracy.item()) == (0, 1, 1.0)
    flipped = exact_stumps(X, torch.tensor([1, 1, 0, 0]), 2)
    assert (flipped.below.item(), flipped.above.item()) == (1, 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grid_stumps_reproduce_the_released_loop(seed):
    X, y = labelled_cloud(2, seed)
    X = X * 20  # values spanning tens of units, where the released grid has something to find
    dev, _ = labelled_cloud(2, seed + 10)
    dev = dev * 20
    stumps = grid_stumps(X, y)
    predicted = stumps.predict(dev)
    for dim in range(X.shape[1]):
        threshold, rule, expected = released_max_var_predict(
            X[:, dim].numpy(), y.numpy(), dev[:, dim].numpy()
        )
        assert stumps.threshold[dim].item() == pytest.approx(threshold)
        assert stumps.inclusive[dim].item() == (rule == 0)
        np.testing.assert_array_equal(predicted[:, dim].numpy(), expected)


def test_the_released_rule_1_quirk_at_the_threshold_is_kept():
    # Rule 1 fits "class 1 at or below t" but predicts class 0 at exactly t on dev, as released.
    X = torch.tensor([[-1.0], [-1.0], [1.0], [1.0]], dtype=torch.float64)
    stumps = grid_stumps(X, torch.tensor([1, 1, 0, 0]))
    threshold = stumps.threshold.item()
    assert not stumps.inclusive.item()
    at_threshold = torch.tensor([[threshold]], dtype=torch.float64)
    _, _, expected = released_max_var_predict(X[:, 0].numpy(), np.array([1, 1, 0, 0]), [threshold])
    assert stumps.predict(at_threshold).item() == expected[0] == 0


def test_the_grid_is_coarser_than_exact_on_values_within_a_unit():
    X, y = labelled_cloud(2)
    X = X / 10  # MiniLM-like: every value within about a unit
    assert (exact_stumps(X, y, 2).train_accuracy[1] > grid_stumps(X, y).train_accuracy[1]).item()


def test_fit_stumps_chooses_the_search_and_refuses_others():
    X, y = labelled_cloud(2)
    assert torch.equal(fit_stumps(X, y, 2, "grid").threshold, grid_stumps(X, y).threshold)
    with pytest.raises(ValueError, match="search must be one of"):
        fit_stumps(X, y, 2, "fast")
    with pytest.raises(ValueError, match="binary tasks"):
        grid_stumps(X, y + 1)


def test_lines_are_each_dimensions_least_squares_fit():
    X, _ = labelled_cloud(2)
    y = 3 * X[:, 2] - 1 + 0.1 * X[:, 0]
    lines = fit_lines(X, y)
    for dim in range(X.shape[1]):
        slope, intercept = np.polyfit(X[:, dim].numpy(), y.numpy(), 1)
        assert lines.slope[dim].item() == pytest.approx(slope)
        assert lines.intercept[dim].item() == pytest.approx(intercept)
    constant = fit_lines(torch.ones(5, 1), torch.arange(5.0))
    assert constant.slope.item() == 0 and constant.intercept.item() == pytest.approx(2.0)
