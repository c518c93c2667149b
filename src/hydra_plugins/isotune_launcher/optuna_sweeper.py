"""Hydra sweeper ``optuna`` (``hydra/sweeper=optuna``): Optuna >= 4 tunes on tuning seeds, and the
report speaks on others (docs/search.md).

The official ``hydra-optuna-sweeper``'s keys and ``params`` grammar, with a trial that is a
configuration over ``seeds``, each seed one job through the chosen launcher. As the official
plugin's ``optuna_sweeper.py`` delegates to its ``_impl.py``, this is the adapter: the settings,
their defaults and the Hydra plumbing; the search itself (ask, launch, tell, the held-out report)
is :mod:`isotune.search`, without Hydra (:mod:`.hydra_search` reads the config into it). It stops
as every sweep stops (:mod:`.stopping`), and checks its disk and its jobs' folders as every sweep
does.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from hydra_plugins.isotune_launcher.hydra_search import (
    HydraLaunch,
    KeepsItsLauncher,
    SearchSweeperConf,
    check_models_available,
    check_search_fits,
    check_tuning_split,
    compose_checked,
    dry_run_search,
    preview_search,
    search_settings,
)
from hydra_plugins.isotune_launcher.stopping import stops_with_a_summary
from isotune.search.loop import check_reports_complete, run_searches
from isotune.search.search import Search
from isotune.study.plan import check_task_offline
from isotune.sweeps.environment import check_continued_in_one_environment

log = logging.getLogger(__name__)

AGAIN = "Type the same command again to continue the search (docs/search.md)."


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
        assert self.config is not None and self.hydra_context is not None
        config, loader = self.config, self.hydra_context.config_loader
        folder = Path(str(config.hydra.sweep.dir)).resolve()
        log.info(f"Search folder: {folder}")
        with stops_with_a_summary(folder, self.launcher, AGAIN):
            settings = search_settings(config, self.settings, arguments, folder)
            settings.check()  # as its Search will, but before the dry run, and writing nothing
            baseline_job = dry_run_search(
                config, settings, lambda o: compose_checked(config, loader, o)
            )
            check_models_available([baseline_job])
            glue_dir = OmegaConf.select(config, "paths.glue_dir")
            check_task_offline(
                str(baseline_job.task.name),
                OmegaConf.to_container(baseline_job.task, resolve=True),
                glue_dir,
            )
            check_tuning_split(baseline_job, settings.tuning_overrides, glue_dir, folder)
            n_jobs = self.settings["n_jobs"]
            check_search_fits(config, settings, n_jobs, folder, baseline_job)
            check_continued_in_one_environment(
                folder,
                "hydra.sweeper.allow_mixed_environment",
                self.settings["allow_mixed_environment"],
            )
            if self.settings["preview"]:
                preview_search(config, settings, n_jobs, folder, baseline_job)
                return
            search = Search(settings, folder, OmegaConf.to_yaml(config))
            run_searches([search], HydraLaunch(self.launcher, folder), n_jobs)
            check_reports_complete([search])
