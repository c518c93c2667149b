"""What the search's and the study's sweepers share at Hydra's plugin scan: the ``hydra.sweeper``
schema both extend (the study's too, so that its driver reads it without importing the sweeper
back) and the launcher both keep. The scan imports every plugin module on every run
of train.py, a plain one included, so nothing here imports the search: the sweepers import it
(:mod:`._hydra_search`, Optuna with it) only when a search runs.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.plugins import Plugins
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.isotune_launcher.preview import PreviewConf


def default_pruner() -> dict[str, Any]:
    """The pruner over seeds of every search, plain or a study's (``hydra.sweeper.pruner``; null:
    no pruning, every seed of a batch at once): one default, so that a study's searches prune as
    a plain search does."""
    return {
        "_target_": "isotune.search.pruning.NoiseGapPruner",
        "gap_sd": 3.0,  # set by simulation: ~2% of equal trials pruned, most 3 SD worse ones
    }


@dataclass
class SearchSweeperConf(PreviewConf):
    """The ``hydra.sweeper`` settings of every search, a plain one's and each of a study's: one
    schema, extended by both sweepers' configs, so that a search's setting is declared, defaulted
    and documented once (docs/search.md's settings table) and :func:`settings_of` reads it for
    both."""

    _recursive_: bool = False  # the sampler and pruner stay configs: the sampler is made per trial
    defaults: list[Any] = field(default_factory=lambda: ["_self_", {"sampler": "tpe"}])
    sampler: Any = None  # conf/hydra/sweeper/sampler/ (random: i.i.d.), or any by _target_
    pruner: Any = field(default_factory=default_pruner)  # over seeds; null: no pruning
    direction: str = "maximize"  # the best dev primary metric
    study_name: str | None = None  # null: the search's (or the study's) folder's name
    n_trials: int = 20  # per search: a study's (task, arm)
    n_jobs: int = 1  # trials asked and launched at once (a study: over all its searches)
    max_failure_rate: float = 0.25  # share of n_trials that may FAIL: one more stops the search
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])  # tuning seeds
    report_seeds: list[int] = field(default_factory=lambda: [101, 102, 103, 104, 105])
    allow_mixed_environment: bool = False  # continue from other code or packages than its runs'
    retry_failed: bool = False  # run each FAILED trial's configuration again, as a new trial
    tune_on: str = "dev"  # train_split: tuning runs choose on a split of train (data.tuning_split)


@dataclass
class StudySweeperConf(SearchSweeperConf):
    """A study's settings: every search's (:class:`SearchSweeperConf`), each (task, arm) one
    search under them, and the arms and tasks."""

    _target_: str = "hydra_plugins.isotune_launcher.study_sweeper.StudySweeper"
    catalog: dict[str, Any] = field(default_factory=dict)  # arm: {overrides, params}
    arms: list[str] = field(default_factory=list)  # chosen from the catalog
    baseline_arm: str = "none"
    lr: str = "tag(log, interval(1e-5, 2e-4))"  # searched by every arm
    tasks: list[str] = field(default_factory=lambda: ["rte"])  # task=... replaces them
    # The report runs keep their best model (checkpoint.keep=slim) where the study's runs keep
    # none: `python -m isotune.submission <study folder>` then submits its winners.
    keep_report_models: bool = False
    # The one comparison stated before the runs, answered first in the report on its own seeds:
    # {task, arm, baseline (null: baseline_arm), seeds (among report_seeds), level, stated_at},
    # and for a sequential test looks (pair counts), spending (obf, pocock), margin (points).
    stated: Any = None
    # A plain search's (an hparams_search= preset sets them): here only to be refused by name,
    # not as a composition error without a fix.
    params: Any = None
    baseline: Any = None


class KeepsItsLauncher:
    """What the search's and the study's sweepers share before they sweep: their settings as
    Hydra gives them, the composed config, and the launcher their jobs go to. A mixin, not a
    ``Sweeper``, so that Hydra's plugin scan registers only the two sweepers themselves."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
