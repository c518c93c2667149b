"""What one search runs under, as plain values, and the checks on them before any job runs.

The Hydra sweeper reads them from ``hydra.sweeper`` (docs/search.md's settings table, where their
defaults live) and a driver of several searches builds one per search; the messages name the keys
a user types. :meth:`SearchSettings.record` is what makes the trials of one study comparable: a
study continued under another record is refused (:mod:`isotune.search.optuna_study`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from isotune.errors import IsotuneError
from isotune.search.checks import check_no_axis, check_seeds, ranking_settings
from isotune.search.space import SearchSpace

SEED_KEY = "seed"  # what each job of a trial varies


@dataclass(frozen=True)
class SearchSettings:
    """One search: its space, seeds, baseline, budget, failure rule, study and sampler.

    ``make_sampler(seed)`` makes the sampler (``seed`` None: unseeded); ``sampler_seed`` is the
    seed the user gave it (None: none). ``pruner`` is an Optuna pruner, None for none.
    ``baseline`` is the baseline's overrides, the fixed ones included. ``tag_runs``: tag each
    run with the search and its trial (``logger=wandb``)."""

    space: SearchSpace
    seeds: tuple[int, ...]
    report_seeds: tuple[int, ...]
    baseline: tuple[str, ...]
    direction: str
    n_trials: int
    max_failure_rate: float
    study_name: str
    storage: str | None
    make_sampler: Callable[[int | None], Any]
    sampler_seed: int | None
    pruner: Any
    tag_runs: bool = False

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"

    def check(self) -> None:
        """Refuse (:class:`IsotuneError`) settings no search can run under, in one message."""
        if not self.space.searched:
            raise IsotuneError(
                "The search has no searched key: hydra.sweeper.params holds no sweep. Fix: "
                "search one, e.g. 'optim.lr=tag(log, interval(1e-5, 1e-3))' on the command line, "
                "or use an hparams_search= preset."
            )
        check_no_axis(self.space)
        if not isinstance(self.n_trials, int) or self.n_trials < 1:
            raise IsotuneError(
                f"hydra.sweeper.n_trials={self.n_trials} asks for no trial. Fix: "
                "hydra.sweeper.n_trials=20 (any integer from 1)."
            )
        if self.direction not in ("maximize", "minimize"):
            raise IsotuneError(
                f"hydra.sweeper.direction={self.direction} is not maximize or minimize. Fix: "
                "hydra.sweeper.direction=maximize (a dev score)."
            )
        if not 0 <= self.max_failure_rate <= 1:
            raise IsotuneError(
                f"hydra.sweeper.max_failure_rate={self.max_failure_rate} is not a share of "
                "trials. Fix: a value from 0 to 1, e.g. hydra.sweeper.max_failure_rate=0.25."
            )
        check_seeds(list(self.seeds), list(self.report_seeds))
        keys = [key.key for key in self.space.searched]
        keys += [text.split("=", 1)[0] for text in self.space.fixed]
        for key in keys:
            if key.lstrip("+~").split("@")[0] == SEED_KEY:
                raise IsotuneError(
                    f"{key} is set by the search: each trial runs on hydra.sweeper.seeds and the "
                    "report on hydra.sweeper.report_seeds. Fix: drop it, and set those instead."
                )

    def record(self) -> dict[str, Any]:
        """What ranks the trials of one study (:func:`~isotune.search.checks.ranking_settings`).
        The folder is named by the study, not by these, so a command with others would continue
        the study and rank trials run under different ones."""
        return ranking_settings(self.space, self.seeds, self.direction)
