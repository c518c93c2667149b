"""Hydra sweeper ``isotune`` (conf/hydra/default.yaml): the basic sweeper, with an account
(docs/faults.md#in-a-sweep, docs/sweeps.md#growing-a-sweep).

Hydra's basic sweeper re-raises the first failed job's error as a traceback of the whole sweep
and stops before later batches; here the launcher's returns are kept aside and handed to it as
completed, so that only the summary (:mod:`isotune.sweeps.summary`) speaks. Each job runs in the
folder that holds its configuration (:mod:`isotune.sweeps.job_folders`): Hydra's numbering by place
would start a grown sweep's jobs in other configurations' folders. Hydra's ``run_job`` writes
``.hydra/*.yaml`` and opens ``train.log`` before any callback can check the folder, so a job whose
folder is not its own, or holds a link leading out, is refused here, before the launcher.
"""

import dataclasses
import itertools
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from hydra_plugins.isotune_launcher.preview import PreviewConf, folder_line, say_preview
from hydra_plugins.isotune_launcher.stopping import stops_with_a_summary
from isotune.errors import IsotuneError
from isotune.record.folder_links import check_links_stay_inside, record_refusal
from isotune.record.results import RESULTS_FILE
from isotune.record.same_run import result_overrides
from isotune.sweeps.job_folders import job_folders, recorded_run
from isotune.sweeps.runs import Run
from isotune.sweeps.slurm_jobs import check_no_live_jobs
from isotune.sweeps.summary import summarize_sweep
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)

NUMBERED = "${hydra.job.num}"  # hydra.sweep.subdir as conf/hydra/default.yaml sets it


@dataclass
class SummarizingSweeperConf(BasicSweeperConf, PreviewConf):
    _target_: str = "hydra_plugins.isotune_launcher.summarizing_sweeper.SummarizingSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="isotune", node=SummarizingSweeperConf, provider="isotune"
)


@dataclass(frozen=True)
class _Job:
    """One job of the sweep as planned before any starts."""

    overrides: list[str]
    # Composed as the launcher will compose it (composing one takes a noticeable fraction of a
    # second, so it is done once), its folder set as hydra.runtime.output_dir.
    config: DictConfig
    placed: list[str]  # the override that puts it in its folder; [] where subdir is the user's
    run: Run | None  # what its folder records
    refused: str | None  # why it may not start in that folder, which is not its own

    @property
    def folder(self) -> str:
        return str(self.config.hydra.runtime.output_dir)

    @property
    def completed(self) -> bool:
        """Whether it completed before with these very overrides (a sweep typed again): it is not
        launched. One whose folder holds it completed with other bookkeeping (another
        ``paths.glue_dir``, ``write_test_predictions=true``) is, and its run says what stands."""
        return (
            self.refused is None
            and self.run is not None
            and self.run.completed
            and set(self.run.overrides) == set(self.overrides)
        )


class _KeepingLauncher:
    """Runs each batch on the real launcher and keeps its returns; tells the basic sweeper every
    job completed. A job completed or refused before it starts (:meth:`unlaunched`) is kept out
    of the launcher's hands, and the jobs around it are launched with their own numbers."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.returns: list[Sequence[JobReturn]] = []
        self.jobs: dict[int, _Job] = {}  # by job number, planned by the sweeper

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        numbers = range(initial_job_idx, initial_job_idx + len(job_overrides))
        unlaunched = [self.unlaunched(number) for number in numbers]
        returns: list[JobReturn] = []
        start = 0
        for kept_out, group in itertools.groupby(unlaunched, key=lambda job: job is not None):
            size = len(group := list(group))
            if kept_out:
                returns += group
            else:
                batch = [
                    [*job.overrides, *job.placed]
                    for job in (self.jobs[n] for n in numbers[start : start + size])
                ]
                returns += self.launcher.launch(batch, initial_job_idx=initial_job_idx + start)
            start += size
        self.returns.append(returns)
        return [
            dataclasses.replace(job, status=JobStatus.COMPLETED, _return_value=None)
            for job in returns
        ]

    def unlaunched(self, number: int) -> JobReturn | None:
        """The return of job ``number`` where it is not launched (completed before, or refused);
        None: launch it."""
        job = self.jobs[number]
        if job.completed:
            log.info(f"#{number} : {' '.join(filter_overrides(job.overrides))} completed before")
            return JobReturn(
                overrides=job.overrides, hydra_cfg=job.config, status=JobStatus.COMPLETED
            )
        if job.refused is not None:
            error = IsotuneError(job.refused)
        else:
            try:
                check_links_stay_inside(job.folder, "hydra.sweep.dir")
                return None
            except IsotuneError as leaving:
                record_refusal(job.folder, job.overrides, leaving)
                error = leaving
        log.error(f"#{number} : {' '.join(filter_overrides(job.overrides))} refused: {error}")
        return JobReturn(
            overrides=job.overrides,
            hydra_cfg=job.config,
            status=JobStatus.FAILED,
            _return_value=error,
        )


def _job_folder(config: DictConfig, number: int) -> str:
    """The folder Hydra's ``run_job`` makes for job ``number``, also set as its
    runtime.output_dir."""
    # read_write: an earlier call left the hydra node read-only (HydraConfig.set_config does)
    with read_write(config.hydra.job), open_dict(config.hydra.job):
        config.hydra.job.id = number
        config.hydra.job.num = number
    sweeper_config = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(config)  # ${hydra:...} resolves as in the job
    try:
        sweep = config.hydra.sweep
        folder = os.path.abspath(os.path.join(str(sweep.dir), str(sweep.subdir)))
    finally:
        HydraConfig.instance().cfg = sweeper_config  # as run_job leaves it
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = folder
    return folder


class SummarizingSweeper(BasicSweeper):
    def __init__(self, preview: bool = False, **settings: Any) -> None:
        super().__init__(**settings)
        self.preview = preview

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.launcher = _KeepingLauncher(self.launcher)

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and isinstance(self.launcher, _KeepingLauncher)
        from hydra_plugins.isotune_launcher._sweep_space import (  # imports torch
            check_sweep_fits,
            jobs_at_once,
        )

        sweep_dir = Path(str(self.config.hydra.sweep.dir)).resolve()
        log.info(folder_line("Sweep", sweep_dir, self.preview))
        with stops_with_a_summary(sweep_dir, self.launcher.launcher):
            check_no_live_jobs(sweep_dir, "Typing the sweep again")
            jobs = self.launcher.jobs = self._plan(arguments, sweep_dir)
            left = [n for n, job in jobs.items() if not job.completed and job.refused is None]
            fits_at_once = jobs_at_once(self.config.hydra.launcher, len(left))
            completed = sum(job.completed for job in jobs.values())
            check_sweep_fits(sweep_dir, [jobs[n].config for n in left], fits_at_once, completed)
            if self.preview:
                timed = left[0] if left else 0
                say_preview(
                    sweep_dir,
                    _plan_lines(list(jobs.values()), sweep_dir),
                    len(left),
                    fits_at_once,
                    jobs[timed].config,
                    f"job #{timed}",
                    self.config.hydra.launcher,
                )
                return []
            super().sweep(arguments)
        returns = [job for batch in self.launcher.returns for job in batch]
        refused = {n: job for n, job in jobs.items() if job.refused is not None}
        summary = summarize_sweep(
            sweep_dir, {tuple(job.overrides): job.refused for job in refused.values()}
        )
        unrecorded = [
            job
            for job in returns
            if _failed_without_record(job) and job.hydra_cfg.hydra.job.num not in refused
        ]
        for job in unrecorded:  # failed before its run could write results.json
            log.error(f"Job {' '.join(job.overrides)} failed: {job._return_value}")
        if summary.all_completed and not unrecorded:
            log.info(summary.text)
            return self.launcher.returns
        log.error(summary.text)
        sys.exit(1)

    def _plan(self, arguments: list[str], sweep_dir: Path) -> dict[int, _Job]:
        """Every job by number, as the basic sweeper numbers them, with its folder and what that
        folder records."""
        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(
            [*self._parse_config(), *arguments]
        )
        jobs = [list(job) for batch in self.split_arguments(parsed, None) for job in batch]
        if OmegaConf.to_container(self.config.hydra.sweep)["subdir"] == NUMBERED:
            placed = [[f"hydra.sweep.subdir={name}"] for name in job_folders(sweep_dir, jobs)]
        else:  # the user's own folders: each job is checked against what its folder holds
            placed = [[] for _ in jobs]
        planned: dict[int, _Job] = {}
        owners: dict[str, int] = {}  # each folder's first job
        for number, (overrides, placing) in enumerate(zip(jobs, placed, strict=True)):
            config = loader.load_sweep_config(self.config, [*overrides, *placing])
            folder = _job_folder(config, number)
            run = recorded_run(Path(folder))
            owner = owners.setdefault(folder, number)
            refused = _not_its_folder(folder, overrides, run, None if owner == number else owner)
            planned[number] = _Job(overrides, config, placing, run, refused)
        return planned


def _not_its_folder(
    folder: str, overrides: list[str], run: Run | None, owner: int | None
) -> str | None:
    """Why a job with ``overrides`` may not start in ``folder`` (recording ``run``; ``owner``:
    the earlier job of the sweep that goes there); None where it may."""
    if owner is not None:
        holds = f"is also job #{owner}'s"
    elif run is not None and result_overrides(run.overrides) != result_overrides(overrides):
        holds = f"holds the run of another configuration ({shlex.join(run.overrides)})"
    else:
        return None
    return (
        f"Its folder {folder} {holds}: started there, Hydra would rewrite that run's .hydra/ "
        f"before the run could refuse. Fix: leave hydra.sweep.subdir at {NUMBERED} (each "
        "configuration in its own numbered folder) or make it tell these jobs apart, or sweep "
        "into another hydra.sweep.dir."
    )


def _plan_lines(jobs: list[_Job], sweep_dir: Path) -> list[str]:
    """A multirun's jobs as its preview says them: by the keys that differ between them (the
    swept ones), job by job, each by its folder and whether it completed there before."""
    values: dict[str, dict[str, None]] = {}  # each key's values, in order
    for job in jobs:
        for override in filter_overrides(job.overrides):
            key, _, value = override.partition("=")
            values.setdefault(key, {})[value] = None
    swept = [key for key, seen in values.items() if len(seen) > 1]
    done = sum(job.completed for job in jobs)
    refused = sum(job.refused is not None for job in jobs)
    sweeps = "; ".join(f"{key}={','.join(values[key])}" for key in swept) or "no key swept"
    lines = [
        f"A multirun of {counted(len(jobs), 'job')} ({sweeps}): {done} completed in the "
        f"folder, {len(jobs) - done - refused} to run"
        + (f", {refused} refused (its folder is another job's)." if refused else ".")
    ]
    for job in jobs:
        shown = [o for o in filter_overrides(job.overrides) if o.partition("=")[0] in swept]
        state = " (completed)" if job.completed else " (refused)" if job.refused else ""
        lines.append(f"  #{os.path.relpath(job.folder, sweep_dir)} {' '.join(shown)}{state}")
    return lines


def _failed_without_record(job: JobReturn) -> bool:
    if job.status == JobStatus.COMPLETED or job.hydra_cfg is None:
        return False
    return not (Path(job.hydra_cfg.hydra.runtime.output_dir) / RESULTS_FILE).is_file()
