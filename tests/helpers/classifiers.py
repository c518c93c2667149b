"""A tiny classifier and its data built in process from a composed config, without train.py: for
the tests that fit or probe one with a Lightning trainer of their own."""

from __future__ import annotations

from isotune.data import GLUEDataModule
from isotune.data.tasks import TaskSpec
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import load_tokenizer


def tiny_model_and_data(cfg) -> tuple[GLUEClassifier, GLUEDataModule]:
    """A fresh tiny classifier (in training mode) and its data, as ``cfg`` sets them."""
    model = GLUEClassifier(task=cfg.task, model=cfg.model, norm=cfg.norm, optim=cfg.optim)
    datamodule = GLUEDataModule(
        TaskSpec.from_config(cfg.task),
        load_tokenizer(cfg.model.name_or_path),
        glue_dir=cfg.paths.glue_dir,
        eval_batch_size=cfg.data.eval_batch_size,
    )
    return model, datamodule
