"""The console's progress bar, counting epochs as results.json and the log do.

Lightning's bar says ``Epoch 0`` for the first epoch, while results.json's history, the log and
the isotropy callback count training epochs from 1 (epoch 0 is the pre-trained model, before any
training). This bar says ``Epoch 1/3`` for the first of three, and leaves out Lightning's
``v_num`` (the tail of the logger's version: a run's configuration name with TensorBoard, cut to
four characters).
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar


class EpochsFromOneProgressBar(TQDMProgressBar):
    """Lightning's bar with epochs numbered from 1, out of ``max_epochs`` when that is set, and
    without ``v_num``."""

    def get_metrics(self, trainer: L.Trainer, module: L.LightningModule) -> dict:
        metrics = super().get_metrics(trainer, module)
        metrics.pop("v_num", None)
        return metrics

    def on_train_epoch_start(self, trainer: L.Trainer, *args) -> None:
        super().on_train_epoch_start(trainer, *args)
        last = trainer.max_epochs if trainer.max_epochs not in (None, -1) else None
        epoch = trainer.current_epoch + 1
        self.train_progress_bar.set_description(f"Epoch {epoch}" + (f"/{last}" if last else ""))
