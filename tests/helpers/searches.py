"""A search driven in-process as the optuna sweeper drives it, its jobs handed to a launcher that
writes each job's run folder as a training run leaves it, scored by the test: the search's tests
count trials, runs and their states exactly, without trainings."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hydra_plugins.isotune_launcher._hydra_search import (
    dry_run_search,
    job_overrides,
    search_settings,
)
from isotune.search.loop import check_reports_complete, run_searches
from isotune.search.search import Search
from isotune.training.config_checks import RULES, raise_problems, rule_problems
from tests.conftest import compose_train_config
from tests.helpers.fake_runs import completed, write_run

Score = Callable[[dict[str, str], int], float | None]


class FakeLauncher:
    """Writes each job's run folder as a training run leaves it, with ``score(overrides, seed)``
    as its best dev accuracy (None: the job crashed), and counts the jobs and launches. At launch
    ``stop_at_launch`` it is stopped as by Ctrl-C before any job; at launch ``unended_at_launch``
    it raises as submitit's launcher does at the first job SLURM killed, leaving the batch's
    first job ``interrupted`` and its second ``running``."""

    def __init__(
        self,
        folder: Path,
        score: Score,
        stop_at_launch: int | None = None,
        unended_at_launch: int | None = None,
    ) -> None:
        self.folder = folder
        self.score = score
        self.stop_at_launch = stop_at_launch
        self.unended_at_launch = unended_at_launch
        self.launches: list[list[list[str]]] = []

    @property
    def jobs(self) -> list[list[str]]:
        return [job for launch in self.launches for job in launch]

    def __call__(self, jobs: list[list[str]]) -> None:
        if self.stop_at_launch is not None and len(self.launches) == self.stop_at_launch:
            raise KeyboardInterrupt
        unended = len(self.launches) == self.unended_at_launch
        self.launches.append(jobs)
        for index, overrides in enumerate(jobs):
            values = dict(o.split("=", 1) for o in overrides)
            job_dir = self.folder / values["hydra.sweep.subdir"]
            task_overrides = [o for o in overrides if not o.startswith("hydra.")]
            seed = int(values["seed"])
            score = self.score(values, seed)
            if unended and index < 2:
                result = {"status": ("interrupted", "running")[index], "error": None}
            elif score is None:
                result = {"status": "failed", "error": "NonFiniteLossError: loss is nan"}
            else:
                result = {**completed("minilm", "none", "rte", seed, score), "learned": score > 0.5}
            write_run(job_dir, task_overrides, result)
        if unended:
            raise RuntimeError("Job 7_0 (task: 0) failed during processing with trace: ...")


def weight_score(values: dict[str, str], seed: int) -> float | None:
    """Best at weight -0.1, a little noise by seed; the baseline (reg=none) scores 0.6."""
    if values.get("reg") == "none":
        return 0.6 + seed / 1000
    weight = float(values["reg.weight"])
    return 0.7 - abs(math.log10(abs(weight)) + 1) / 10 - (weight > 0) / 10 + seed / 1000


@functools.cache
def istar_config(*overrides: str) -> DictConfig:
    """The composed config of `hparams_search=istar <overrides>`, composed once (a search reads
    it and never changes it)."""
    return compose_train_config(["hparams_search=istar", *overrides])


class SearchRun:
    """One search driven as the sweeper drives it, its batches handed to a fake launcher."""

    def __init__(self, search: Search, launch: FakeLauncher, n_jobs: int) -> None:
        self.search, self.launch, self.n_jobs = search, launch, n_jobs

    def run(self) -> None:
        folder = self.search.folder
        run_searches(
            [self.search], lambda jobs: self.launch(job_overrides(jobs, folder)), self.n_jobs
        )
        check_reports_complete([self.search])


def make_search(
    folder: Path, launch: FakeLauncher, *overrides: str, arguments=(), **settings
) -> SearchRun:
    """The search `python train.py -m hparams_search=istar <overrides> <arguments>` runs, its
    dry run composing the jobs' configs as the sweeper's does (a bad option or value raises)."""
    cfg = istar_config(*overrides)
    sweeper = {**OmegaConf.to_container(cfg.hydra.sweeper, resolve=True), **settings}
    search_config = search_settings(cfg, sweeper, list(arguments), folder)
    search = Search(search_config, folder, OmegaConf.to_yaml(cfg))

    def compose(job: list[str]) -> DictConfig:
        job_config = compose_train_config(["hparams_search=istar", *overrides, *job])
        raise_problems(rule_problems(job_config, RULES))
        return job_config

    dry_run_search(cfg, search_config, compose)
    return SearchRun(search, launch, sweeper["n_jobs"])


# two tuning seeds, three report seeds, no pruner: each trial runs every seed
SMALL = {"seeds": [1, 2], "report_seeds": [11, 12, 13], "pruner": None}
