"""Hydra launcher ``gpus``: run a sweep's jobs in parallel on one machine's GPUs.

    python train.py -m hydra/launcher=gpus task=rte,mrpc norm=none,isobn seed=1,2,3
    python train.py -m hydra/launcher=gpus hydra.launcher.gpus=[0,2] ...   # only GPUs 0 and 2
    python train.py -m hydra/launcher=gpus hydra.launcher.jobs_per_gpu=2 ...   # two jobs per GPU

Its knobs, with their reasons, are in ``conf/hydra/launcher/gpus.yaml``. It starts ``n_jobs``
worker processes (spawn, so no CUDA state is inherited); each worker first claims one slot (a
share of one GPU) through :mod:`isotune.sweeps.gpu_slots` and sets ``CUDA_VISIBLE_DEVICES`` (and
``ISOTUNE_GPU_SLOT``) before anything can initialise CUDA, takes its share of the CPU threads
(``threads_per_job``), then runs jobs one after another. A GPU
has ``jobs_per_gpu`` slots and jobs beyond ``n_jobs`` queue, so a GPU never runs more than
``jobs_per_gpu`` jobs at once whatever their durations. A job that raises is recorded as FAILED;
a worker that dies (``os._exit``, killed for memory) fails only the job it was running and is
replaced, and the other jobs go on. A job stopped by a signal (SIGTERM, SIGUSR2, Ctrl-C) records
how it ended and exits with the shell's status for the signal: that is one "stopped" line, with
the status its results.json holds, not a crash (:mod:`._gpus_worker`, what runs in a worker). One
Ctrl-C stops the sweep as SIGTERM does (:class:`_ForwardedStop`): each running job at its safe
point, idle workers told to stop, a worker still alive after the grace period killed; a second
Ctrl-C kills them at once. Workers are reused, so a job must release what it opened (e.g.
``wandb.finish()``)."""

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

import cloudpickle
from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import MISSING, DictConfig

from hydra_plugins.isotune_launcher._gpus_worker import (
    STOPPED_EXIT_CODES,
    SWEEP_STOP_SIGNALS,
    JobStopped,
    job_context,
    serve_jobs,
)
from isotune.errors import IsotuneError, RunInterrupted
from isotune.norms.ranges import COUNT
from isotune.sweeps import gpu_slots
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)


def require_counts(fix: str, **counts: Any) -> None:
    """A count below one is refused naming its hydra.launcher key and the fix, which Range won't."""
    if any(value is not None and not COUNT.holds(value) for value in counts.values()):
        raise IsotuneError(" and ".join(f"hydra.launcher.{k}={v}" for k, v in counts.items()) + fix)


@dataclass
class GpusLauncherConf:
    """The launcher's schema; ``conf/hydra/launcher/gpus.yaml`` extends it and holds the values."""

    _target_: str = "hydra_plugins.isotune_launcher.gpus_launcher.GpusLauncher"
    gpus: list[str] | None = MISSING
    jobs_per_gpu: int = MISSING
    n_jobs: int | None = MISSING
    threads_per_job: int | None = MISSING
    slot_dir: str = MISSING


# Stored under another name than the YAML's, which lists it in its defaults (as slurm.yaml does
# with submitit's node), so that `hydra/launcher=gpus` finds the YAML.
ConfigStore.instance().store(
    group="hydra/launcher", name="isotune_gpus", node=GpusLauncherConf, provider="isotune"
)


class WorkerCrashedError(RuntimeError):
    """A worker process died while running a job, so the job returned nothing."""


STOP_GRACE_S = 60.0  # how long a stopped job, or a worker told to stop, has before it is killed


@dataclass
class _Worker:
    process: SpawnProcess
    conn: Connection
    job_index: int  # position in the launched batch of the job it is running


class GpusLauncher(Launcher):
    def __init__(
        self,
        *,
        gpus: Sequence[str] | None,
        jobs_per_gpu: int,
        n_jobs: int | None,
        slot_dir: str,
        threads_per_job: int | None = None,
    ) -> None:
        self.gpus = None if gpus is None else list(gpus)
        self.jobs_per_gpu = jobs_per_gpu
        self.n_jobs = n_jobs
        self.threads_per_job = threads_per_job
        self.slot_dir = slot_dir
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        setup_globals()
        assert self.config is not None
        assert self.hydra_context is not None
        assert self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)

        slots, n_jobs = self.plan()
        # A slot folder or lock file this user cannot safely use is one message here, not an
        # error in every worker; slots another sweep holds are waited for.
        slot_dir = gpu_slots.usable_slot_dir(Path(self.slot_dir))
        if held := gpu_slots.held_slots(slot_dir):
            log.info(f"Slots {held} in {slot_dir} are held by other processes: jobs wait for them")
        n_workers = min(n_jobs, len(job_overrides))
        threads = self.threads_per_job or gpu_slots.cpu_share(n_workers)
        log.info(
            f"Launching {counted(len(job_overrides), 'job')}, {n_jobs} at a time, on slots "
            f"{[slot.name for slot in slots]}, torch threads per job: {threads} "
            f"(slot locks in {self.slot_dir})"
        )
        for index, overrides in enumerate(job_overrides):
            log.info(f"\t#{initial_job_idx + index} : {' '.join(filter_overrides(overrides))}")

        context = job_context(self.hydra_context, self.config, self.task_function)
        pool = SlotPool(context, slot_dir, slots, threads)
        jobs = [(initial_job_idx + index, list(o)) for index, o in enumerate(job_overrides)]
        returns = pool.run(jobs, n_workers, InOrder(len(jobs)))
        return [returns[index] for index in range(len(jobs))]

    def plan(self) -> tuple[list[gpu_slots.Slot], int]:
        """The slots and how many jobs run at once: ``n_jobs``, by default one per slot. Without
        GPUs, ``n_jobs`` (default 1) CPU slots."""
        require_counts(
            ", but both count jobs: set them to 1 or more (n_jobs may be null: one job per slot).",
            jobs_per_gpu=self.jobs_per_gpu,
            n_jobs=self.n_jobs,
        )
        fix = ": set it to 1 or more, or null (the CPU cores split evenly over the jobs running at "
        require_counts(fix + "once).", threads_per_job=self.threads_per_job)
        cpu_jobs = 1 if self.n_jobs is None else self.n_jobs
        slots = gpu_slots.plan_slots(self.gpus, self.jobs_per_gpu, cpu_jobs)
        n_jobs = len(slots) if self.n_jobs is None else self.n_jobs
        if n_jobs > len(slots):
            gpus = list(dict.fromkeys(slot.gpu for slot in slots))
            raise IsotuneError(
                f"hydra.launcher.n_jobs={n_jobs} but GPUs {gpus} x jobs_per_gpu="
                f"{self.jobs_per_gpu} give {len(slots)} slots: set n_jobs to at most {len(slots)}, "
                "raise hydra.launcher.jobs_per_gpu, or list more hydra.launcher.gpus."
            )
        return slots, n_jobs


class JobQueue:
    """Which job a free worker runs next (a position in the batch), or None: no job left."""

    def take(self) -> int | None:
        raise NotImplementedError

    def left(self) -> int:
        """How many jobs wait to be taken (for the log)."""
        raise NotImplementedError

    def finished(self, index: int, job_return: JobReturn) -> None:
        """Job ``index`` returned ``job_return`` (or its worker died: a crashed or stopped
        return)."""


class InOrder(JobQueue):
    """Every job of the batch once, in order: one launcher holds the whole sweep."""

    def __init__(self, n_jobs: int) -> None:
        self.pending = deque(range(n_jobs))

    def take(self) -> int | None:
        return self.pending.popleft() if self.pending else None

    def left(self) -> int:
        return len(self.pending)


class SlotPool:
    """Worker processes that each hold one slot; a dead worker fails its job and is replaced."""

    def __init__(
        self, context_payload: bytes, slot_dir: Path, slots: list[gpu_slots.Slot], threads: int
    ) -> None:
        self.context_payload = context_payload
        self.slot_dir = slot_dir
        self.slots = slots
        self.threads = threads
        self.spawn: SpawnContext = multiprocessing.get_context("spawn")

    def run(
        self, jobs: list[tuple[int, list[str]]], n_workers: int, queue: JobQueue
    ) -> dict[int, JobReturn]:
        """Run the jobs ``queue`` hands out (positions in ``jobs``) on up to ``n_workers``
        workers; the returns of the jobs it ran, by position."""
        returns: dict[int, JobReturn] = {}
        busy: list[_Worker] = []
        stop = _ForwardedStop(lambda: busy)
        try:
            while len(busy) < n_workers and (index := queue.take()) is not None:
                busy.append(self._start_worker(jobs, index))
            while busy:
                if stop.signal is not None:  # no new job after a stop signal
                    stop.kill_stragglers()
                waiting = [w.conn for w in busy] + [w.process.sentinel for w in busy]
                # Bounded, so that a stop signal (its handler runs inside the wait, which then
                # goes on) is acted on within a second even while no job returns.
                ready = set(wait(waiting, timeout=1.0))
                for worker in [w for w in busy if {w.conn, w.process.sentinel} & ready]:
                    job_num, overrides = jobs[worker.job_index]
                    job_return = _receive(worker.conn)
                    if job_return is None:
                        _join_or_kill(worker.process, time.monotonic() + STOP_GRACE_S)
                        job_return = _crashed_return(job_num, overrides, worker.process)
                    returns[worker.job_index] = job_return
                    queue.finished(worker.job_index, job_return)
                    outcome, queued = job_return._return_value, counted(queue.left(), "job")
                    if isinstance(outcome, WorkerCrashedError):
                        log.error(str(outcome))
                    if isinstance(outcome, JobStopped):  # one line, no FAILED after it
                        log.warning(f"{outcome}; {queued} queued")
                    else:
                        log.info(f"#{job_num} {job_return.status.name}; {queued} queued")
                    following = queue.take() if stop.signal is None else None
                    if not worker.process.is_alive():
                        busy.remove(worker)
                        if following is not None:
                            busy.append(self._start_worker(jobs, following))
                    elif following is not None:
                        worker.job_index = following
                        worker.conn.send(jobs[following])
                    else:  # an idle worker is told to stop; it ends, or is killed
                        worker.conn.send(None)
                        _join_or_kill(worker.process, time.monotonic() + STOP_GRACE_S)
                        busy.remove(worker)
        finally:
            stop.uninstall()
            for worker in busy:  # the loop raised: stop its jobs as a signal would
                worker.process.terminate()
            for worker in busy:
                _join_or_kill(worker.process, time.monotonic() + STOP_GRACE_S)
        if stop.signal is not None:  # every job stopped and recorded itself: the sweep stops
            raise RunInterrupted(stop.signal)
        failed = [
            f"#{jobs[index][0]} {' '.join(jobs[index][1])}"
            for index, job_return in sorted(returns.items())
            if job_return.status != JobStatus.COMPLETED
        ]
        if failed:
            log.error(
                f"{len(failed)} of {counted(len(returns), 'job')} failed: {'; '.join(failed)}"
            )
        return returns

    def _start_worker(self, jobs: list[tuple[int, list[str]]], job_index: int) -> _Worker:
        parent_conn, child_conn = self.spawn.Pipe()
        process = self.spawn.Process(
            target=serve_jobs,
            args=(child_conn, self.slot_dir, self.slots, self.threads, self.context_payload),
            name=f"gpus-launcher-worker-{job_index}",
        )
        process.start()
        child_conn.close()  # so that a dead worker reads as end-of-file here
        parent_conn.send(jobs[job_index])
        return _Worker(process, parent_conn, job_index)


class _ForwardedStop:
    """Passes Ctrl-C, SIGTERM and SIGUSR2 sent to the sweep on to every worker, whose job then
    stops where it can continue from and records itself interrupted
    (:mod:`isotune.record.stopping`); no new job starts, a worker whose job returns is told to
    stop, and a worker still alive ``grace_s`` seconds later is killed. A second Ctrl-C kills them
    at once. Without this, ``kill <sweep pid>`` (what a scheduler or a user does) left the workers
    running their jobs as orphans, and Ctrl-C (which a terminal sends to the workers too) waited
    for ever on a worker whose run had taken the launcher's SIGTERM for its own."""

    def __init__(self, workers: Callable[[], list[_Worker]], grace_s: float = STOP_GRACE_S) -> None:
        self.workers = workers
        self.grace_s = grace_s
        self.signal: signal.Signals | None = None
        self.deadline = 0.0
        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            for stop in SWEEP_STOP_SIGNALS:
                self.previous[stop] = signal.signal(stop, self.forward)

    def forward(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signal is not None and signum == signal.SIGINT:
            log.warning(f"Received {name} again: killing the workers now")
            self.deadline = time.monotonic()
            return
        self.signal = self.signal or signal.Signals(signum)
        self.deadline = time.monotonic() + self.grace_s
        log.warning(f"Received {name}: passing it to the running jobs")
        for worker in self.workers():
            if worker.process.is_alive():
                os.kill(worker.process.pid, signum)

    def kill_stragglers(self) -> None:
        if time.monotonic() < self.deadline:
            return
        for worker in self.workers():
            if worker.process.is_alive():
                log.error(
                    f"Worker {worker.process.pid} still alive {self.grace_s:.0f} s after "
                    f"{self.signal.name}: killing it"
                )
                worker.process.kill()

    def uninstall(self) -> None:
        for stop, handler in self.previous.items():
            signal.signal(stop, handler)


def _join_or_kill(process: SpawnProcess, deadline: float) -> None:
    """Wait for ``process`` to end until ``deadline`` (``time.monotonic``), then kill it: a
    worker that never ends (a job's handler that took its stop for its own) must not hold up the
    sweep for ever."""
    process.join(max(0.0, deadline - time.monotonic()))
    if process.is_alive():
        log.error(f"Worker {process.pid} did not end when told to stop: killing it")
        process.kill()
        process.join()


def _receive(conn: Connection) -> JobReturn | None:
    """The job's return, or None when the worker died before sending it."""
    if not conn.poll():
        return None
    try:
        return cloudpickle.loads(conn.recv_bytes())
    except EOFError:
        return None


def _crashed_return(job_num: int, overrides: list[str], process: SpawnProcess) -> JobReturn:
    code = process.exitcode
    job_return = JobReturn(overrides=overrides, status=JobStatus.FAILED)
    stopped_by = STOPPED_EXIT_CODES.get(code) or (
        STOPPED_EXIT_CODES.get(128 - code) if code and code < 0 else None
    )
    if stopped_by is not None:  # the signal reached the worker outside a run's handler
        job_return.return_value = JobStopped(
            f"#{job_num} ({' '.join(overrides)}) stopped by {stopped_by.name} before returning; "
            "its results.json says how far it got"
        )
        return job_return
    how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
    job_return.return_value = WorkerCrashedError(
        f"Job #{job_num} ({' '.join(overrides)}) died with its worker process "
        f"(pid {process.pid}, {how}) before returning; see the job's log and stderr. "
        "The other jobs went on."
    )
    return job_return
