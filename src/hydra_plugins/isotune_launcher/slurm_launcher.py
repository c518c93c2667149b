"""Hydra launcher ``slurm``: hydra-submitit-launcher's, with allocations as worker pools.

With ``jobs_per_gpu: 1`` (conf/hydra/launcher/slurm.yaml) it is submitit's launcher as it is: one
array task, and one GPU, per job. With ``jobs_per_gpu`` above 1 the sweep is packed: it goes out
as ``allocations`` array tasks of ``gpus_per_node`` GPUs each, and each runs the ``gpus``
launcher's worker pool (:class:`~hydra_plugins.isotune_launcher.gpus_launcher.SlotPool`: k jobs
per GPU, warm workers that keep the tokenizer, model files and the shared probe pass of one job
for the next) over the jobs no allocation has taken yet, claimed through
:mod:`isotune.sweeps.job_claims`. An allocation warned of its time limit (SIGUSR2) or preempted
(SIGTERM) passes the signal to its workers, whose jobs stop where they can continue from, and
then hands it to submitit's handler, which requeues it; requeued, it first continues the jobs it
had claimed. The command that sent them waits for every allocation and reads each job's return
from its claim; a job no allocation finished is a failed return, its results.json saying how far
it got (``isotune.rerun`` continues it).
"""

import logging
import math
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, setup_globals
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf

from hydra_plugins.isotune_launcher._gpus_worker import JobStopped, job_context
from hydra_plugins.isotune_launcher.gpus_launcher import JobQueue, SlotPool, require_counts
from isotune.errors import IsotuneError, RunInterrupted
from isotune.sweeps import gpu_slots, slurm_jobs
from isotune.sweeps.job_claims import JobClaims, new_claims_folder
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)

PACKING_KEYS = ("jobs_per_gpu", "jobs_per_allocation", "allocations")  # isotune's, not submitit's


@dataclass
class IsotuneSlurmLauncherConf(SlurmQueueConf):
    """submitit's schema with the packing knobs; ``conf/hydra/launcher/slurm.yaml`` holds the
    values."""

    _target_: str = "hydra_plugins.isotune_launcher.slurm_launcher.IsotuneSlurmLauncher"
    jobs_per_gpu: int = 1
    jobs_per_allocation: int | None = None
    allocations: int | None = None


ConfigStore.instance().store(
    group="hydra/launcher",
    name="isotune_slurm",
    node=IsotuneSlurmLauncherConf,
    provider="isotune",
)


class IsotuneSlurmLauncher(SlurmLauncher):
    def __init__(self, **params: Any) -> None:
        packing = {key: params.pop(key, None) for key in PACKING_KEYS}
        super().__init__(**params)
        self.jobs_per_gpu: int = 1 if packing["jobs_per_gpu"] is None else packing["jobs_per_gpu"]
        self.jobs_per_allocation: int | None = packing["jobs_per_allocation"]
        self.allocations: int | None = packing["allocations"]

    def slots_per_allocation(self) -> int:
        """Jobs one allocation runs at once: ``jobs_per_gpu`` on each of its GPUs, or on a
        CPU-only allocation (``gpus_per_node: 0``) ``jobs_per_gpu`` CPU jobs."""
        gpus = self.params.get("gpus_per_node") or 1
        return gpus * self.jobs_per_gpu

    def plan(self, job_overrides: Sequence[Sequence[str]]) -> tuple[int, int]:
        """How many allocations, each running how many jobs at once; refuses settings a packed
        sweep cannot run, before anything is submitted."""
        require_counts(
            ", but it counts the jobs that share a GPU: set it to 1 (one array task, and one GPU, "
            "per job) or more (each allocation runs that many jobs on each of its GPUs).",
            jobs_per_gpu=self.jobs_per_gpu,
        )
        slots = self.slots_per_allocation()
        per_allocation = self.jobs_per_allocation or slots
        if not 1 <= per_allocation <= slots:
            raise IsotuneError(
                f"hydra.launcher.jobs_per_allocation={per_allocation}, but an allocation of "
                f"gpus_per_node={self.params.get('gpus_per_node')} x jobs_per_gpu="
                f"{self.jobs_per_gpu} has {slots} slots: set it between 1 and {slots}, or null "
                "(one job per slot), or raise hydra.launcher.jobs_per_gpu or gpus_per_node."
            )
        null = ": set it to 1 or more, or null (as many allocations as the jobs fill)."
        require_counts(null, allocations=self.allocations)
        trainers = [self.config.hydra.runtime.choices.get("trainer")] if self.config else []
        trainers += [
            override.removeprefix("trainer=")
            for job in job_overrides
            for override in job
            if override.startswith("trainer=")
        ]
        if "ddp" in trainers:
            raise IsotuneError(
                f"hydra.launcher.jobs_per_gpu={self.jobs_per_gpu} packs several jobs on each "
                "GPU of an allocation, but trainer=ddp runs one job over every GPU it sees: "
                "pack single-GPU jobs (trainer=gpu), or set hydra.launcher.jobs_per_gpu=1 and "
                "give the ddp run its GPUs with hydra.launcher.gpus_per_node and tasks_per_node."
            )
        needed = math.ceil(len(job_overrides) / per_allocation)
        return min(self.allocations or needed, needed), per_allocation

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        if self.jobs_per_gpu == 1:
            return super().launch(job_overrides, initial_job_idx)
        n_allocations, per_allocation = self.plan(job_overrides)
        import submitit

        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        jobs = [(initial_job_idx + index, list(o)) for index, o in enumerate(job_overrides)]
        log.info(
            f"Packing {counted(len(jobs), 'job')} into {counted(n_allocations, 'allocation')} "
            f"of SLURM, each running {per_allocation} at a time "
            f"(jobs_per_gpu={self.jobs_per_gpu}); sweep folder {sweep_dir}"
        )
        for job_num, overrides in jobs:
            log.info(f"\t#{job_num} : {' '.join(filter_overrides(overrides))}")
        claims = new_claims_folder(sweep_dir)
        allocation = Allocation(
            job_context(self.hydra_context, self.config, self.task_function),
            jobs,
            str(claims),
            str(sweep_dir),
            self.jobs_per_gpu,
            per_allocation,
        )
        sent = self.executor(submitit).map_array(allocation, range(n_allocations))
        for job in sent:
            try:
                job.results()
            except Exception as error:  # cancelled, or died: its jobs' claims tell the rest
                lines = str(error).splitlines()  # submitit's: the allocation's whole traceback
                why = next((line for line in reversed(lines) if "Error: " in line), lines[0])
                log.error(
                    f"Allocation {job.job_id} ended before its jobs did ({why.strip()}); its log: "
                    f"{job.paths.stdout}"
                )
        ended = JobClaims(claims, len(jobs), owner="", live_owners=lambda: None)
        return [_return_of(ended, index, *job) for index, job in enumerate(jobs)]

    def executor(self, submitit: Any) -> Any:
        """submitit's executor for the allocations, set up as hydra-submitit-launcher sets up
        its array tasks' (its folder, requeues, time limit, resources, sbatch options)."""
        executor = submitit.AutoExecutor(
            cluster="slurm",
            folder=self.params["submitit_folder"],
            slurm_max_num_timeout=self.params["max_num_timeout"],
        )
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{
                key if key in shared else f"slurm_{key}": value
                for key, value in self.params.items()
                if key not in ("submitit_folder", "max_num_timeout")
            }
        )
        return executor


def _return_of(claims: JobClaims, index: int, job_num: int, overrides: list[str]) -> JobReturn:
    """Job ``index``'s return as its allocation wrote it; a failed one where none finished it."""
    finished = claims.finished(index)
    if finished is not None:
        return cloudpickle.loads(finished)
    owner = claims.owner_of(index)
    how = "no allocation started it" if owner is None else f"allocation {owner} did not finish it"
    job_return = JobReturn(overrides=overrides, status=JobStatus.FAILED)
    job_return.return_value = JobStopped(
        f"#{job_num} ({' '.join(overrides)}): {how}; its results.json says how far it got"
    )
    return job_return


@dataclass
class Allocation:
    """What one array task of a packed sweep runs: a worker pool over the jobs it claims.
    Pickled by submitit; called in the allocation, again after each requeue."""

    context: bytes  # _gpus_worker.job_context
    jobs: list[tuple[int, list[str]]]  # (job number, overrides), by position in the launch
    claims_folder: str
    sweep_dir: str
    jobs_per_gpu: int
    jobs_at_once: int

    def __call__(self, task: int) -> list[int]:
        """Run jobs until none is left to claim; the job numbers this attempt finished."""
        import submitit

        me = str(submitit.JobEnvironment().job_id)
        claims = JobClaims(Path(self.claims_folder), len(self.jobs), me, self.live_allocations)
        slots = gpu_slots.plan_slots(None, self.jobs_per_gpu, self.jobs_at_once)
        slot_dir = gpu_slots.usable_slot_dir(Path(self.claims_folder) / f"slots-{me}")
        queue = ClaimedJobs(claims)
        pool = SlotPool(self.context, slot_dir, slots, gpu_slots.cpu_share(self.jobs_at_once))
        log.info(f"Allocation {me} (task {task}) runs jobs on slots {[s.name for s in slots]}")
        try:
            pool.run(self.jobs, self.jobs_at_once, queue)
        except RunInterrupted as stop:
            # Every job stopped where it can continue from: now submitit's handler (restored by
            # the pool) requeues the allocation at a time limit's warning, as for an array task.
            handler = signal.getsignal(stop.signal)
            if callable(handler):
                handler(stop.signal, None)
            sys.exit(128 + stop.signal)
        return [self.jobs[index][0] for index in queue.done]

    def live_allocations(self) -> set[str] | None:
        """The allocations SLURM still holds; None where squeue does not answer."""
        try:
            return {job.job_id for job in slurm_jobs.live_jobs(Path(self.sweep_dir))}
        except IsotuneError as error:
            log.warning(f"Claims of other allocations stand: {error}")
            return None

    def checkpoint(self, *args: Any) -> Any:
        """Requeued, the allocation runs this again (submitit's protocol): its claims carry on."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args)


class ClaimedJobs(JobQueue):
    """The pool's queue in an allocation: jobs it claims; a return written once a job ends."""

    def __init__(self, claims: JobClaims) -> None:
        self.claims = claims
        self.done: list[int] = []

    def take(self) -> int | None:
        return self.claims.take()

    def left(self) -> int:
        return self.claims.left()

    def finished(self, index: int, job_return: JobReturn) -> None:
        stopped = isinstance(job_return._return_value, JobStopped)
        if stopped and job_return.status != JobStatus.COMPLETED:
            return  # it continues where it stopped: still this allocation's
        self.claims.finish(index, cloudpickle.dumps(job_return))
        self.done.append(index)
