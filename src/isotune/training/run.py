"""One fine-tuning run from a composed config: data, model, trainer, fit, results.json.

``train.py`` is only the Hydra entry point; everything a run does is here, top to bottom.
"""

from __future__ import annotations

import json
import logging
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf, open_dict

from isotune.callbacks.isotropy import IsotropyMonitor
from isotune.dashboard.loggers import declare_dashboard
from isotune.data import GLUEDataModule
from isotune.data.datamodule import FILE_KEYS, module_options
from isotune.data.glue_format import prediction_files
from isotune.data.own_data import OwnData, own_task
from isotune.data.reading import check_data_unchanged
from isotune.data.tasks import TaskSpec, task_kind
from isotune.errors import IsotuneError, NoSpaceLeft, RunInterrupted
from isotune.model.adaptation import parameter_counts
from isotune.model.classifier import GLUEClassifier
from isotune.model.compiling import compile_encoder
from isotune.model.encoders import load_tokenizer
from isotune.norms.registry import statistics_never_updated
from isotune.prediction.writer import (
    check_test_files,
    prediction_source,
    write_prediction_files,
)
from isotune.record import folder_lock
from isotune.record.checkpoints import (
    RunCheckpointIO,
    RunConfigInCheckpoints,
    keep_of_completed_run,
)
from isotune.record.csv_logging import RunCSVLogger
from isotune.record.progress import EpochsFromOneProgressBar
from isotune.record.results import RunRecord, describe_error
from isotune.record.resume import (
    FIX_CKPT_PATH,
    FIX_OWN_LAST,
    LAST_CHECKPOINT,
    PREDICTIONS_FOLDER,
    PROVENANCE_KEY,
    RECORD_KEY,
    check_links_stay_inside,
    check_same_run,
    checkpoint_to_resume,
    completed_record,
    predictions_left_unwritten,
    read_checkpoint,
    run_config,
)
from isotune.record.stopping import StopAtSafePoint, StopRequest, StopRequested, cluster_plugins
from isotune.tracking.metric_keys import params_key
from isotune.tracking.reporting import counted
from isotune.tracking.wandb_logging import finish_wandb_runs
from isotune.training.cli import warn_of_interrupted_runs
from isotune.training.config_checks import check_train_config
from isotune.training.epoch_choice import callbacks_selecting
from isotune.training.instantiate import instantiate_all
from isotune.training.lightning_tips import silence_lightning_tips
from isotune.training.run_provenance import run_provenance
from isotune.training.trivial import TrivialScore, failure_record, trivial_score

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fine-tune and evaluate as ``cfg`` says; return (and write) the run's results.

    ``<output_dir>/results.json`` gains an attempt, is rewritten at every epoch end and ends
    ``completed``, ``failed`` with the error, or ``interrupted`` by Ctrl-C, SIGTERM or SIGUSR2
    (``interrupted_by``, then :class:`RunInterrupted` is raised); an error is re-raised for the
    caller to report. A folder holding the run's ``last.ckpt`` continues from it (``resume``).
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
    """Data, model, trainer, fit, predictions; the record's end, whatever happens.
    ``own_data``: a ``task=files`` task's files as the start's check read them, handed to the
    data module (read once), and their warnings."""
    output_dir = Path(cfg.paths.output_dir)
    trainer = model = trivial = None
    margin = cfg.failure.margin
    data_warnings = own_data.warnings if own_data is not None else []
    try:
        model, datamodule = model_and_data(cfg, own_data)
        task = model.task  # the run's one TaskSpec
        parameters = parameter_counts(model)
        for warning in data_warnings:
            log.warning(warning)
        record.update(parameters=parameters, data=datamodule.data_record(), warnings=data_warnings)
        log.info(
            "adapt=%s: %d of %d parameters train (%.3g%%)",
            model.adaptation,
            parameters["trainable"],
            parameters["total"],
            100 * parameters["trainable_fraction"],
        )
        in_checkpoints = RunConfigInCheckpoints(run_config(cfg), _overrides())
        every_epoch = RecordEveryEpoch(record, margin)  # judged once the trainer is made
        callbacks = [
            *instantiate_all(callbacks_selecting(cfg.get("callbacks"), cfg.select_epoch)),
            every_epoch,
            in_checkpoints,
            StopAtSafePoint(stop, output_dir / LAST_CHECKPOINT),  # after BatchRngState
        ]
        if cfg.trainer.get("enable_progress_bar", True):
            callbacks.append(EpochsFromOneProgressBar())
        silence_lightning_tips()  # the Trainer prints them as it sets its loggers up
        trainer: L.Trainer = instantiate(
            cfg.trainer,
            callbacks=callbacks,
            logger=instantiate_all(cfg.get("logger")) or False,
            plugins=[*cluster_plugins(), RunCheckpointIO()],
        )
        # The trivial predictor of the examples validation scores: under limit_val_batches
        # (debug=limit) the longest few, whose majority need not be the whole split's.
        scored = scored_examples(datamodule, task.primary_split, trainer)
        labels = datamodule.dataset(task.primary_split).labels
        trivial = trivial_score(task, [labels[i] for i in scored]) if scored else None
        every_epoch.trivial = trivial
        record.update(
            dev_examples={"scored": len(scored), "of": len(labels)},
            **(failure_record(trivial, margin, {}) if trivial else {}),
        )
        if cfg.get("compile", False):  # before anything runs the encoder
            compile_encoder(model.encoder, trainer.strategy.root_device)
        in_checkpoints.provenance = run_provenance(cfg, model, trainer)
        record.note_provenance(in_checkpoints.provenance)
        continuing_in_folder = resume_from is not None and record.has_earlier_attempts
        declare_dashboard(trainer.loggers, task)  # iso/* against its epoch; the layout
        for logger in trainer.loggers:
            logger.log_hyperparams({**_plain(cfg), "provenance": in_checkpoints.provenance})
            if isinstance(logger, RunCSVLogger) and record.has_earlier_attempts:
                # the steps trained again; all of them when the run starts from the beginning
                logger.drop_rows_after(resumed_at_step if continuing_in_folder else None)
            if not continuing_in_folder:  # else logged by the run's first attempt
                logger.log_metrics({params_key(name): n for name, n in parameters.items()}, step=0)
        trainer.fit(model, datamodule=datamodule, ckpt_path=resume_from)
        stop.hold()  # trained to the end: a signal now waits for the record, then stops the job
        outcome = _outcome(model, trainer, trivial, margin)  # before predict reloads the best
        if cfg.write_test_predictions:
            source = _prediction_source(
                cfg, trainer, task, in_checkpoints.provenance, outcome["best_epoch"]
            )
            write_test_predictions(
                trainer, model, datamodule, output_dir / PREDICTIONS_FOLDER, source
            )
        keep_of_completed_run(trainer, cfg.checkpoint.keep)  # last.ckpt only serves a continuation
        outcome["best_checkpoint"] = _best_checkpoint(trainer)
    except BaseException as error:
        stop.hold()  # a signal now must not cut the record short
        stopped_by = _stopping_signal(error, trainer)
        judge = (trivial, margin)
        try:
            results = _record_end(record, error, stopped_by, model, trainer, resumed_at_step, judge)
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


def model_and_data(
    cfg: DictConfig, own_data: OwnData | None
) -> tuple[GLUEClassifier, GLUEDataModule]:
    """The run's model and data module as ``cfg`` names them (``own_data``: a ``task=files``
    task's files as read, or None): a run's, and those a preview times a few steps of
    (:mod:`isotune.training.step_timing`)."""
    # The global generators: the new layers' initialisation and dropout. The batch order and
    # the subsets drawn from the data have generators of their own, seeded by seed_data.
    L.seed_everything(cfg.seed_init, workers=True)
    model = GLUEClassifier(
        task=_plain(cfg.task),
        model=_plain(cfg.model),
        norm=_plain(cfg.norm),
        optim=_plain(cfg.optim),
        reg=_plain(cfg.reg),
        adapt=_plain(cfg.adapt),
        select_epoch=cfg.select_epoch,
    )
    datamodule = GLUEDataModule(
        model.task,
        load_tokenizer(cfg.model.name_or_path),
        glue_dir=cfg.paths.glue_dir,
        seed=cfg.seed_data,
        examples=own_data.examples if own_data is not None else None,
        **module_options(cfg.data),
    )
    return model, datamodule


def summary_line(results: dict[str, Any]) -> str:
    """The run's outcome in one line: the best dev score, the trivial predictor's, the verdict."""
    metric, trivial = results["primary_metric"], results.get("trivial")
    best = results["best"].get(metric)
    shown = "none" if best is None else f"{best:.4f} (epoch {results['best_epoch']})"
    if trivial is None:  # limit_val_batches=0: no dev example scored
        return f"Best dev {metric}: {shown}; no dev example scored, so no verdict"
    verdict = {True: "learned", False: "FAILED TO LEARN", None: "no verdict"}[results["learned"]]
    return (
        f"Best dev {metric}: {shown}; {trivial['predictor']}: {trivial['score']:.4f}; "
        f"{verdict} (margin {results['margin']:g})"
    )


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
        task = TaskSpec.from_config(_plain(cfg.task))
        check_test_files(prediction_files(task), cfg.paths.glue_dir)
    resume_from = checkpoint_to_resume(cfg, recorded_settings(cfg))
    if resume_from is None:
        return None, None, own_data
    checkpoint = read_checkpoint(
        resume_from, fix=FIX_CKPT_PATH if cfg.ckpt_path is not None else FIX_OWN_LAST
    )
    recorded_data = (checkpoint.get(PROVENANCE_KEY) or {}).get("data") or {}
    task = TaskSpec.from_config(_plain(cfg.task))
    check_data_unchanged(recorded_data, task, cfg.paths.glue_dir, resume_from)
    check_same_run(checkpoint, resume_from, run_config(cfg))
    return resume_from, checkpoint, own_data


def complete_own_task(cfg: DictConfig) -> OwnData | None:
    """A ``task=files`` task completed in ``cfg`` from its files (text columns, labels, metrics:
    :func:`isotune.data.own_data.own_task`), so that the run, its checkpoints and its records
    see a whole task, and each bad file is refused before anything trains; once per config.
    Returns what reading the files gave (None: no files read, a GLUE task or one completed
    before). A GLUE task with ``data.*_file`` set is refused: it reads GLUE's files, never
    those."""
    files = {key: cfg.data.get(key) for key in FILE_KEYS}
    if not task_kind(cfg.task).own_data:
        named = [f"data.{key}={value}" for key, value in files.items() if value is not None]
        if named:
            raise IsotuneError(
                f"{' '.join(named)} names your own data, but task={cfg.task.name} reads GLUE's "
                f"{cfg.task.name} files. Fix: task=files {' '.join(named)}, or leave them "
                "unset for GLUE."
            )
        return None
    if cfg.task.num_labels is not None:
        return None
    own_data = own_task(_plain(cfg.task), test=bool(cfg.write_test_predictions))
    with open_dict(cfg):
        cfg.task = own_data.task
    return own_data


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


def _record_end(
    record: RunRecord,
    error: BaseException,
    stopped_by: signal.Signals | None,
    model: GLUEClassifier | None,
    trainer: L.Trainer | None,
    resumed_at_step: int,
    judge: tuple[TrivialScore | None, float],
) -> dict[str, Any]:
    """End the record ``interrupted`` or ``failed``, even when gathering the results fails too:
    then ``failed`` with both errors, so no record outlives its process as ``running``. An
    attempt that ended before training got past its checkpoint keeps the record's results."""
    try:
        trained = trainer is not None and trainer.global_step >= max(resumed_at_step, 1)
        outcome = _outcome(model, trainer, *judge) if trained else {}
    except Exception as second:
        log.exception("Could not gather the results after %s", describe_error(error))
        both = f"{describe_error(error)}; then, while recording it: {describe_error(second)}"
        return record.finish("failed", both)
    if stopped_by is None:
        return record.finish("failed", error, **outcome)
    return record.finish("interrupted", interrupted_by=stopped_by.name, **outcome)


def _outcome(
    model: GLUEClassifier | None,
    trainer: L.Trainer | None,
    trivial: TrivialScore | None,
    margin: float,
) -> dict[str, Any]:
    """Best-epoch and final dev metrics, whether the best beat the ``trivial`` predictor by the
    ``margin``, isotropy, history and step count, as far as they exist."""
    history = model.history if model is not None else []
    best = model.best_epoch() if model is not None else None
    callbacks = trainer.callbacks if trainer is not None else []
    monitor = next((c for c in callbacks if isinstance(c, IsotropyMonitor)), None)
    return {
        "best_epoch": best["epoch"] if best else None,
        "best": _metrics_only(best) if best else {},
        **(failure_record(trivial, margin, best or {}) if trivial is not None else {}),
        "final": _metrics_only(history[-1]) if history else {},
        "history": history,
        "isotropy": monitor.summary(best["epoch"] if best else None) if monitor else {},
        "steps": trainer.global_step if trainer is not None else 0,
        "best_checkpoint": _best_checkpoint(trainer),
    }


class RecordEveryEpoch(L.Callback):
    """Rewrites results.json at every epoch end with the results so far, so that a job killed
    without a chance to record its end (SIGKILL) is told from a slow one by ``updated_at``; and
    keeps it in every checkpoint, so a results.json lost or cut short is rebuilt on resume. Its
    ``trivial`` score is set once the trainer says which examples validation scores."""

    def __init__(self, record: RunRecord, margin: float) -> None:
        self.record = record
        self.trivial: TrivialScore | None = None
        self.margin = margin

    def on_train_epoch_end(self, trainer: L.Trainer, module: GLUEClassifier) -> None:
        self.record.update(**_outcome(module, trainer, self.trivial, self.margin))

    def on_save_checkpoint(self, trainer: L.Trainer, module: GLUEClassifier, checkpoint: dict):
        """The record so far, as JSON data (what results.json holds), to rebuild it from."""
        checkpoint[RECORD_KEY] = json.loads(json.dumps(self.record.results, default=str))


def scored_examples(datamodule: GLUEDataModule, split: str, trainer: L.Trainer) -> list[int]:
    """The examples of ``split`` that validation scores, in index order: on each process, the
    first batches of its share of the length-sorted batches (:meth:`GLUEDataModule.eval_batches`)
    that the trainer's ``limit_val_batches`` keeps, by Lightning's rule (an int: that many
    batches; a fraction: that share, rounded down). All of them by default; under ``debug=limit``
    (2 batches) the longest 2 x ``data.eval_batch_size``."""
    limit, processes = trainer.limit_val_batches, trainer.world_size
    scored = []
    for rank in range(processes):
        batches = list(datamodule.eval_batches(split, processes, rank))
        kept = min(len(batches), limit) if isinstance(limit, int) else int(len(batches) * limit)
        scored += [index for batch in batches[:kept] for index in batch]
    return sorted(scored)


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


def _metrics_only(entry: dict[str, float]) -> dict[str, float]:
    return {key: value for key, value in entry.items() if key not in ("epoch", "step")}


def _best_checkpoint(trainer: L.Trainer | None) -> str | None:
    """The path of the monitored checkpoint (best.ckpt), not of the every-epoch last.ckpt."""
    callbacks = trainer.checkpoint_callbacks if trainer is not None else []
    monitored = [callback for callback in callbacks if callback.monitor is not None]
    best = monitored[0].best_model_path if monitored else ""
    return best if best and Path(best).is_file() else None  # checkpoint.keep=none removes it


def write_test_predictions(
    trainer: L.Trainer,
    model: GLUEClassifier,
    datamodule: GLUEDataModule,
    folder: Path,
    source: dict[str, Any],
) -> dict[str, int]:
    """Predict the test set with the best checkpoint and write it as ``predict.py`` does
    (:mod:`isotune.prediction.writer`): GLUE's submission files (MNLI: MNLI-m, MNLI-mm, AX),
    or a ``task=files`` task's ``<task.name>.tsv``, each with its sidecar; the task's own test
    split as the data module holds it (a ``task=files`` file read once)."""
    data = {
        "tokenizer": datamodule.tokenizer,
        "max_length": datamodule.max_length,
        "eval_batch_size": datamodule.eval_batch_size,
    }
    task = datamodule.task
    files = [
        replace(file, examples=tuple(datamodule.splits[task.test_split]))
        if file.spec == task
        else file
        for file in prediction_files(task)
    ]
    return write_prediction_files(
        trainer,
        model,
        files,
        folder,
        datamodule.glue_dir,
        data,
        source,
        ckpt_path=source["checkpoint"],
    )


def _prediction_source(
    cfg: DictConfig, trainer: L.Trainer, task: TaskSpec, provenance: Any, epoch: int | None
) -> dict[str, Any]:
    """The sidecars' record of the weights predicted with: the best checkpoint; without a
    checkpoint callback (``callbacks=none``), the last epoch's weights (no file)."""
    best = _best_checkpoint(trainer)
    checkpoint = Path(best) if best is not None else None
    name_or_path = cfg.model.name_or_path
    output_dir = Path(cfg.paths.output_dir)
    return prediction_source(output_dir, checkpoint, provenance, task, name_or_path, epoch)


def _as_float(value: Any) -> Any:
    """A number as a float, so that tables see reg.weight=-1 and -1.0 as one weight; anything
    else as given, for the config check to report."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _plain(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


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
        "overrides": _overrides(),
    }


def _overrides() -> list[str]:
    """The command-line overrides of this job (empty outside a Hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)
