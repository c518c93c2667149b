"""Which epoch a run reports and keeps (``select_epoch``): ``best``, the epoch its dev metric
chose, or ``last``, its last epoch.

A run whose dev set only reports (a search's report run under ``hydra.sweeper.tune_on=
train_split``, docs/search.md) must not pick anything on it: neither its epoch (results.json's
``best``), nor when to stop (early stopping), nor the model it keeps (best.ckpt). Under ``last``
the run trains every epoch, reports its last one and keeps that epoch's model: best.ckpt then
monitors the epoch count, which every epoch raises, so each epoch's model replaces the one before.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from isotune.tracking.metric_keys import EPOCH

SELECT_EPOCHS = ("best", "last")
EARLY_STOPPING = "early_stopping"  # conf/callbacks/default.yaml's entries
BEST_CHECKPOINT = "model_checkpoint"


def callbacks_selecting(callbacks: DictConfig | None, select_epoch: str) -> DictConfig | None:
    """The run's ``callbacks`` group as ``select_epoch`` asks: as configured under ``best``;
    under ``last`` without early stopping and with best.ckpt holding the last epoch."""
    if select_epoch == "best" or not callbacks:
        return callbacks
    resolved = OmegaConf.to_container(callbacks, resolve=True)  # its ${...} need the whole config
    resolved.pop(EARLY_STOPPING, None)
    chosen = OmegaConf.create(resolved)
    if chosen.get(BEST_CHECKPOINT) is not None:
        chosen[BEST_CHECKPOINT].monitor = EPOCH
        chosen[BEST_CHECKPOINT].mode = "max"
    return chosen
