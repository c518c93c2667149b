"""Hydra sweeper ``isotune`` (the default of conf/train.yaml): the basic sweeper, with an account.

The same jobs in the same order and numbering as Hydra's basic sweeper (it is one, with
``params`` and ``max_batch_size``), but a sweep prints its folder when it starts, runs every job
whatever fails, and ends by printing how each job ended (from the jobs' results.json, whichever
launcher ran them: :mod:`isotune.sweeps.summary`), with exit status 1 if any did not complete.
Hydra's basic sweeper instead re-raises the first failed job's error, which Hydra prints as a
traceback of the whole sweep (and stops before later batches); here the launcher's returns are
kept aside and handed to it as completed, so that only the summary speaks. A launcher's refusal
of its own settings (an :class:`~isotune.errors.IsotuneError`) is one message too, as is a sweep
that cannot fit on its disk (:mod:`isotune.training.sweep_space`, checked before any job starts),
and a sweep stopped by a signal prints the summary before it exits with the signal's status.
"""

import dataclasses
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from isotune.errors import IsotuneError
from isotune.record.results import RESULTS_FILE
from isotune.sweeps.runs import SWEEP_FILE
from isotune.sweeps.summary import summarize_sweep

log = logging.getLogger(__name__)


@dataclass
class SummarizingSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.isotune_launcher.summarizing_sweeper.SummarizingSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="isotune", node=SummarizingSweeperConf, provider="isotune"
)


class _KeepingLauncher:
    """Runs each batch on the real launcher and keeps its returns; tells the basic sweeper every
    job completed, so it neither re-raises a job's error nor stops before the next batch."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.returns: list[Sequence[JobReturn]] = []

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        returns = self.launcher.launch(job_overrides, initial_job_idx=initial_job_idx)
        self.returns.append(returns)
        return [
            dataclasses.replace(job, status=JobStatus.COMPLETED, _return_value=None)
            for job in returns
        ]


class SummarizingSweeper(BasicSweeper):
    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.launcher = _KeepingLauncher(self.launcher)

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and isinstance(self.launcher, _KeepingLauncher)
        from isotune.training.sweep_space import check_sweep_fits, jobs_at_once  # imports torch

        sweep_dir = Path(str(self.config.hydra.sweep.dir)).resolve()
        log.info(f"Sweep folder: {sweep_dir}")
        try:
            jobs = self._job_configs(arguments)
            check_sweep_fits(sweep_dir, jobs, jobs_at_once(self.config.hydra.launcher, len(jobs)))
            super().sweep(arguments)
        except IsotuneError as error:  # the launcher refused its settings, or the disk: no job ran
            log.error(f"{error}\nSweep folder: {sweep_dir}")
            sys.exit(1)
        except (KeyboardInterrupt, SystemExit) as stop:  # a signal stopped the sweep
            log.warning(summarize_sweep(sweep_dir).text)
            if isinstance(stop, SystemExit):
                raise
            sys.exit(128 + getattr(stop, "signal", signal.SIGINT))
        except Exception as error:  # submitit's launcher raises at the first failed job
            if not (sweep_dir / SWEEP_FILE).is_file():
                raise
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            log.error(
                f"{summarize_sweep(sweep_dir).text}\nThe launcher stopped waiting: "
                f"{type(error).__name__}: {first_line} (jobs still running on a cluster go on)"
            )
            sys.exit(1)
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

    def _job_configs(self, arguments: list[str]) -> list[DictConfig]:
        """Every job's composed config, as the basic sweeper will make them."""
        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(
            [*self._parse_config(), *arguments]
        )
        return [
            loader.load_sweep_config(self.config, list(job))
            for batch in self.split_arguments(parsed, None)
            for job in batch
        ]


def _failed_without_record(job: JobReturn) -> bool:
    if job.status == JobStatus.COMPLETED or job.hydra_cfg is None:
        return False
    return not (Path(job.hydra_cfg.hydra.runtime.output_dir) / RESULTS_FILE).is_file()
