"""Test predictions written to disk: each file of :func:`.glue_format.prediction_files`
predicted, written in its format, with a sidecar saying where it came from.

One writer for both ways a model predicts the test set (``predict.py`` from a kept checkpoint,
``train.py write_test_predictions=true`` at the end of a run), so that a run's files and
``predict.py``'s are the same files: the same names, labels, clipping and sidecars. It lives in
the prediction wing, which the training wing may import (prediction imports nothing of
training); it needs a Lightning trainer and module, and the data wing's formats and readers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from isotune.atomic_files import write_text
from isotune.data.example_ids import example_ids
from isotune.data.glue_format import SubmissionFile, submission_text
from isotune.data.reading import HUB_DATASET, load_split, split_file
from isotune.data.tasks import TaskSpec
from isotune.data.tokenized import TokenizedDataset
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256

log = logging.getLogger(__name__)
SIDECAR_SUFFIX = ".source.json"  # beside each prediction file: <NAME>.tsv.source.json


def prediction_source(
    run_folder: Path,
    checkpoint: Path | None,
    provenance: Any,
    task: TaskSpec,
    model_name_or_path: str | None,
    epoch: int | None,
) -> dict[str, Any]:
    """Where predictions with a checkpoint come from: the run, the code that trained it (its
    ``provenance``), the file and its sha256, as every sidecar records them; ``checkpoint``
    None: a run's last weights, predicted before any file held them."""
    code = provenance.get("code") if isinstance(provenance, dict) else None
    code = code if isinstance(code, dict) else {}
    return {
        "run": str(run_folder.resolve()),
        "checkpoint": str(checkpoint.resolve()) if checkpoint else None,
        "checkpoint_sha256": file_sha256(checkpoint) if checkpoint else None,
        "commit": code.get("commit"),
        "dirty": code.get("dirty"),
        "task": task.name,
        "model": model_name_or_path,
        "epoch": epoch,
    }


def write_prediction_files(
    trainer: L.Trainer,
    model: L.LightningModule,
    files: Sequence[SubmissionFile],
    folder: Path,
    glue_dir: str | None,
    data: dict[str, Any],
    source: dict[str, Any],
    ckpt_path: str | None = None,
) -> dict[str, int]:
    """Predict each of ``files`` with ``model`` (the weights of ``ckpt_path`` when given) and
    write it into ``folder`` with its sidecar; ``data``: the run's ``tokenizer``, ``max_length``
    and ``eval_batch_size``. A file's test examples are read here unless it holds them already.
    Returns each file's row count."""
    tokenizer = data["tokenizer"]
    collate = DataCollatorWithPadding(tokenizer)
    written = {}
    for file in files:
        examples = file.examples
        if examples is None:
            examples = load_split(file.spec, file.spec.test_split, glue_dir)
        dataset = TokenizedDataset(examples, file.spec, tokenizer, data["max_length"])
        loader = DataLoader(dataset, batch_size=data["eval_batch_size"], collate_fn=collate)
        batches = trainer.predict(model, dataloaders=loader, ckpt_path=ckpt_path)
        indices = torch.cat([index for index, _ in batches]).tolist()
        predicted = torch.cat([prediction for _, prediction in batches]).tolist()
        ids = example_ids(examples)  # a task=files test file's own, kept as written
        text = submission_text(file, zip(indices, predicted, strict=True), ids)
        path = write_text(folder / file.file_name, text)
        sidecar = {
            "file": file.file_name,
            "sha256": file_sha256(path),
            "rows": len(indices),
            "test_data": _test_source(file, glue_dir),
            **source,
            "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        write_text(path.with_name(path.name + SIDECAR_SUFFIX), json.dumps(sidecar, indent=2) + "\n")
        written[file.file_name] = len(indices)
        log.info("%s: %d test predictions written to %s", file.name, len(indices), path)
    return written


def check_test_files(files: Sequence[SubmissionFile], glue_dir: str | None) -> None:
    """Refuse a missing test file of ``files`` before a model predicts (or a run trains)."""
    for file in files:
        check_data_file(file.spec, file.spec.test_split, glue_dir, f"read for {file.file_name}")


def check_data_file(spec: TaskSpec, split: str, glue_dir: str | None, what: str) -> None:
    """Refuse a GLUE file that is not there (``what``: what it is read for), before anything
    is predicted or written; a ``task=files`` file is checked as its task is read
    (:mod:`isotune.data.own_data`), a split read from the Hub when it is read."""
    path = split_file(spec, split, glue_dir)
    if spec.own_data or path is None or path.is_file():
        return
    raise IsotuneError(
        f"GLUE_DIR={glue_dir} has no {spec.glue_dir}/{spec.files[split]} (the {split} split of "
        f"task {spec.name}, {what}). Fix: put the official GLUE file there (the layout of GLUE's "
        "download script), or point GLUE_DIR (or paths.glue_dir) at a folder that has it; "
        "predict.py's test=false scores the dev set only (dev=false predicts the test set "
        "only), train.py's write_test_predictions=false writes no test predictions."
    )


def _test_source(file: SubmissionFile, glue_dir: str | None) -> dict[str, Any]:
    """The test file read, with its sha256; or the Hub data set and split."""
    spec = file.spec
    path = split_file(spec, spec.test_split, glue_dir)
    if path is not None:
        return {"path": str(path.resolve()), "sha256": file_sha256(path)}
    if spec.own_data:
        return {"hub": spec.dataset, "config": spec.dataset_config, "split": spec.test_split}
    return {"hub": f"{HUB_DATASET}/{spec.hub_config}", "split": spec.test_split}
