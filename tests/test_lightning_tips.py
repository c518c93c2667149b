"""Lightning's tips to install litlogger and litmodels stay off a run's console; its other lines
stay on."""

from __future__ import annotations

import logging

import lightning as L
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from isotune.training.lightning_tips import silence_lightning_tips


def test_a_trainer_prints_no_advertising_tip_once_silenced(caplog):
    silence_lightning_tips()
    silence_lightning_tips()  # twice, as two runs in one process do: one filter
    with caplog.at_level(logging.INFO):
        L.Trainer(logger=None, enable_checkpointing=True, accelerator="cpu", devices=1)
        rank_zero_info("GPU available: False")
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if "litlogger" in m or "litmodels" in m], messages
    assert "GPU available: False" in messages
