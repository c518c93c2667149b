"""How much of a task one dimension of the sentence vector carries: the 1-D analysis of Rudman,
Chen & Eickhoff (*Outlier Dimensions Encode Task-Specific Knowledge*, EMNLP 2023, Section 3.2).

For every dimension j, a rule reading only ``x_j`` is fitted on training vectors and scored on
dev, every dimension at once as tensors (N points x d dims):

- **classification, ``search="exact"``**: a decision stump at its best training accuracy over
  every split point (one sort and cumulative counts: O(n log n)), threshold at the midpoint; with
  more than two classes each side predicts its own majority class;
- **classification, ``search="grid"``**: the released ``max_var_predict`` / ``all_var_predict``
  (binary only, thresholds ``mean(x_j) + linspace(-50, 50, 201)``, rule 1 predicting class 0
  where ``x_j >= t`` as released), kept to reproduce the released numbers: its steps of 0.5 are
  too coarse for dimensions spanning less than a unit, as MiniLM's do;
- **regression**: the least-squares line of the score on ``x_j``.

Pure torch; the caller scores the predictions with the task's own metric.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

SEARCHES = ("exact", "grid")
GRID_OFFSETS = torch.linspace(-50, 50, 201, dtype=torch.float64)  # the released code's epsilons


@dataclass(frozen=True)
class Stumps:
    """One threshold rule per dimension: ``below`` where ``x_j <= threshold`` (``< threshold``
    where ``inclusive`` is False), else ``above``."""

    threshold: Tensor  # (d,) float64
    below: Tensor  # (d,) class ids
    above: Tensor  # (d,) class ids
    inclusive: Tensor  # (d,) bool
    train_accuracy: Tensor  # (d,) float64

    def predict(self, X: Tensor) -> Tensor:
        """(N, d) class ids: each dimension's rule applied to its own column of ``X``."""
        X = X.to(torch.float64)
        at_or_below = torch.where(self.inclusive, self.threshold >= X, self.threshold > X)
        return torch.where(at_or_below, self.below, self.above)


def _checked(X: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    if X.ndim != 2 or y.shape != (len(X),) or len(X) < 1:
        raise ValueError(
            f"need (N, d) vectors and N labels, got {tuple(X.shape)} and {tuple(y.shape)}"
        )
    return X.detach().to(torch.float64).cpu(), y.detach().cpu()


def exact_stumps(X: Tensor, y: Tensor, num_classes: int) -> Stumps:
    """The best stump of every dimension over all split points (module docstring); ties go to the
    lowest threshold, then the lowest class id. The last candidate, "everything at or below the
    largest value", is the constant majority rule, so a stump is never worse than it."""
    X, y = _checked(X, y)
    n, d = X.shape
    values, order = X.sort(dim=0)
    counts = torch.nn.functional.one_hot(y[order], num_classes).cumsum(dim=0)  # (n, d, classes)
    below_best = counts.max(dim=2)
    above_best = (counts[-1] - counts).max(dim=2)
    correct = below_best.values + above_best.values  # (n, d): the split after each position
    # A split between two equal values separates nothing: only the last of a run counts.
    real_split = torch.ones(n, d, dtype=torch.bool)
    real_split[:-1] = values[1:] > values[:-1]
    position = correct.masked_fill(~real_split, -1).argmax(dim=0)  # the first best
    rows = position.unsqueeze(0)
    upper = values.gather(0, (position + 1).clamp(max=n - 1).unsqueeze(0)).squeeze(0)
    own = values.gather(0, rows).squeeze(0)
    last = position == n - 1
    below = below_best.indices.gather(0, rows).squeeze(0)
    return Stumps(
        threshold=torch.where(last, own, (own + upper) / 2),
        below=below,
        above=torch.where(last, below, above_best.indices.gather(0, rows).squeeze(0)),
        inclusive=torch.ones(d, dtype=torch.bool),
        train_accuracy=correct.gather(0, rows).squeeze(0).double() / n,
    )


def grid_stumps(X: Tensor, y: Tensor) -> Stumps:
    """The released brute-force search, for binary labels 0/1 (see the module docstring)."""
    X, y = _checked(X, y)
    if not set(y.unique().tolist()) <= {0, 1}:
        raise ValueError("the released grid search is for binary tasks (labels 0 and 1) only")
    thresholds = X.mean(dim=0) + GRID_OFFSETS.unsqueeze(1)  # (201, d)
    predicted_one = X.unsqueeze(0) > thresholds.unsqueeze(1)  # (201, n, d): rule 0's predictions
    accuracy = (predicted_one == y.bool().view(1, -1, 1)).double().mean(dim=1)  # (201, d)
    best = torch.maximum(accuracy, 1 - accuracy)
    # The released loop keeps a candidate only when it beats the best so far: the first best.
    choice = best.argmax(dim=0)
    chosen = accuracy.gather(0, choice.unsqueeze(0)).squeeze(0)
    rule = (1 - chosen > chosen).long()  # rule 1: the flipped prediction was the better one
    zeros = torch.zeros_like(rule)
    return Stumps(
        threshold=thresholds.gather(0, choice.unsqueeze(0)).squeeze(0),
        below=torch.where(rule == 0, zeros, 1 - zeros),
        above=torch.where(rule == 0, 1 - zeros, zeros),
        inclusive=rule == 0,  # released rule 1 on dev: class 0 where x >= t, class 1 below
        train_accuracy=best.gather(0, choice.unsqueeze(0)).squeeze(0),
    )


def fit_stumps(X: Tensor, y: Tensor, num_classes: int, search: str = "exact") -> Stumps:
    """The stumps of ``search``: ``exact`` (default) or the released ``grid``."""
    if search == "exact":
        return exact_stumps(X, y, num_classes)
    if search == "grid":
        return grid_stumps(X, y)
    raise ValueError(f"search must be one of {list(SEARCHES)}, got {search!r}")


@dataclass(frozen=True)
class Lines:
    """One least-squares line per dimension: ``slope * x_j + intercept``."""

    slope: Tensor  # (d,); 0 for a constant dimension
    intercept: Tensor  # (d,)

    def predict(self, X: Tensor) -> Tensor:
        return X.to(torch.float64) * self.slope + self.intercept


def fit_lines(X: Tensor, y: Tensor) -> Lines:
    """The least-squares line of ``y`` on each dimension of ``X`` (regression tasks)."""
    X, y = _checked(X, y)
    y = y.to(torch.float64)
    centred = X - X.mean(dim=0)
    spread = centred.square().sum(dim=0)
    slope = torch.where(spread > 0, (centred * (y - y.mean()).unsqueeze(1)).sum(dim=0), 0.0)
    slope = slope / spread.where(spread > 0, 1.0)
    return Lines(slope=slope, intercept=y.mean() - slope * X.mean(dim=0))
