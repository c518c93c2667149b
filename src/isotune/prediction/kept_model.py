"""A run's kept model as prediction reads it: its checkpoint read as data only (by
:mod:`isotune.record.kept_checkpoint`), and the run's own settings that decide its predictions,
each checked before anything is written.

Everything comes from the checkpoint, which holds the run's resolved config, so a moved run
folder predicts as it did where it trained; a checkpoint older than that takes ``data`` from its
folder's ``.hydra/config.yaml``, read as YAML data (nothing resolved or instantiated).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.model.classifier import GLUEClassifier, model_from_checkpoint
from isotune.prediction.writer import prediction_source
from isotune.record.checkpoint_reading import CONFIG_KEY, PROVENANCE_KEY
from isotune.record.kept_checkpoint import FIX_KEPT_MODEL, read_kept_checkpoint

MODEL_SECTIONS = ("task", "model", "norm", "optim")  # the hyperparameters that rebuild the model
# Lightning's precision settings a run may have trained with; anything else read from a
# checkpoint is not one of this project's runs'.
PRECISIONS = ("64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")
LEGACY_PRECISIONS = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}


@dataclass(frozen=True)
class KeptModel:
    """A run's checkpoint, read and checked; :meth:`build` makes its model."""

    file: Path
    run_folder: Path
    checkpoint: Mapping[str, Any]
    task: TaskSpec
    max_length: int
    eval_batch_size: int
    precision: str

    def build(self) -> GLUEClassifier:
        """The model with the checkpoint's weights and history, in eval mode, on the CPU."""
        return model_from_checkpoint(self.checkpoint, self.file).eval()

    @property
    def recorded_dev(self) -> dict[str, float]:
        """The dev scores the run recorded for these weights: its last epoch in the checkpoint
        (best.ckpt: the best epoch's; last.ckpt: the last's), ``epoch`` and ``step`` included."""
        history = self.checkpoint.get("isotune_history") or []
        return dict(history[-1]) if history else {}

    def source(self) -> dict[str, Any]:
        """Where predictions with it come from: the run, the code that trained it, the file."""
        return prediction_source(
            self.run_folder,
            self.file,
            self.checkpoint.get(PROVENANCE_KEY),
            self.task,
            self.checkpoint["hyper_parameters"]["model"].get("name_or_path"),
            self.recorded_dev.get("epoch"),
        )


def read_kept_model(ckpt_path: str | Path | None, task: str | None = None) -> KeptModel:
    """``ckpt_path`` read as data and checked: read by the loader ``analyze.py`` shares (its run
    folder has no link leading out, its run kept a model, the file is a train.py checkpoint), of
    the project, of ``task`` when one is typed, with settings prediction can use. Each refusal
    is one :class:`IsotuneError` naming the fix."""
    read = read_kept_checkpoint(ckpt_path, "predict.py")
    file, folder, checkpoint = read.file, read.run_folder, read.checkpoint
    hyperparameters = checkpoint["hyper_parameters"]
    sections = isinstance(hyperparameters, Mapping) and all(
        isinstance(hyperparameters.get(key), Mapping) for key in MODEL_SECTIONS
    )
    if not sections:
        raise IsotuneError(
            f"{file} is not a checkpoint of this project: its hyper_parameters lack the "
            f"sections {', '.join(MODEL_SECTIONS)} that train.py saves to rebuild its model. "
            f"Fix: {FIX_KEPT_MODEL}."
        )
    spec = TaskSpec.from_config(hyperparameters["task"])
    if task is not None and spec.name != task:
        raise IsotuneError(
            f"{file} holds a model of task {spec.name}, not {task}: it would predict {task}'s "
            f"test set with {spec.name}'s labels. Fix: drop task= (the checkpoint's task is "
            f"used), or point ckpt_path at a checkpoint of a {task} run."
        )
    data = _run_data_settings(checkpoint, folder, file)
    return KeptModel(
        file=file,
        run_folder=folder,
        checkpoint=checkpoint,
        task=spec,
        max_length=_positive(data, "max_length", file),
        eval_batch_size=_positive(data, "eval_batch_size", file),
        precision=_precision(checkpoint, file),
    )


def _run_data_settings(checkpoint: Mapping[str, Any], folder: Path, file: Path) -> Mapping:
    """The run's ``data`` settings: from the checkpoint's saved config, else (a checkpoint older
    than it) from ``<run>/.hydra/config.yaml`` read as YAML data."""
    saved = checkpoint.get(CONFIG_KEY)
    if isinstance(saved, Mapping) and isinstance(saved.get("data"), Mapping):
        return saved["data"]
    config = folder / ".hydra" / "config.yaml"
    try:
        data = yaml.safe_load(config.read_text())["data"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        data = None
    if not isinstance(data, Mapping):
        raise IsotuneError(
            f"{file} carries no run config (older than train.py's saved config), and "
            f"{config} gives no data settings, so the run's max_length is unknown. Fix: "
            "predict from the checkpoint inside its run folder (with its .hydra/config.yaml)."
        )
    return data


def _positive(data: Mapping, key: str, file: Path) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise IsotuneError(
            f"The run config of {file} gives data.{key}={value!r}, not a positive integer, so "
            f"it is not a run of this project's train.py. Fix: {FIX_KEPT_MODEL}."
        )
    return value


def _precision(checkpoint: Mapping[str, Any], file: Path) -> str:
    """The run's ``trainer.precision`` (32-true for a checkpoint without it), one Lightning
    knows: predictions at another precision differ in the last digits."""
    saved = checkpoint.get(CONFIG_KEY)
    trainer = saved.get("trainer") if isinstance(saved, Mapping) else None
    value = str(trainer.get("precision", "32-true")) if isinstance(trainer, Mapping) else "32-true"
    value = LEGACY_PRECISIONS.get(value, value)
    if value not in PRECISIONS:
        raise IsotuneError(
            f"The run config of {file} gives trainer.precision={value!r}, which is none of "
            f"Lightning's {', '.join(PRECISIONS)}, so it is not a run of this project's train.py. "
            f"Fix: {FIX_KEPT_MODEL}."
        )
    return value
