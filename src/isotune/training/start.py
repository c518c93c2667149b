"""A run's start, checked before anything heavy happens: its config, the links of its folder, a
``task=files`` task's files, MNLI's test files, and the checkpoint it continues from (data only,
from the same configuration and data); and what its results.json records of what it runs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from isotune.data.glue_format import prediction_files
from isotune.data.own_data import OwnData, complete_own_task
from isotune.data.reading import check_data_unchanged
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.prediction.writer import check_test_files
from isotune.record.results import RunRecord
from isotune.record.resume import (
    FIX_CKPT_PATH,
    FIX_OWN_LAST,
    PROVENANCE_KEY,
    RECORD_KEY,
    check_links_stay_inside,
    check_same_run,
    checkpoint_to_resume,
    read_checkpoint,
    run_config,
)
from isotune.tracking.reporting import counted
from isotune.training.config_checks import check_train_config

log = logging.getLogger(__name__)


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
        task = TaskSpec.from_config(OmegaConf.to_container(cfg.task, resolve=True))
        check_test_files(prediction_files(task), cfg.paths.glue_dir)
    resume_from = checkpoint_to_resume(cfg, recorded_settings(cfg))
    if resume_from is None:
        return None, None, own_data
    checkpoint = read_checkpoint(
        resume_from, fix=FIX_CKPT_PATH if cfg.ckpt_path is not None else FIX_OWN_LAST
    )
    recorded_data = (checkpoint.get(PROVENANCE_KEY) or {}).get("data") or {}
    task = TaskSpec.from_config(OmegaConf.to_container(cfg.task, resolve=True))
    check_data_unchanged(recorded_data, task, cfg.paths.glue_dir, resume_from)
    check_same_run(checkpoint, resume_from, run_config(cfg))
    return resume_from, checkpoint, own_data


def checked_start(
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


def run_overrides() -> list[str]:
    """The command-line overrides of this job (empty outside a Hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def _as_float(value: Any) -> Any:
    """A number as a float, so that tables see reg.weight=-1 and -1.0 as one weight; anything
    else as given, for the config check to report."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
