"""Hydra sweeper ``study`` (``hydra/sweeper=study``, set by a ``study=`` preset): arms x tasks, each
(task, arm) a search at the same budget, their jobs sharing the launcher's slots (docs/study.md).

The plan and its checks are :mod:`isotune.study.plan`'s, run before any job; then the whole study
must fit on its disk, as every sweep (each job sized as the baseline arm's run on its task). Each
(task, arm) is a :class:`~isotune.search.search.Search` in ``<study folder>/<task>/<arm>``, with
no baseline of its own: the baseline is an arm, tuned as the others, and every arm of a task runs
its best trial on the same report seeds. :func:`isotune.search.loop.run_searches` runs them all,
their trials in flight together (``n_jobs``), so a study keeps every slot busy. The study folder
is locked for one process (the sweep's folder lock); typed again, the command continues every
search where it stopped, from the code and packages its runs so far were made with (another
environment is refused before any job, unless ``allow_mixed_environment``). At the end,
:mod:`isotune.study.report` writes the study report.

A ``task`` sweep on the command line (``task=rte,mrpc``) is the study's tasks, never searched;
another sweep there is refused (the arms say what is searched); a plain value applies to every
job.

Hydra's plugin scan imports this module on every run of train.py: it registers the settings
(:class:`~.search_schema.StudySweeperConf`, beside the search's, so that the study's driver reads
them without importing this module back); the study runs in :mod:`._study_search`, imported
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
