"""Hydra sweeper ``study`` (``hydra/sweeper=study``, set by a ``study=`` preset): arms x tasks, each
(task, arm) a search at the same budget, their jobs sharing the launcher's slots (docs/study.md).

The plan is checked before any job (:mod:`isotune.study.plan`); each (task, arm) is a
:class:`~isotune.search.search.Search` in ``<study folder>/<task>/<arm>``, with the baseline an
arm tuned as the others, and :func:`isotune.search.loop.run_searches` runs them all together.
A ``task`` sweep on the command line is the study's tasks; another sweep there is refused.

Hydra's plugin scan imports this module on every run of train.py: it registers the settings
(:class:`~.search_schema.StudySweeperConf`); the study runs in :mod:`._study_search`, imported
only then (the search, Optuna and the study's statistics with it).
"""

from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper

from hydra_plugins.isotune_launcher.search_schema import KeepsItsLauncher, StudySweeperConf

ConfigStore.instance().store(
    group="hydra/sweeper", name="study", node=StudySweeperConf, provider="isotune"
)


class StudySweeper(KeepsItsLauncher, Sweeper):
    def sweep(self, arguments: list[str]) -> Any:
        from hydra_plugins.isotune_launcher._study_search import run_study  # not at the scan

        return run_study(self, arguments)
