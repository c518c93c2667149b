"""Continuing a run where it stopped: which checkpoint, and whether it belongs to this run
(docs/training.md#one-run-one-folder). The checkpoint must be readable
(:mod:`isotune.record.checkpoint_reading`) and from the same computation
(:mod:`isotune.record.same_run`), checked before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from isotune.errors import IsotuneError
from isotune.record.checkpoint_reading import LAST_CHECKPOINT, MODEL_KEYS, read_checkpoint
from isotune.record.results import RESULTS_FILE, kept_model_file, read_results
from isotune.record.same_run import check_same_run, recorded_differences, run_config

RESUME_MODES = ("auto", "never")
PREDICTIONS_FOLDER = "predictions"  # <output_dir>/predictions/<TASK>.tsv (write_test_predictions)


def checkpoint_to_resume(cfg: DictConfig, settings: Mapping[str, Any]) -> Path | None:
    """``ckpt_path`` if given; else, with ``resume=auto``, the run folder's ``last.ckpt`` if it
    has one (the same run started again in its folder); else None: a fresh start, or nothing to
    do for a completed run started again with its own settings (:func:`completed_record`;
    ``settings``: what this start would record in results.json, its overrides included)."""
    if cfg.ckpt_path is not None:
        return Path(cfg.ckpt_path).expanduser()
    if cfg.get("resume", "auto") != "auto":
        return None
    last = Path(cfg.paths.output_dir) / LAST_CHECKPOINT
    if last.is_file():
        return last
    record = completed_record(cfg)
    if record is not None:
        check_same_completed_run(Path(cfg.paths.output_dir), record, run_config(cfg), settings)
    return None


def completed_record(cfg: DictConfig) -> dict[str, Any] | None:
    """The record of the completed run in ``cfg``'s folder that ``cfg`` starts again
    (``resume=auto``, no ``ckpt_path``), when it kept no last.ckpt (``checkpoint.keep``); else
    None. Such a run has nothing left to train: started again (a sweep typed again, a late SLURM
    requeue) it stands as it is. One that trained no step has nothing to lose, and starts afresh."""
    if cfg.ckpt_path is not None or cfg.get("resume", "auto") != "auto":
        return None
    folder = Path(cfg.paths.output_dir)
    if (folder / LAST_CHECKPOINT).is_file():
        return None
    try:
        record = read_results(folder / RESULTS_FILE)
    except (OSError, ValueError):  # no record, or one the run will report itself
        return None
    return record if record.get("status") == "completed" and record.get("steps") else None


def interrupted_runs_like(folder: Path, settings: Mapping[str, Any]) -> list[Path]:
    """The folders beside ``folder`` (a new run's) holding an interrupted run of the same
    overrides and ``settings`` that can continue (its ``last.ckpt``), oldest first. Only
    results.json files beside a last.ckpt are parsed, and only where ``interrupted`` is in them:
    a start among thousands of runs stays quick."""
    runs = []
    for record_file in sorted(folder.parent.glob(f"*/{RESULTS_FILE}")):
        if record_file.parent == folder or not (record_file.parent / LAST_CHECKPOINT).is_file():
            continue
        try:
            if '"interrupted"' not in record_file.read_text(encoding="utf-8"):
                continue
            record = read_results(record_file)
        except (OSError, UnicodeDecodeError, ValueError):  # not a run's record to compare
            continue
        if (
            record.get("status") == "interrupted"
            and sorted(record.get("overrides") or []) == sorted(settings["overrides"])
            and not recorded_differences(record, settings)
        ):
            runs.append(record_file.parent)
    return runs


def predictions_left_unwritten(cfg: DictConfig, record: Mapping[str, Any]) -> str | None:
    """What to type for the test predictions of a completed run started again with
    ``write_test_predictions=true`` and none written (a run writes them after training, and this
    one trains no more); None where the option is off or its predictions are there. From its kept
    model ``predict.py`` writes them; a run that kept none must train again."""
    folder = Path(cfg.paths.output_dir)
    if not cfg.write_test_predictions or any((folder / PREDICTIONS_FOLDER).glob("*.tsv")):
        return None
    best_file = kept_model_file(folder, record)
    said = (
        f"write_test_predictions=true writes nothing here: the run in {folder} completed without "
        "them, and a completed run trains no more."
    )
    if best_file is not None and best_file.is_file():
        return (
            f"{said} Fix: write them from its best model: python predict.py ckpt_path={best_file}"
        )
    return (
        f"{said} It kept no model (checkpoint.keep=none) to predict with. Fix: train it again "
        "with its predictions: the same command with resume=never added (over its results, in "
        "this folder), or without hydra.run.dir (in a new folder)."
    )


def check_same_completed_run(
    folder: Path, record: Mapping[str, Any], current: Mapping, settings: Mapping[str, Any]
) -> None:
    """Refuse to start again the completed run in ``folder`` with settings other than it had (by
    its best.ckpt's config, else by the ``settings`` its results.json records): starting afresh
    would train it again over its results."""
    best_file = kept_model_file(folder, record)
    if best_file is not None and best_file.is_file():
        check_same_run(read_checkpoint(best_file, required=MODEL_KEYS), best_file, current)
        return
    differences = recorded_differences(record, settings)
    if differences:
        listed = "\n".join(f"  {line}" for line in differences)
        raise IsotuneError(
            f"The run folder {folder} holds a completed run that kept no model "
            "(checkpoint.keep=none), recorded in its results.json with other settings than this "
            f"start's (recorded -> now):\n{listed}\nTraining afresh here would overwrite its "
            "results. Fix: run with its settings (it then stands as it is), or in a new folder "
            "(leave hydra.run.dir unset); to train it again here over its results, add "
            "resume=never."
        )
