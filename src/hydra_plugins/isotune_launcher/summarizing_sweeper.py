"""Hydra sweeper ``isotune`` (conf/hydra/default.yaml): the basic sweeper, with an account.

The same jobs in the same order and numbering as Hydra's basic sweeper (it is one, with
``params`` and ``max_batch_size``), but a sweep prints its folder when it starts, runs every job
whatever fails, and ends by printing how each job ended (from the jobs' results.json, whichever
launcher ran them: :mod:`isotune.sweeps.summary`), with exit status 1 if any did not complete.
Hydra's basic sweeper instead re-raises the first failed job's error, which Hydra prints as a
traceback of the whole sweep (and stops before later batches); here the launcher's returns are
kept aside and handed to it as completed, so that only the summary speaks. A launcher's refusal
of its own settings (an :class:`~isotune.errors.IsotuneError`) is one message too, as is a sweep
that cannot fit on its disk (:mod:`isotune.training.sweep_space`, checked before any job starts)
or one typed again while jobs it sent to SLURM are still queued or running
(:mod:`isotune.sweeps.slurm_jobs`), and a sweep stopped by a signal prints the summary before
it exits with the signal's status.

A sweep typed again in its folder starts each job in the job's folder, where Hydra's ``run_job``
writes ``.hydra/*.yaml`` and opens ``train.log`` before any callback or the run can check it. So
a job whose folder already holds a link leading out of it
(:func:`~isotune.record.resume.check_links_stay_inside`) is refused here, before it is handed
to the launcher (basic, gpus or SLURM alike): nothing of its folder is rewritten, and the refusal
is recorded in its results.json (a failed attempt after the earlier ones), so that the summary
reports it rather than how the job ended before.
"""

import dataclasses
import itertools
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_loader import ConfigLoader
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict, read_write

from hydra_plugins.isotune_launcher.preview import PreviewConf, folder_line, say_preview
from hydra_plugins.isotune_launcher.stopping import stops_with_a_summary
from isotune.errors import IsotuneError
from isotune.record.results import RESULTS_FILE
from isotune.record.resume import check_links_stay_inside, record_refusal
from isotune.sweeps.runs import Run
from isotune.sweeps.slurm_jobs import check_no_live_jobs
from isotune.sweeps.summary import summarize_sweep
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)


@dataclass
class SummarizingSweeperConf(BasicSweeperConf, PreviewConf):
    _target_: str = "hydra_plugins.isotune_launcher.summarizing_sweeper.SummarizingSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="isotune", node=SummarizingSweeperConf, provider="isotune"
)


class _KeepingLauncher:
    """Runs each batch on the real launcher and keeps its returns; tells the basic sweeper every
    job completed, so it neither re-raises a job's error nor stops before the next batch. A job
    refused before it starts (:meth:`refusal`) is kept out of the launcher's hands; the jobs
    around it are launched with their own numbers."""

    def __init__(self, launcher: Launcher, config: DictConfig, config_loader: ConfigLoader) -> None:
        self.launcher = launcher
        self.config = config
        self.config_loader = config_loader
        self.returns: list[Sequence[JobReturn]] = []
        # Each job's config as the sweeper composed it for the disk check, by job number and
        # overrides: composing one takes a noticeable fraction of a second, so it is done once.
        self.composed: dict[tuple[int, tuple[str, ...]], DictConfig] = {}

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        refusals = [
            self.refusal(list(overrides), initial_job_idx + index)
            for index, overrides in enumerate(job_overrides)
        ]
        returns: list[JobReturn] = []
        start = 0
        for refused, group in itertools.groupby(refusals, key=lambda job: job is not None):
            size = len(group := list(group))
            if refused:
                returns += group
            else:
                batch = job_overrides[start : start + size]
                returns += self.launcher.launch(batch, initial_job_idx=initial_job_idx + start)
            start += size
        self.returns.append(returns)
        return [
            dataclasses.replace(job, status=JobStatus.COMPLETED, _return_value=None)
            for job in returns
        ]

    def refusal(self, overrides: list[str], number: int) -> JobReturn | None:
        """A failed return for job ``number`` if its folder (as Hydra's ``run_job`` will make it)
        holds a link leading out, with the refusal recorded in its results.json; else None."""
        config = self.composed.pop((number, tuple(overrides)), None)
        if config is None:  # not composed before (a job the sweeper numbered otherwise)
            config = self.config_loader.load_sweep_config(self.config, overrides)
            _job_folder(config, number)
        folder = str(config.hydra.runtime.output_dir)  # set by _job_folder, here or in sweep()
        try:
            check_links_stay_inside(folder, "hydra.sweep.dir")
        except IsotuneError as error:
            log.error(f"#{number} : {' '.join(filter_overrides(overrides))} refused: {error}")
            record_refusal(folder, overrides, error)
            return JobReturn(
                overrides=overrides,
                hydra_cfg=config,
                status=JobStatus.FAILED,
                _return_value=error,
            )
        return None


def _job_folder(config: DictConfig, number: int) -> str:
    """The folder Hydra's ``run_job`` makes for job ``number`` of the sweep (``hydra.sweep.dir``
    / ``hydra.sweep.subdir``, resolved as the job sees them), also set as its
    runtime.output_dir."""
    # As the launchers number a job; read_write: an earlier call left the hydra node read-only
    # (HydraConfig.set_config makes it so).
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
        self.launcher = _KeepingLauncher(self.launcher, config, hydra_context.config_loader)

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and isinstance(self.launcher, _KeepingLauncher)
        from isotune.training.sweep_space import check_sweep_fits, jobs_at_once  # imports torch

        sweep_dir = Path(str(self.config.hydra.sweep.dir)).resolve()
        log.info(folder_line("Sweep", sweep_dir, self.preview))
        with stops_with_a_summary(sweep_dir, self.launcher.launcher):
            check_no_live_jobs(sweep_dir, "Typing the sweep again")
            self.launcher.composed = self._job_configs(arguments)
            done = {
                job: _completed(_job_folder(config, job[0]))
                for job, config in self.launcher.composed.items()
            }
            left = [config for job, config in self.launcher.composed.items() if not done[job]]
            fits_at_once = jobs_at_once(self.config.hydra.launcher, len(left))
            completed = len(self.launcher.composed) - len(left)
            check_sweep_fits(sweep_dir, left, fits_at_once, completed)
            if self.preview:
                timed = next((job for job in done if not done[job]), next(iter(done)))
                say_preview(
                    sweep_dir,
                    _plan([(overrides, completed) for (_, overrides), completed in done.items()]),
                    len(left),
                    fits_at_once,
                    self.launcher.composed[timed],
                    f"job #{timed[0]}",
                    self.config.hydra.launcher,
                )
                return []
            super().sweep(arguments)
        returns = [job for batch in self.launcher.returns for job in batch]
        summary = summarize_sweep(sweep_dir)
        unrecorded = [job for job in returns if _failed_without_record(job)]
        for job in unrecorded:  # failed before its run could write results.json
            log.error(f"Job {' '.join(job.overrides)} failed: {job._return_value}")
        if summary.all_completed and not unrecorded:
            log.info(summary.text)
            return self.launcher.returns
        log.error(summary.text)
        sys.exit(1)

    def _job_configs(self, arguments: list[str]) -> dict[tuple[int, tuple[str, ...]], DictConfig]:
        """Every job's composed config, as the basic sweeper will make them, by job number and
        overrides (in job-number order)."""
        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(
            [*self._parse_config(), *arguments]
        )
        jobs = [tuple(job) for batch in self.split_arguments(parsed, None) for job in batch]
        return {
            (number, job): loader.load_sweep_config(self.config, list(job))
            for number, job in enumerate(jobs)
        }


def _plan(jobs: list[tuple[tuple[str, ...], bool]]) -> list[str]:
    """A multirun's jobs (each its overrides, and whether it completed before) as its preview
    says them: by the keys that differ between them (the swept ones), job by job."""
    values: dict[str, list[str]] = {}
    for overrides, _ in jobs:
        for override in filter_overrides(list(overrides)):
            key, _, value = override.partition("=")
            values.setdefault(key, [])
            if value not in values[key]:
                values[key].append(value)
    swept = [key for key, seen in values.items() if len(seen) > 1]
    done = sum(completed for _, completed in jobs)
    sweeps = "; ".join(f"{key}={','.join(values[key])}" for key in swept) or "no key swept"
    lines = [
        f"A multirun of {counted(len(jobs), 'job')} ({sweeps}): {done} completed in the "
        f"folder, {len(jobs) - done} to run."
    ]
    for number, (overrides, completed) in enumerate(jobs):
        shown = [o for o in filter_overrides(list(overrides)) if o.partition("=")[0] in swept]
        lines.append(f"  #{number} {' '.join(shown)}{' (completed)' if completed else ''}")
    return lines


def _completed(folder: str) -> bool:
    """Whether the job in ``folder`` completed before (a sweep typed again): it runs no more."""
    results = Path(folder) / RESULTS_FILE
    return results.is_file() and Run.read(results).completed


def _failed_without_record(job: JobReturn) -> bool:
    if job.status == JobStatus.COMPLETED or job.hydra_cfg is None:
        return False
    return not (Path(job.hydra_cfg.hydra.runtime.output_dir) / RESULTS_FILE).is_file()
