"""What one search runs under, as plain values, and the checks on them before any job runs.

The Hydra sweeper reads them from ``hydra.sweeper`` (docs/search.md's settings table, where their
defaults live) and a driver of several searches builds one per search; the messages name the keys
a user types. :meth:`SearchSettings.record` is what makes the trials of one study comparable: a
study continued under another record is refused (:mod:`isotune.search.optuna_study`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from isotune.errors import IsotuneError
from isotune.search.checks import check_no_axis, check_seeds, key_name, ranking_settings
from isotune.search.space import SearchSpace

SEED_KEY = "seed"  # what each job of a trial varies
# seed and the keys that follow it (${seed}): fixed, one would be shared by every tuning and report
# run, and the report's seeds would not be held out in what it sets.
SEED_KEYS = (SEED_KEY, "seed_init", "seed_data")
# hydra.sweeper.tune_on: the data that chooses a trial (docs/search.md, "Data that tunes apart from
# data that reports"); with train_split the report runs take their last epoch: dev chooses nothing.
TUNE_ON = {"dev": (), "train_split": ("data.tuning_split=true",)}
REPORTED_ON = {"dev": (), "train_split": ("select_epoch=last",)}  # what its report runs add


@dataclass(frozen=True)
class SearchSettings:
    """One search: its space, seeds, baseline, budget, failure rule, study and sampler
    (docs/search.md#settings for the keys a user types).

    ``sampler`` is the sampler's config as given, which the study records; ``make_sampler(seed)``
    makes it. ``baseline`` None: no baseline runs (a study's search, whose baseline is an arm).
    ``report_overrides``: what only the report's runs add besides :data:`REPORTED_ON`'s."""

    space: SearchSpace
    seeds: tuple[int, ...]
    report_seeds: tuple[int, ...]
    baseline: tuple[str, ...] | None
    direction: str
    n_trials: int
    max_failure_rate: float
    study_name: str
    storage: str | None
    make_sampler: Callable[[int | None], Any]
    sampler: Mapping[str, Any]
    pruner: Any
    tag_runs: bool = False
    wandb_group: str | None = None
    retry_failed: bool = False
    tune_on: str = "dev"
    report_overrides: tuple[str, ...] = ()

    @property
    def tuning_overrides(self) -> tuple[str, ...]:
        """What every tuning job adds to its trial's overrides, and no report job."""
        return TUNE_ON[self.tune_on]

    @property
    def report_job_overrides(self) -> tuple[str, ...]:
        """What every report job adds to its configuration's overrides, and no tuning job."""
        return (*REPORTED_ON[self.tune_on], *self.report_overrides)

    def wandb_overrides(self, where: str, report: bool) -> list[str]:
        """With ``logger=wandb``, each run tagged with the search and ``where`` it runs
        (docs/search.md#what-it-writes); a study's search groups by arm (``wandb_group``)."""
        if not self.tag_runs:
            return []
        tags = [f"search-{self.study_name}", where.replace("/", "-")]
        overrides = [f"logger.wandb.tags=[{','.join(repr(tag) for tag in tags)}]"]
        if self.wandb_group:
            overrides += [
                f"logger.wandb.group={self.wandb_group}",
                f"logger.wandb.job_type={'report' if report else 'tuning'}",
            ]
        return overrides

    @property
    def sampler_seed(self) -> int | None:
        """The seed the user gave the sampler (None: none)."""
        return self.sampler.get("seed")

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
        if self.tune_on not in TUNE_ON:
            raise IsotuneError(
                f"hydra.sweeper.tune_on={self.tune_on} is not one of {list(TUNE_ON)}. Fix: "
                "hydra.sweeper.tune_on=train_split (choose on a split carved from train, report "
                "on dev) or dev (choose and report on dev)."
            )
        check_seeds(list(self.seeds), list(self.report_seeds))
        refuse_fixed_seeds(fixed_seeds(self.space))

    def record(self) -> dict[str, Any]:
        """What ranks the trials of one study (:func:`~isotune.search.checks.ranking_settings`).
        The folder is named by the study, not by these, so a command with others would continue
        the study and rank trials run under different ones."""
        ranking = ranking_settings(self.space, self.seeds, self.direction, self.sampler)
        return {**ranking, "tune_on": self.tune_on}


def fixed_seeds(space: SearchSpace) -> list[str]:
    """The searched or fixed overrides of ``space`` that set a key of :data:`SEED_KEYS`."""
    texts = [f"{key.key}=<searched>" for key in space.searched] + list(space.fixed)
    return [text for text in texts if key_name(text.split("=", 1)[0]) in SEED_KEYS]


SEARCH_PLACES = (
    "the command line, the preset, hydra.sweeper.baseline, or the option's file in conf/"
)
STUDY_PLACES = (
    "the command line, the preset, an arm's entry (hydra.sweeper.catalog.<arm>), or the option's "
    "file in conf/"
)


def refuse_fixed_seeds(fixed: list[str], places: str = SEARCH_PLACES) -> None:
    """Refuse, in one message naming each, seeds fixed for every run of a search (``fixed``:
    each as ``key=value`` and where it is set); ``places``: where a seed can be set, as the
    fix names them (a study has no ``hydra.sweeper.baseline``)."""
    if not fixed:
        return
    raise IsotuneError(
        f"{', '.join(fixed)}: set by the search, not by hand. Each trial runs on "
        "hydra.sweeper.seeds and the report on hydra.sweeper.report_seeds, and seed_init and "
        "seed_data follow seed (${seed}), so that every report run differs from every tuning "
        "run in its initialisation and batch order; fixed, they would be shared by all of them. "
        f"Fix: drop them where they are set ({places}), and set those seeds instead."
    )
