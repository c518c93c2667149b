"""What a run's checkpoints hold beyond Lightning's own, how Lightning reads them, and how
best.ckpt survives a resume.

Every checkpoint carries the run's config and overrides (:mod:`isotune.resume` compares them
before continuing), Lightning reads every checkpoint through the project's data-only loader, and
the checkpoint callbacks keep their best file right when a run continues
from a checkpoint of another folder (``ckpt_path=`` pointing elsewhere): Lightning then forgets
the best score ("The dirpath has changed ...") and its first epoch overwrites best.ckpt whatever
its score, so best.ckpt and results.json's ``best_epoch`` would disagree.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from isotune.resume import CONFIG_KEY, OVERRIDES_KEY, read_checkpoint

log = logging.getLogger(__name__)


class RunConfigInCheckpoints(L.Callback):
    """Writes the run's resolved config and command-line overrides into every checkpoint."""

    def __init__(self, config: dict[str, Any], overrides: Sequence[str]) -> None:
        self.config = config
        self.overrides = list(overrides)

    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict):
        checkpoint[CONFIG_KEY] = self.config
        checkpoint[OVERRIDES_KEY] = self.overrides


class DataOnlyCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint files, read by :func:`isotune.resume.read_checkpoint`: data only,
    whatever ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says (Lightning's own read passes no
    ``weights_only``, which that variable turns into ``False``). Resuming (``fit``) and
    predicting with best.ckpt both read here."""

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Any = None):
        return read_checkpoint(Path(path))


class RunCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that, resumed from a checkpoint written in another folder, copies that
    run's file (best.ckpt, last.ckpt) into its own folder and carries its score over, so the new
    folder's best.ckpt is the best epoch of the whole run, as its results.json says."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        earlier_dir = state_dict.get("dirpath")
        earlier_file = Path(state_dict.get("best_model_path") or "")
        if earlier_dir in (None, self.dirpath) or not earlier_file.is_file():
            super().load_state_dict(state_dict)
            return
        Path(self.dirpath).mkdir(parents=True, exist_ok=True)
        here = Path(self.dirpath) / earlier_file.name
        shutil.copy2(earlier_file, here)
        log.info("Continuing from %s: copied %s to %s", earlier_dir, earlier_file.name, here)
        score = state_dict.get("best_model_score")
        super().load_state_dict(
            {
                **state_dict,
                "dirpath": self.dirpath,
                "best_model_path": str(here),
                "kth_best_model_path": str(here),
                "best_k_models": {str(here): score} if score is not None else {},
                "last_model_path": "",
            }
        )
