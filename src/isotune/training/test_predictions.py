"""``write_test_predictions=true``: a completed run predicts the test set with its best
checkpoint and writes it as ``predict.py`` does (:mod:`isotune.prediction.writer`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning as L

from isotune.data import GLUEDataModule
from isotune.data.glue_format import prediction_files
from isotune.model.classifier import GLUEClassifier
from isotune.prediction.writer import prediction_source, write_prediction_files
from isotune.record.resume import PREDICTIONS_FOLDER
from isotune.training.recording import best_checkpoint


def write_test_predictions(
    trainer: L.Trainer,
    model: GLUEClassifier,
    datamodule: GLUEDataModule,
    run_folder: Path,
    provenance: Any,
    epoch: int | None,
) -> dict[str, int]:
    """GLUE's submission files (MNLI: MNLI-m, MNLI-mm, AX), or a ``task=files`` task's
    ``<task.name>.tsv`` from the data module's test split (read once), each with its sidecar,
    in ``run_folder``'s predictions folder. The weights: the best checkpoint, or without a
    checkpoint callback (``callbacks=none``) the last epoch's (``epoch``'s; no file)."""
    best = best_checkpoint(trainer)
    task = datamodule.task
    source = prediction_source(
        run_folder,
        Path(best) if best is not None else None,
        provenance,
        task,
        model.hparams["model"]["name_or_path"],
        epoch,
    )
    data = {
        "tokenizer": datamodule.tokenizer,
        "max_length": datamodule.max_length,
        "eval_batch_size": datamodule.eval_batch_size,
    }
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
        run_folder / PREDICTIONS_FOLDER,
        datamodule.glue_dir,
        data,
        source,
        ckpt_path=source["checkpoint"],
    )
