"""The console's progress bar counts epochs from 1 and leaves out Lightning's version tag."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import TensorBoardLogger

from isotune.record.progress import EpochsFromOneProgressBar


def test_the_bar_counts_epochs_from_one_and_shows_no_version(tmp_path):
    bar = EpochsFromOneProgressBar()
    seen = {}

    class Spy(L.Callback):
        def on_train_epoch_end(self, trainer, module):
            seen["metrics"] = bar.get_metrics(trainer, module)
            seen["description"] = bar.train_progress_bar.desc

    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=0,
        callbacks=[bar, Spy()],
        logger=TensorBoardLogger(tmp_path, version="minilm-rte-none-seed1"),
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(BoringModel())
    assert "v_num" not in seen["metrics"]
    assert seen["description"].startswith("Epoch 2/2")
