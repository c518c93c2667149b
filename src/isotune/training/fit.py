"""The fit core, one run as a researcher reads it first: from the composed config (``conf/``) the
seeds, the model with its norm, the data module, the callbacks (the isotropy callback among them),
the loggers and the trainer, then ``trainer.fit``. What a run records and guards around the fit
(results.json, provenance, the loggers' start, lock, resume, stop signals, test predictions) is
:mod:`isotune.training.run`'s, handed in as callbacks, trainer plugins and ``before_fit``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from isotune.data import GLUEDataModule
from isotune.data.datamodule import module_options
from isotune.data.own_data import OwnData
from isotune.model.classifier import GLUEClassifier
from isotune.model.compiling import compile_encoder
from isotune.model.encoders import load_tokenizer
from isotune.record.progress import EpochsFromOneProgressBar
from isotune.training.epoch_choice import callbacks_selecting
from isotune.training.instantiate import instantiate_all
from isotune.training.lightning_tips import silence_lightning_tips


def fit(
    cfg: DictConfig,
    own_data: OwnData | None = None,
    *,
    callbacks: Sequence[L.Callback] = (),
    plugins: Sequence[object] = (),
    ckpt_path: Path | None = None,
    before_fit: Callable[[GLUEClassifier, GLUEDataModule, L.Trainer], None] | None = None,
) -> tuple[GLUEClassifier, GLUEDataModule, L.Trainer]:
    """Train as ``cfg`` says and return the model, data module and trainer, fitted. ``own_data``:
    a ``task=files`` task's files as read, so that each is read once; ``callbacks`` come after the
    config's; ``before_fit`` sees the model, data and trainer once built.
    """
    model, datamodule = model_and_data(cfg, own_data)
    callbacks = [
        *instantiate_all(callbacks_selecting(cfg.get("callbacks"), cfg.select_epoch)),
        *callbacks,
    ]
    if cfg.trainer.get("enable_progress_bar", True):
        callbacks.append(EpochsFromOneProgressBar())
    silence_lightning_tips()  # the Trainer prints them as it sets its loggers up
    trainer: L.Trainer = instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=instantiate_all(cfg.get("logger")) or False,
        plugins=list(plugins),
    )
    if before_fit is not None:
        before_fit(model, datamodule, trainer)
    if cfg.get("compile", False):  # before anything runs the encoder
        compile_encoder(model.encoder, trainer.strategy.root_device)
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    return model, datamodule, trainer


def model_and_data(
    cfg: DictConfig, own_data: OwnData | None = None
) -> tuple[GLUEClassifier, GLUEDataModule]:
    """The run's model (its encoder, norm, head, optimiser, reg and adaptation) and data module
    as ``cfg`` names them: a run's, and those a preview times a few steps of."""
    # The global generators: the new layers' initialisation and dropout. The batch order and
    # the subsets drawn from the data have generators of their own, seeded by seed_data.
    L.seed_everything(cfg.seed_init, workers=True)
    model = GLUEClassifier(
        task=plain(cfg.task),
        model=plain(cfg.model),
        norm=plain(cfg.norm),
        optim=plain(cfg.optim),
        reg=plain(cfg.reg),
        adapt=plain(cfg.adapt),
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


def plain(cfg: DictConfig) -> dict:
    """A config section as plain values, its interpolations resolved."""
    return OmegaConf.to_container(cfg, resolve=True)
