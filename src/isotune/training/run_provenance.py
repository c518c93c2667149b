"""What one run's provenance is made of (:mod:`isotune.record.provenance`): this checkout's commit
and the packages, the device and precision its trainer uses, its model folder's hash or the Hub
revision it loaded, and the hash of each split file it reads (or the Hub dataset's revision).

Taken once the trainer is built, so the device and precision are the ones the run uses; each
attempt of a resumed run takes its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from huggingface_hub import constants as hub_constants
from lightning.pytorch.accelerators import CUDAAccelerator
from omegaconf import DictConfig

from isotune.data import HUB_DATASET, split_file
from isotune.data.tasks import TaskSpec
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import FOLDER_PARTS, resolve_model_path
from isotune.record.provenance import (
    code_identity,
    device_identity,
    file_sha256,
    files_identity,
    package_versions,
)


def run_provenance(cfg: DictConfig, model: GLUEClassifier, trainer: L.Trainer) -> dict[str, Any]:
    """The provenance of the run ``cfg`` describes, as ``model`` and ``trainer`` make it."""
    task = model.task
    splits = ["train", *task.eval_splits]
    if cfg.write_test_predictions:
        splits.append(task.test_split)
    gpus = trainer.num_devices if isinstance(trainer.accelerator, CUDAAccelerator) else 0
    return {
        "code": code_identity(),
        "packages": package_versions(),
        "device": device_identity(gpus, str(trainer.precision)),
        "model": model_identity(cfg.model.name_or_path, model.encoder),
        "data": {split: data_identity(task, split, cfg.paths.glue_dir) for split in splits},
    }


def model_identity(name_or_path: str, encoder: Any) -> dict[str, Any]:
    """A local folder (``pkg://`` included): the sha256 of its config and weight files. A Hub
    model: the revision (commit sha) transformers loaded, from the loaded config."""
    folder = Path(resolve_model_path(name_or_path))
    if folder.is_dir():
        patterns = (*FOLDER_PARTS["config.json"], *FOLDER_PARTS["weights"])
        return {"name_or_path": name_or_path, **files_identity(folder, patterns)}
    revision = getattr(getattr(encoder, "config", None), "_commit_hash", None)
    return {"name_or_path": name_or_path, "revision": revision}


def data_identity(task: TaskSpec, split: str, glue_dir: str | None) -> dict[str, Any]:
    """A split file under GLUE_DIR: its path and sha256. From the Hub: the dataset and the
    revision its local cache holds (None when that cache has none to name)."""
    if glue_dir is not None:
        path = split_file(task, split, glue_dir)
        return {"file": str(path), "sha256": file_sha256(path)}
    ref = Path(hub_constants.HF_HUB_CACHE) / f"datasets--{HUB_DATASET.replace('/', '--')}"
    ref = ref / "refs" / "main"
    revision = ref.read_text().strip() if ref.is_file() else None
    return {"hub": HUB_DATASET, "config": task.hub_config, "revision": revision}
