"""One run as ``python train.py`` starts it: the fit core (:mod:`isotune.training.fit`) wrapped
in what guards it here (the folder's lock, the start's checks, resume, the stop signals, the
record's end, what the run keeps of its checkpoints) and in what it records, each in its module:
results.json and the checkpoints' record with the provenance (:mod:`.recording`), the loggers'
start (:mod:`.run_loggers`), test predictions (:mod:`.test_predictions`).
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from isotune.data import GLUEDataModule
from isotune.data.glue_format import prediction_files
from isotune.data.own_data import OwnData, complete_own_task
from isotune.data.reading import check_data_unchanged
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError, NoSpaceLeft, RunInterrupted
from isotune.model.classifier import GLUEClassifier
from isotune.norms.registry import statistics_never_updated
from isotune.prediction.writer import check_test_files
from isotune.record import folder_lock
from isotune.record.checkpoint_reading import (
    FIX_CKPT_PATH,
    FIX_OWN_LAST,
    LAST_CHECKPOINT,
    PROVENANCE_KEY,
    RECORD_KEY,
    read_checkpoint,
)
from isotune.record.checkpoints import RunCheckpointIO, keep_of_completed_run
from isotune.record.folder_links import check_links_stay_inside
from isotune.record.results import RunRecord, describe_error
from isotune.record.resume import checkpoint_to_resume, completed_record, predictions_left_unwritten
from isotune.record.same_run import check_same_run, run_config
from isotune.record.stopping import StopAtSafePoint, StopRequest, StopRequested, cluster_plugins
from isotune.tracking.reporting import counted
from isotune.tracking.wandb_logging import finish_wandb_runs
from isotune.training.cli import run_overrides, warn_of_interrupted_runs
from isotune.training.config_checks import check_train_config
from isotune.training.fit import fit, plain
from isotune.training.recording import RecordEveryEpoch, best_checkpoint, summary_line
from isotune.training.run_loggers import start_loggers
from isotune.training.test_predictions import write_test_predictions

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fine-tune and evaluate as ``cfg`` says; return (and write) the run's results. Its
    results.json gains an attempt, is rewritten every epoch, and ends ``completed``, ``failed`` (the
    error re-raised for the caller to report) or ``interrupted`` (then :class:`RunInterrupted` is
    raised). A folder holding the run's ``last.ckpt`` continues from it (``resume``).
    """
    output_dir = Path(cfg.paths.output_dir)
    rank_zero = rank_zero_only.rank == 0  # a DDP run's processes share the folder: rank 0 writes
    locked_here = rank_zero and folder_lock.hold(output_dir)  # one process per run folder
    try:
        return _started(cfg, output_dir, rank_zero)
    except Exception as error:
        full = NoSpaceLeft.behind(error)  # one message, not the chained tracebacks of the saves
        if full is None:
            raise
        raise full from error
    finally:
        if locked_here:  # else the entry point's (Hydra callback), held until the process ends
            folder_lock.release(output_dir)


def _started(cfg: DictConfig, output_dir: Path, rank_zero: bool) -> dict[str, Any]:
    """The record started (after the checks), then the run, with the stop signals handled; a
    completed run started again with its own settings is left as it stands."""
    finished = completed_record(cfg)
    if finished is not None:
        check_start(cfg)  # its settings, by its best.ckpt or its record: else one message
        log.info(
            "The run in %s completed already (best epoch %s): nothing left to train; its "
            "results.json and what it kept of its checkpoints stand as they are.",
            output_dir,
            finished.get("best_epoch"),
        )
        if (unwritten := predictions_left_unwritten(cfg, finished)) is not None:
            log.warning("%s", unwritten)
        return finished
    record = RunRecord(output_dir, write=rank_zero, **recorded_settings(cfg))
    resume_from, resumed_at_step, own_data = _checked_start(cfg, record)
    record.identity.update(primary_metric=cfg.task.primary_metric)  # task=files: its files'
    if rank_zero and not record.has_earlier_attempts:  # a new folder: a run typed again?
        warn_of_interrupted_runs(cfg, record.identity)
    record.start(str(resume_from) if resume_from else None, resumed_at_step)
    stop = StopRequest()  # SIGTERM, SIGUSR2: stop where the run can continue from
    stop.install()
    try:
        return _run(cfg, record, stop, resume_from, resumed_at_step or 0, own_data)
    finally:
        stop.uninstall()


def _run(
    cfg: DictConfig,
    record: RunRecord,
    stop: StopRequest,
    resume_from: Path | None,
    resumed_at_step: int,
    own_data: OwnData | None,
) -> dict[str, Any]:
    """The fit core (:func:`isotune.training.fit.fit`) with the record around it: its start once
    the trainer is built, every epoch, its end whatever happens; then predictions and what to
    keep. ``own_data``: a ``task=files`` task's files as the start's check read them, handed to
    the data module (read once), and their warnings."""
    output_dir = Path(cfg.paths.output_dir)
    data_warnings = own_data.warnings if own_data is not None else []
    every_epoch = RecordEveryEpoch(record, cfg)

    def before_fit(model: GLUEClassifier, datamodule: GLUEDataModule, trainer: L.Trainer) -> None:
        parameters = every_epoch.start(model, datamodule, trainer, data_warnings)
        continuing_in_folder = resume_from is not None and record.has_earlier_attempts
        start_loggers(
            trainer.loggers,
            model.task,
            {**plain(cfg), "provenance": every_epoch.provenance},
            parameters,
            record.has_earlier_attempts,
            resumed_at_step if continuing_in_folder else None,
        )

    try:
        model, datamodule, trainer = fit(
            cfg,
            own_data,
            callbacks=[
                every_epoch,
                StopAtSafePoint(stop, output_dir / LAST_CHECKPOINT),  # after BatchRngState
            ],
            plugins=[*cluster_plugins(), RunCheckpointIO()],
            ckpt_path=resume_from,
            before_fit=before_fit,
        )
        stop.hold()  # trained to the end: a signal now waits for the record, then stops the job
        outcome = every_epoch.outcome()  # before predict reloads the best
        if cfg.write_test_predictions:
            provenance, epoch = every_epoch.provenance, outcome["best_epoch"]
            write_test_predictions(trainer, model, datamodule, output_dir, provenance, epoch)
        keep_of_completed_run(trainer, cfg.checkpoint.keep)  # last.ckpt only serves a continuation
        outcome["best_checkpoint"] = best_checkpoint(trainer)
    except BaseException as error:
        stop.hold()  # a signal now must not cut the record short
        trainer = every_epoch.trainer
        stopped_by = _stopping_signal(error, trainer)
        try:
            results = _record_end(record, error, stopped_by, every_epoch, resumed_at_step)
        except OSError as unwritten:  # a full disk: W&B and the requeue hand-over still follow
            log.error("Could not record the run's end in results.json: %s", unwritten)
            results = record.results
        finish_wandb_runs(trainer.loggers if trainer else [], results)
        if stopped_by is not None:  # Lightning raises SystemExit for Ctrl-C
            raise RunInterrupted(stopped_by, stop.hand_over()) from error
        raise
    warnings = [*data_warnings, *_warnings(model)]
    results = record.finish("completed", warnings=warnings, **outcome)
    finish_wandb_runs(trainer.loggers, results)
    log.info("%s", summary_line(results))
    if stop.signal is not None:  # the job (a sweep, a scheduler) was asked to stop all the same
        raise RunInterrupted(stop.signal, stop.hand_over(), completed=True)
    return results


def _warnings(model: GLUEClassifier) -> list[str]:
    """What makes a completed run not what its record names, logged and kept in results.json."""
    warnings = []
    if statistics_never_updated(model.norm):
        warnings.append(
            f"norm={model.hparams['norm']['name']} never updated its running statistics (no "
            "training batch of 2 or more examples reached it), so it ran as its initial state, "
            "the identity for isobn and whitening: this run is not a run with that norm."
        )
    for warning in warnings:
        log.warning(warning)
    return warnings


def _record_end(
    record: RunRecord,
    error: BaseException,
    stopped_by: signal.Signals | None,
    every_epoch: RecordEveryEpoch,
    resumed_at_step: int,
) -> dict[str, Any]:
    """End the record ``interrupted`` or ``failed``, even when gathering the results fails too:
    then ``failed`` with both errors, so no record outlives its process as ``running``. An
    attempt that ended before training got past its checkpoint keeps the record's results."""
    try:
        trainer = every_epoch.trainer
        trained = trainer is not None and trainer.global_step >= max(resumed_at_step, 1)
        outcome = every_epoch.outcome() if trained else {}
    except Exception as second:
        log.exception("Could not gather the results after %s", describe_error(error))
        both = f"{describe_error(error)}; then, while recording it: {describe_error(second)}"
        return record.finish("failed", both)
    if stopped_by is None:
        return record.finish("failed", error, **outcome)
    return record.finish("interrupted", interrupted_by=stopped_by.name, **outcome)


def _stopping_signal(error: BaseException, trainer: L.Trainer | None) -> signal.Signals | None:
    """The signal that stopped the run, None for an error. SIGTERM and SIGUSR2: the
    :class:`StopRequested` of :mod:`isotune.record.stopping`. SIGINT: a ``KeyboardInterrupt``, or
    the plain ``SystemExit`` Lightning raises after catching one inside ``fit`` (it marks the
    trainer interrupted then, as for any error, hence the exact type)."""
    if isinstance(error, StopRequested):
        return error.signal
    if isinstance(error, SIGTERMException):  # Lightning's own handler, where ours is not set
        return signal.SIGTERM
    lightning_ctrl_c = type(error) is SystemExit and trainer is not None and trainer.interrupted
    if isinstance(error, KeyboardInterrupt) or lightning_ctrl_c:
        return signal.SIGINT
    return None


def check_start(cfg: DictConfig) -> tuple[Path | None, dict[str, Any] | None, OwnData | None]:
    """Check the config and that no link leads out of the run folder, and read the checkpoint to
    continue from (data only) and compare it with the config: the checkpoint's path and contents,
    or (None, None) for a fresh start; and a ``task=files`` task's files as they were read to
    complete it (:func:`complete_own_task`), for the run to take on.
    Raises :class:`IsotuneError` for a refused start. Also run before Hydra rewrites a folder
    that holds a run (:class:`isotune.training.hydra_callbacks.StartCheckInRunFolder`)."""
    check_train_config(cfg)  # before any model loads: bad values fail in seconds
    check_links_stay_inside(cfg.paths.output_dir)
    own_data = complete_own_task(cfg)
    if cfg.write_test_predictions:  # MNLI's three test files, before it trains
        task = TaskSpec.from_config(plain(cfg.task))
        check_test_files(prediction_files(task), cfg.paths.glue_dir)
    resume_from = checkpoint_to_resume(cfg, recorded_settings(cfg))
    if resume_from is None:
        return None, None, own_data
    checkpoint = read_checkpoint(
        resume_from, fix=FIX_CKPT_PATH if cfg.ckpt_path is not None else FIX_OWN_LAST
    )
    recorded_data = (checkpoint.get(PROVENANCE_KEY) or {}).get("data") or {}
    task = TaskSpec.from_config(plain(cfg.task))
    check_data_unchanged(recorded_data, task, cfg.paths.glue_dir, resume_from)
    check_same_run(checkpoint, resume_from, run_config(cfg))
    return resume_from, checkpoint, own_data


def _checked_start(
    cfg: DictConfig, record: RunRecord
) -> tuple[Path | None, int | None, OwnData | None]:
    """:func:`check_start` before anything heavy happens: the checkpoint and the step it
    resumes at, or (None, None) for a fresh start; and the ``task=files`` files read.

    A refused start is recorded ``failed`` in a new folder; in a folder that already holds a run
    it changes nothing there (a resume typed with other settings must not overwrite its record)."""
    try:
        resume_from, checkpoint, own_data = check_start(cfg)
    except IsotuneError as error:
        if not record.has_earlier_attempts:
            record.finish("failed", error)
        raise
    if checkpoint is None:
        return None, None, own_data
    if not record.has_earlier_attempts and cfg.ckpt_path is None and RECORD_KEY in checkpoint:
        record.rebuild(checkpoint[RECORD_KEY], str(resume_from))  # results.json lost or cut
    step = int(checkpoint["global_step"])
    log.info(
        "Resuming from %s: step %d, %s done (%s)",
        resume_from,
        step,
        counted(len(checkpoint.get("isotune_history", [])), "epoch"),
        "this run's own checkpoint" if cfg.ckpt_path is None else "ckpt_path",
    )
    return resume_from, step, own_data


def recorded_settings(cfg: DictConfig) -> dict[str, Any]:
    """What a run records in its results.json of what it runs: the tables' axes, its seeds and
    its command-line overrides."""
    return {
        "task": cfg.task.name,
        "model": cfg.model.name,
        "model_name_or_path": cfg.model.name_or_path,
        "norm": cfg.norm.name,
        "reg": cfg.reg.name,
        "reg_weight": _as_float(cfg.reg.weight),
        "adapt": cfg.adapt.name,
        "seed": cfg.seed,
        "seed_init": cfg.seed_init,
        "seed_data": cfg.seed_data,
        "primary_metric": cfg.task.primary_metric,
        "overrides": run_overrides(),
    }


def _as_float(value: Any) -> Any:
    """A number as a float, so that tables see reg.weight=-1 and -1.0 as one weight; anything
    else as given, for the config check to report."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
