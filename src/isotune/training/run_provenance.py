"""What one run's provenance is made of (:mod:`isotune.record.provenance`): the commit and the
packages, the trainer's device and precision, the model's and each split file's hash (or Hub
revision). Taken once the trainer is built, per attempt; the code's identity is taken when this
module is imported (before any job), and recorded dirty with why if the checkout changed since
(:func:`isotune.record.provenance.code_as_imported`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.accelerators import CUDAAccelerator
from omegaconf import DictConfig

from isotune.data import HUB_DATASET, split_file
from isotune.data.hub import HUB_REVISIONS
from isotune.data.tasks import TaskSpec
from isotune.file_digest import file_sha256
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import FOLDER_PARTS, resolve_model_path
from isotune.record.provenance import (
    code_as_imported,
    code_identity,
    device_identity,
    files_identity,
    package_versions,
)

# Besides FOLDER_PARTS' vocabularies: the files that set how the tokenizer uses them.
TOKENIZER_SETTINGS = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "merges.txt",
)
CODE_AT_IMPORT = code_identity()  # the code this process imported, whatever the tree holds later


def run_provenance(cfg: DictConfig, model: GLUEClassifier, trainer: L.Trainer) -> dict[str, Any]:
    """The provenance of the run ``cfg`` describes, as ``model`` and ``trainer`` make it."""
    task = model.task
    splits = ["train", *task.eval_splits]
    if cfg.write_test_predictions:
        splits.append(task.test_split)
    gpus = trainer.num_devices if isinstance(trainer.accelerator, CUDAAccelerator) else 0
    return {
        "code": code_as_imported(CODE_AT_IMPORT, code_identity()),
        "packages": package_versions(),
        "device": device_identity(gpus, str(trainer.precision)),
        "model": model_identity(cfg.model.name_or_path, model.encoder),
        "data": {split: data_identity(task, split, cfg.paths.glue_dir) for split in splits},
    }


def model_identity(name_or_path: str, encoder: Any) -> dict[str, Any]:
    """A local folder (``pkg://`` included): the sha256 of its config, weight and tokenizer files
    (the tokenizer decides a run's inputs as the weights decide its outputs). A Hub model: the
    revision (commit sha) transformers loaded, from the loaded config."""
    folder = Path(resolve_model_path(name_or_path))
    if folder.is_dir():
        patterns = [*(p for parts in FOLDER_PARTS.values() for p in parts), *TOKENIZER_SETTINGS]
        return {"name_or_path": name_or_path, **files_identity(folder, patterns)}
    revision = getattr(getattr(encoder, "config", None), "_commit_hash", None)
    return {"name_or_path": name_or_path, "revision": revision}


def data_identity(task: TaskSpec, split: str, glue_dir: str | None) -> dict[str, Any]:
    """A split file under GLUE_DIR, or a ``task=files`` task's own: its path and sha256. From
    the Hub: the dataset and the revision this process loaded it at
    (:data:`isotune.data.hub.HUB_REVISIONS`); a split not loaded yet (train loads once
    fitting starts) comes from the revision its task's other splits were loaded at, one cached
    data set; None when no split of the task was loaded."""
    path = split_file(task, split, glue_dir)  # None: read from the Hub
    if path is not None:
        return {"file": str(path), "sha256": file_sha256(path)}
    dataset, config = task.dataset or HUB_DATASET, task.dataset_config or task.hub_config
    key = config or dataset  # as isotune.data.hub.load_hub_split records it
    loaded = HUB_REVISIONS.get((key, split))
    if loaded is None:
        same_task = [r for (loaded_key, _), r in HUB_REVISIONS.items() if loaded_key == key]
        loaded = next((r for r in same_task if r), None)
    return {"hub": dataset, "config": config, "revision": loaded}
