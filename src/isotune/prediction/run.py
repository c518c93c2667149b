"""One run's kept model on the dev and test sets: ``predict.py``, top to bottom.

Every input is checked before anything is written (:func:`check_inputs`; the output folder lies
outside the run's, which stays as its run left it); the model is built with the run's own
settings (:mod:`.kept_model`) and scores the dev set as validation did, beside the scores the run
recorded; each test file is predicted in GLUE's format (:mod:`isotune.data.glue_format`) with a
sidecar saying where it came from; ``predictions.json`` holds the dev scores, the recorded ones
and the largest difference.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig, OmegaConf

from isotune.atomic_files import write_text
from isotune.data import GLUEDataModule
from isotune.data.glue_format import SubmissionFile, prediction_files
from isotune.data.own_data import read_own_split
from isotune.data.reading import changed_splits
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.model.encoders import load_tokenizer
from isotune.prediction.kept_model import KeptModel, read_kept_model
from isotune.prediction.writer import (
    check_data_file,
    write_prediction_files,
)
from isotune.record.checkpoint_reading import PROVENANCE_KEY

log = logging.getLogger(__name__)
SUMMARY_FILE = "predictions.json"


def predict(
    cfg: DictConfig, checked: tuple[KeptModel, list[SubmissionFile]] | None = None
) -> dict[str, Any]:
    """Score the dev set and write the test predictions as ``cfg`` (``conf/predict.yaml``) says;
    return (and write) ``predictions.json``. ``checked``: what :func:`check_inputs` found before the
    output folder was made (handed over by :class:`isotune.training.hydra_callbacks.InputsChecked`),
    so the checkpoint is read and the data hashed once; None: checked here."""
    output_dir = Path(cfg.paths.output_dir)
    kept, files = checked if checked is not None else check_inputs(*inputs_of(cfg, output_dir))
    if cfg.test and not files:
        log.info(
            "Task %s (task=files) had no test file (data.test_file): the dev set only. To "
            "predict a file: test_file=<path> (CSV, TSV or JSONL with the run's text columns).",
            kept.task.name,
        )
    summary = predict_run(kept, files, output_dir, cfg.paths.glue_dir, cfg.accelerator, cfg.dev)
    write_text(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def inputs_of(cfg: DictConfig, output_dir: Path) -> tuple:
    """The arguments of :func:`check_inputs` for ``cfg`` writing into ``output_dir``."""
    return (
        cfg.ckpt_path,
        typed_task(cfg),
        cfg.paths.glue_dir,
        output_dir.resolve(),
        cfg.dev,
        cfg.test,
        cfg.test_file,
    )


def typed_task(cfg: DictConfig) -> str | None:
    """The task typed on the command line (``task=rte`` selects ``conf/task/rte.yaml``), None
    when none was: the checkpoint's task is then the one predicted."""
    return OmegaConf.select(cfg, "task.name", default=None)


def check_inputs(
    ckpt_path: str | None,
    task: str | None,
    glue_dir: str | None,
    output_dir: Path,
    dev: bool = True,
    test: bool = True,
    test_file: str | None = None,
) -> tuple[KeptModel, list[SubmissionFile]]:
    """The checkpoint, read and checked, and the prediction files to write (``test_file``: the
    file a ``task=files`` run predicts instead of its own ``data.test_file``); one
    :class:`IsotuneError` naming the fix for the first thing that would stop the run."""
    kept = read_kept_model(ckpt_path, task)
    check_outside_run_folder(output_dir, kept.run_folder)
    if test_file is not None:
        kept = dataclasses.replace(kept, task=with_test_file(kept.task, test_file))
    files = files_to_predict(kept.task) if test else []
    if dev:
        check_dev_unchanged(kept, glue_dir)
    if glue_dir is not None:
        for split in kept.task.eval_splits if dev else ():
            check_data_file(kept.task, split, glue_dir, "the dev set scored")
        for file in files:
            check_data_file(file.spec, file.spec.test_split, glue_dir, f"read for {file.file_name}")
    files = [  # a task=files test file read (a missing column stops now), and handed on
        dataclasses.replace(
            file,
            examples=tuple(
                read_own_split(
                    file.spec, file.spec.test_split, text_fix=run_text_columns_fix(file.spec)
                )
            ),
        )
        if file.spec.reads_own_files
        else file
        for file in files
    ]
    return kept, files


def run_text_columns_fix(task: TaskSpec) -> str:
    """The fix for a file to predict without the run's text columns: renaming them, since the
    checkpoint fixes which columns its model reads (training's ``task.text_fields=`` is no
    setting of predict.py)."""
    columns = " and ".join(repr(name) for name in task.text_fields)
    plural = "s" if len(task.text_fields) > 1 else ""
    return (
        f"rename the file's text column{plural} to the run's, {columns}: the checkpoint's run "
        f"was trained on {'those columns' if plural else 'that column'}, and predict.py reads "
        "the same"
    )


def check_dev_unchanged(kept: KeptModel, glue_dir: str | None) -> None:
    """Refuse to score a dev file that reads otherwise than when the run scored it: its scores
    would be set beside the run's recorded ones as the same model's on the same data."""
    recorded = (kept.checkpoint.get(PROVENANCE_KEY) or {}).get("data") or {}
    scored = {split: file for split, file in recorded.items() if split in kept.task.eval_splits}
    changed = changed_splits(scored, kept.task, glue_dir)
    if changed:
        split, path, then, now = changed[0]
        raise IsotuneError(
            f"{path} (the {split} split) changed since the run of {kept.file} scored it: "
            f"its sha256 was {then}, it is {now} now, so its dev scores would not be the "
            "run's. Fix: restore the file as the run read it, or dev=false to predict the "
            "test set only."
        )


def with_test_file(task: TaskSpec, test_file: str) -> TaskSpec:
    """``task`` (a ``task=files`` run's) predicting ``test_file``: a researcher's new data
    predicted by a model trained before it existed."""
    if not task.own_data:
        raise IsotuneError(
            f"test_file={test_file}: a file to predict is given to a run of a task=files task, "
            f"and this checkpoint's task {task.name} is GLUE's, whose test set is GLUE_DIR's "
            f"{task.glue_dir}/{task.files[task.test_split]}. Fix: drop test_file=, or point "
            "ckpt_path at the checkpoint of a task=files run."
        )
    path = Path(test_file).expanduser().resolve()
    return dataclasses.replace(task, files={**task.files, task.test_split: str(path)})


def files_to_predict(task: TaskSpec) -> list[SubmissionFile]:
    """The files to predict for ``task``: GLUE's submission files, or a ``task=files`` run's own
    test file; none for a ``task=files`` run that had no test file (:func:`predict` says so)."""
    if not task.has_test_split:
        return []
    return prediction_files(task)


def check_outside_run_folder(output_dir: Path, run_folder: Path) -> None:
    if output_dir.resolve().is_relative_to(run_folder.resolve()):
        raise IsotuneError(
            f"The output folder {output_dir} lies inside the run folder {run_folder}, which "
            "stays as its run left it. Fix: leave hydra.run.dir unset (logs/predict/<stamp>/), "
            "or set it to a folder outside the run's."
        )


def predict_run(
    kept: KeptModel,
    files: Sequence[SubmissionFile],
    output_dir: Path,
    glue_dir: str | None,
    accelerator: str = "auto",
    dev: bool = True,
) -> dict[str, Any]:
    """The test files of one kept model, written into ``output_dir``, and what
    ``predictions.json`` says of them: the weights' source, the dev scores and each file's rows
    (written by the caller: a submission's holds every task's)."""
    model = kept.build()
    tokenizer = load_tokenizer(kept.checkpoint["hyper_parameters"]["model"]["name_or_path"])
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=kept.precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    source = kept.source()
    summary: dict[str, Any] = {"source": source, "dev": None, "files": {}}
    if dev:
        summary["dev"] = dev_scores(trainer, model, kept, tokenizer, glue_dir)
    data = {
        "tokenizer": tokenizer,
        "max_length": kept.max_length,
        "eval_batch_size": kept.eval_batch_size,
    }
    summary["files"] = write_prediction_files(
        trainer, model, files, output_dir, glue_dir, data, source
    )
    return summary


def dev_scores(
    trainer: L.Trainer, model: Any, kept: KeptModel, tokenizer: Any, glue_dir: str | None
) -> dict[str, Any]:
    """Every dev split scored as validation scores it in training (the data module's batches,
    the module's own metrics), the run's recorded scores of these weights, and the largest
    difference between the two on the primary split."""
    task = kept.task
    datamodule = GLUEDataModule(
        task,
        tokenizer,
        glue_dir=glue_dir,
        max_length=kept.max_length,
        eval_batch_size=kept.eval_batch_size,
    )
    trainer.validate(model, datamodule=datamodule, verbose=False)
    logged = trainer.callback_metrics
    scores = {}
    for split in task.eval_splits:
        prefix = f"{task.log_prefix(split)}/"
        scores[split] = {
            key.removeprefix(prefix): float(value)
            for key, value in logged.items()
            if key.startswith(prefix)
        }
    recorded = kept.recorded_dev
    primary = scores[task.primary_split]
    shared = [key for key in primary if key in recorded]
    difference = max((abs(primary[key] - recorded[key]) for key in shared), default=None)
    for split, values in scores.items():
        log.info("dev %s: %s", split, _shown(values))
    log.info("recorded for these weights (epoch %s): %s", recorded.get("epoch"), _shown(recorded))
    return {"scores": scores, "recorded": recorded, "largest_difference": difference}


def _shown(values: Mapping[str, float]) -> str:
    """Scores to six decimals; the epoch and step of a recorded entry are said apart."""
    return ", ".join(
        f"{key} {value:.6f}" for key, value in values.items() if key not in ("epoch", "step")
    )
