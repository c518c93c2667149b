"""Runs cut short the way a killed job is: after some epochs, with their checkpoints written."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from isotune.model.classifier import GLUEClassifier


class StoppedAfterOneEpoch(RuntimeError):
    """Stands for a job killed as its second epoch starts."""


def run_one_epoch(run: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> None:
    """``run()`` a training run that stops as its second epoch starts (last.ckpt: epoch 1)."""

    def stop_as_the_second_epoch_starts(self):
        if self.current_epoch == 1:
            raise StoppedAfterOneEpoch

    with monkeypatch.context() as patch:
        patch.setattr(GLUEClassifier, "on_train_epoch_start", stop_as_the_second_epoch_starts)
        with pytest.raises(StoppedAfterOneEpoch):
            run()
