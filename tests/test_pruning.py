"""The search's pruner over seeds (docs/search.md#pruning-over-seeds): the default, composed as
`hparams_search=istar` sets it, simulated on equally good and clearly worse configurations
(isotune.search.pruning); WilcoxonPruner in the search loop is in test_search.py."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from hydra.utils import instantiate
from optuna.trial import TrialState

from isotune.search.pruning import NoiseGapPruner
from tests.conftest import compose_train_config

SEEDS, TRIALS, SEARCHES = 3, 20, 10


def pruned_shares(pruner_config: dict, worse_by: float, seed: int = 0) -> tuple[float, float]:
    """Simulated searches of ``TRIALS`` trials over ``SEEDS`` seeds, each seed's score N(mean, 1),
    every fourth trial from the fifth on ``worse_by`` lower; asked as the search asks, only while
    seeds remain. The shares of equal and of worse trials pruned."""
    rng = np.random.default_rng(seed)
    pruned = {False: [], True: []}
    for _ in range(SEARCHES):
        study = optuna.create_study(direction="maximize", pruner=instantiate(pruner_config))
        for number in range(TRIALS):
            worse = number >= 4 and number % 4 == 3
            scores = rng.normal(-worse_by if worse else 0.0, 1.0, SEEDS)
            trial, stopped = study.ask(), False
            for step, score in enumerate(scores):
                trial.report(float(score), step)
                if step < SEEDS - 1 and trial.should_prune():
                    stopped = True
                    break
            if stopped:
                study.tell(trial, state=TrialState.PRUNED)
            else:
                study.tell(trial, float(np.median(scores)))
            pruned[worse].append(stopped)
    return float(np.mean(pruned[False])), float(np.mean(pruned[True]))


def test_the_default_pruner_rarely_prunes_equal_trials_and_prunes_clearly_worse_ones():
    """The former default (WilcoxonPruner, p 0.3) pruned about half of equally good trials: the
    best trial's seeds are biased upwards, and at two seeds p 0.25 is all a rank test gives."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a line per trial otherwise
    try:
        config = compose_train_config(["hparams_search=istar"]).hydra.sweeper.pruner
        equal, worse = pruned_shares(dict(config), worse_by=4.0)
    finally:
        optuna.logging.set_verbosity(verbosity)
    assert equal < 0.10
    assert worse > 0.8


def test_the_noise_gap_pruner_reads_the_gap_in_noise_sds():
    study = optuna.create_study(direction="maximize", pruner=NoiseGapPruner(gap_sd=3.0))
    for scores in ([0.70, 0.72, 0.74], [0.68, 0.70, 0.72]):  # the noise: SD 0.02 within a trial
        trial = study.ask()
        for step, score in enumerate(scores):
            trial.report(score, step)
        study.tell(trial, float(np.median(scores)))
    # Best: 0.70, 0.72 on the first two seeds. 3 SD of a gap of two 2-seed means: 0.06.
    for scores, prune in (([0.65, 0.66], False), ([0.60, 0.62], True)):
        trial = study.ask()
        for step, score in enumerate(scores):
            trial.report(score, step)
        assert study.pruner.prune(study, study._storage.get_trial(trial._trial_id)) is prune
        study.tell(trial, state=TrialState.FAIL)
    with pytest.raises(ValueError, match="gap_sd"):
        NoiseGapPruner(gap_sd=0)
