"""The search's default pruner over seeds: stop a trial whose seeds so far lie clearly below the
best trial's on the same seeds, clearly meaning by more than ``gap_sd`` noise SDs
(docs/search.md#how-it-works explains why not Optuna's ``WilcoxonPruner``: the winner's curse, and
at 3 seeds it pruned about half of equally good trials).

It compares means: the gap between the best trial's mean and this trial's over the k seeds both
ran, against the seeds' noise SD pooled over the complete trials (a seed effect shared by every
trial only inflates it, which prunes less). It prunes when

    gap > gap_sd * sd * sqrt(2 / k),

the gap of two means of k independent seeds being sd * sqrt(2 / k) wide, and not before
``min_seeds`` seeds, nor before the complete trials give ``min_df`` degrees of freedom of noise.
Set from the simulation of ``tests/test_pruning.py`` (scores N(mean, 1) per seed, 20 trials):
with ``gap_sd`` 3 and ``min_seeds`` 2, about 2% of equally good trials were pruned over 3 seeds,
and 80-100% of those 3 SD worse; ``gap_sd`` 2.5 pruned 5-10% of the equal ones. Optuna only.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState


class NoiseGapPruner(BasePruner):
    """Prune a trial more than ``gap_sd`` noise SDs below the best on its seeds (see the module
    docstring); each seed is reported with its index as the step."""

    def __init__(self, gap_sd: float = 3.0, min_seeds: int = 2, min_df: int = 4) -> None:
        if gap_sd <= 0 or min_seeds < 1 or min_df < 1:
            raise ValueError(
                f"NoiseGapPruner needs gap_sd > 0, min_seeds >= 1 and min_df >= 1, got gap_sd="
                f"{gap_sd}, min_seeds={min_seeds}, min_df={min_df}"
            )
        self.gap_sd, self.min_seeds, self.min_df = gap_sd, min_seeds, min_df

    def prune(self, study: Any, trial: FrozenTrial) -> bool:
        scores = trial.intermediate_values
        if len(scores) < self.min_seeds:
            return False
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        sd = noise_sd(complete, self.min_df)
        if sd is None:
            return False
        best = study.best_trial.intermediate_values
        shared = [step for step in scores if step in best]
        if not shared:
            return False
        gap = statistics.fmean(best[s] for s in shared) - statistics.fmean(
            scores[s] for s in shared
        )
        if study.direction == StudyDirection.MINIMIZE:
            gap = -gap
        return gap > self.gap_sd * sd * math.sqrt(2 / len(shared))


def noise_sd(trials: list[FrozenTrial], min_df: int) -> float | None:
    """The seeds' SD within a trial, pooled over ``trials``; None below ``min_df`` degrees of
    freedom (too few complete trials to know the noise)."""
    squares, df = 0.0, 0
    for trial in trials:
        scores = list(trial.intermediate_values.values())
        if len(scores) > 1:
            mean = statistics.fmean(scores)
            squares += sum((score - mean) ** 2 for score in scores)
            df += len(scores) - 1
    return math.sqrt(squares / df) if df >= min_df else None
