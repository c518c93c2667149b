"""Hydra sweeper ``optuna`` (``hydra/sweeper=optuna``): Optuna >= 4 tunes on tuning seeds, and the
report speaks on others (docs/search.md).

The official ``hydra-optuna-sweeper``'s keys and ``params`` grammar, with a trial that is a
configuration over ``seeds``. As the official plugin delegates to its ``_impl.py``, this is what
Hydra's plugin scan imports on every run of train.py: the settings. The search runs in
:mod:`._hydra_search`, imported (Optuna with it) only then.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper

from hydra_plugins.isotune_launcher.search_schema import KeepsItsLauncher, SearchSweeperConf


@dataclass
class OptunaSweeperConf(SearchSweeperConf):
    """A plain search's settings: every search's (:class:`SearchSweeperConf`), its space, its
    baseline and where its trials are stored."""

    _target_: str = "hydra_plugins.isotune_launcher.optuna_sweeper.OptunaSweeper"
    storage: str | None = None  # null: optuna_journal.log in the search folder; or a file or URL
    params: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None  # overrides; null: the searched keys at config values


ConfigStore.instance().store(
    group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="isotune"
)


class OptunaSweeper(KeepsItsLauncher, Sweeper):
    def sweep(self, arguments: list[str]) -> Any:
        from hydra_plugins.isotune_launcher._hydra_search import run_search  # not at the scan

        return run_search(self, arguments)
