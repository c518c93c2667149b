"""What runs in a ``gpus`` launcher's worker process (:mod:`.gpus_launcher`): the sweep's context,
sent once; each job it is sent, run as Hydra runs a job; its return, sent back whole. A job
stopped by a signal is one "stopped" return, not a crash; Ctrl-C between jobs is only noted, and
a job sent meanwhile is returned stopped, not started: the launcher is stopping the sweep.

Its name starts with ``_`` so that Hydra's plugin scan does not import it a second time: the
workers are spawned with :func:`serve_jobs` pickled by reference, which must be the object the
module in ``sys.modules`` holds.
"""

import gc
import logging
import signal
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from isotune.record.results import RESULTS_FILE, read_results
from isotune.record.stopping import STOP_SIGNALS, ctrl_c_in_a_sweep
from isotune.sweeps import gpu_slots

log = logging.getLogger(__name__)


class JobFailedError(RuntimeError):
    """A job raised in its worker; the message carries the worker's traceback."""


class JobStopped(RuntimeError):
    """A job stopped by a signal, after recording how it ended (completed where the signal came
    as it finished, else interrupted): the launcher says so once, as the sweep's summary will."""


SWEEP_STOP_SIGNALS = (signal.SIGINT, *STOP_SIGNALS)  # each stops the sweep, its jobs first
# The exit statuses a stopped run ends with (training.cli: 128 + the signal, as a shell's).
STOPPED_EXIT_CODES = {128 + stop: stop for stop in SWEEP_STOP_SIGNALS}


@dataclass
class JobContext:
    """What every worker needs to run any job of the sweep; sent once, at worker start."""

    hydra_context: HydraContext
    config: DictConfig
    task_function: TaskFunction
    singleton_state: dict[Any, Any]
    task_source_file: str | None  # cloudpickle renames it "<dynamic-code>"; tracebacks need it

    def restore_task_source_file(self) -> None:
        code = getattr(self.task_function, "__code__", None)
        if code is not None and self.task_source_file is not None:
            self.task_function.__code__ = code.replace(co_filename=self.task_source_file)


def job_context(
    hydra_context: HydraContext, config: DictConfig, task_function: TaskFunction
) -> bytes:
    """What a worker needs to run any job of the sweep, pickled as it travels to workers."""
    code = getattr(task_function, "__code__", None)
    context = JobContext(
        hydra_context,
        config,
        task_function,
        Singleton.get_state(),
        task_source_file=None if code is None else code.co_filename,
    )
    return cloudpickle.dumps(context)


def serve_jobs(
    conn: Connection,
    slot_dir: Path,
    slots: list[gpu_slots.Slot],
    threads: int,
    context_payload: bytes,
) -> None:
    """Worker main: claim a slot first (before anything can touch CUDA), take its share of the
    CPU threads, then run jobs until told to stop; Ctrl-C as the module docstring says."""
    ctrl_c: list[int] = []  # Ctrl-C between jobs

    def note(signum: int, frame: Any) -> None:
        ctrl_c.append(signum)

    signal.signal(signal.SIGINT, note)
    gpu_slots.claim_process_slot(slot_dir, slots)
    import torch  # after the claim; importing torch does not initialise CUDA

    torch.set_num_threads(threads)
    context: JobContext = cloudpickle.loads(context_payload)
    context.restore_task_source_file()
    try:
        while (job := conn.recv()) is not None:
            if ctrl_c:
                job_return = _stopped_return(*job, signal.SIGINT, None)
            else:
                signal.signal(signal.SIGINT, ctrl_c_in_a_sweep)
                job_return = _execute_job(context, *job)
                signal.signal(signal.SIGINT, note)  # between jobs: only noted
            conn.send_bytes(_portable(job_return))
            # A job's trainer, model and data hold one another in reference cycles: freed before
            # the next job allocates (a worker's memory grew 15% over 12 tiny jobs without, 2%).
            gc.collect()
    except EOFError:  # the launcher is gone
        return


def _execute_job(context: JobContext, job_num: int, overrides: list[str]) -> JobReturn:
    sweep_config = None
    try:
        setup_globals()
        Singleton.set_state(context.singleton_state)
        loader = context.hydra_context.config_loader
        sweep_config = loader.load_sweep_config(context.config, overrides)
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = job_num
            sweep_config.hydra.job.num = job_num
        HydraConfig.instance().set_config(sweep_config)
        return run_job(
            hydra_context=context.hydra_context,
            task_function=context.task_function,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
    except (SystemExit, KeyboardInterrupt) as stop:
        # A run stopped by a signal exits 128 + its number, once recorded; Ctrl-C where nothing
        # records it (before the run starts) is a KeyboardInterrupt.
        is_exit = isinstance(stop, SystemExit)
        stopped_by = STOPPED_EXIT_CODES.get(stop.code) if is_exit else signal.SIGINT
        if stopped_by is None:
            raise
        # run_job wrote the job's folder into the config it was given.
        output_dir = (
            OmegaConf.select(sweep_config, "hydra.runtime.output_dir") if sweep_config else None
        )
        return _stopped_return(job_num, overrides, stopped_by, output_dir)


def _stopped_return(
    job_num: int, overrides: list[str], stopped_by: signal.Signals, output_dir: str | None
) -> JobReturn:
    """A stopped job's return: COMPLETED where its results.json says it completed (the signal
    came as it ended), else FAILED, with the one line the launcher logs. Without ``output_dir``
    the job stopped before it had a folder."""
    job_return = JobReturn(overrides=overrides, status=JobStatus.FAILED)
    stopped = f"#{job_num} ({' '.join(overrides)}) stopped by {stopped_by.name}"
    if output_dir is None:
        job_return.return_value = JobStopped(f"{stopped} before it started")
        return job_return
    results = Path(output_dir) / RESULTS_FILE
    try:
        recorded = read_results(results).get("status", "unknown")
    except (OSError, ValueError):
        recorded = "unrecorded"
    if recorded == "completed":
        job_return.status = JobStatus.COMPLETED
    job_return.return_value = JobStopped(f"{stopped}: {results} says {recorded}")
    return job_return


def _portable(job_return: JobReturn) -> bytes:
    """Pickle a job's return for the launcher. A job's exception travels as text with its
    traceback (the traceback itself can't be pickled, nor can every exception be rebuilt); a return
    value that can't be pickled travels as its repr."""
    error = job_return._return_value
    if job_return.status == JobStatus.FAILED and not isinstance(error, JobStopped):
        job_return.return_value = JobFailedError("".join(traceback.format_exception(error)))
    try:
        return cloudpickle.dumps(job_return)
    except Exception as error:
        log.warning(f"Job return value can't be pickled ({error}); returning its repr instead")
        job_return.return_value = repr(job_return._return_value)
        return cloudpickle.dumps(job_return)
