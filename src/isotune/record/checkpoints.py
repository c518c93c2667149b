"""What a run's checkpoints hold beyond Lightning's own, how Lightning reads and writes them, how
best.ckpt survives a resume, and what a completed run keeps of them (``checkpoint.keep``).

Every checkpoint carries the run's config and overrides (compared by
:mod:`isotune.record.same_run`); Lightning reads them through the project's data-only loader and
writes them atomically (:class:`RunCheckpointIO`). When a run continues from a checkpoint of another
folder, Lightning forgets the best score and its first epoch would overwrite best.ckpt whatever its
score, so the callbacks keep it right. AdamW's moments make a full checkpoint three times its model,
so by default (``slim``) best.ckpt keeps the model only (:func:`model_only`) and last.ckpt is
removed once the run completes (:func:`keep_of_completed_run`); ``full`` keeps both whole, ``none``
no model.
"""

from __future__ import annotations

import logging
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from isotune.atomic_files import write_atomically
from isotune.errors import IsotuneError
from isotune.record.checkpoint_reading import KEEP_KEY, MODEL_KEYS, read_checkpoint

log = logging.getLogger(__name__)

# checkpoint.keep: what a completed run keeps (module docstring)
KEEP_MODES = ("slim", "full", "none")
# Only continuing training needs them; the callbacks' state (early stopping, the generators, which
# checkpoint is best) would also be restored by a prediction from the file, over the run's own.
TRAINING_STATE = ("optimizer_states", "lr_schedulers", "callbacks")


def model_only(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """``checkpoint`` without the optimizer's, the scheduler's and the callbacks' state, marked as
    such (:data:`~isotune.record.checkpoint_reading.KEEP_KEY`) so a resume from it names the way
    out."""
    kept = {key: value for key, value in checkpoint.items() if key not in TRAINING_STATE}
    return {**kept, KEEP_KEY: "slim"}


def keep_of_completed_run(trainer: L.Trainer, keep: str) -> None:
    """Remove what a completed run does not keep (``checkpoint.keep``): the every-epoch
    checkpoint (last.ckpt) unless ``full``, the best one too with ``none``."""
    for callback in trainer.checkpoint_callbacks:
        monitored = callback.monitor is not None
        if keep == "full" or (monitored and keep == "slim"):
            continue
        for path in {callback.best_model_path, callback.last_model_path} - {""}:
            Path(path).unlink(missing_ok=True)
            log.info("checkpoint.keep=%s: removed %s", keep, path)


class RunCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint files, read as data and written whole in their own folder.

    Read by :func:`isotune.record.checkpoint_reading.read_checkpoint`: data only, whatever
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says (it turns Lightning's unset ``weights_only`` into
    ``False``). Written through :func:`~isotune.atomic_files.write_atomically`, into a temporary
    file beside the checkpoint that replaces it once synced: Lightning's own move from /tmp is a
    copy across filesystems (logs on NFS), so a kill mid-copy would leave a truncated
    ``last.ckpt``. Every save goes through it; the files in :attr:`model_only_files` are written
    :func:`model_only` (a :class:`RunCheckpoint` with ``keep`` other than ``full`` names its file
    there before each save)."""

    def __init__(self) -> None:
        super().__init__()
        self.model_only_files: set[Path] = set()

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Any = None):
        return read_checkpoint(Path(path), required=MODEL_KEYS)  # a resume checked for more first

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        if Path(path) in self.model_only_files:
            checkpoint = model_only(checkpoint)
        write_atomically(path, partial(torch.save, checkpoint))


class RunCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that, resumed from a checkpoint of another folder, copies that run's file
    into its own folder and carries its score over, so best.ckpt is the whole run's best epoch, as
    results.json says. ``keep`` (``checkpoint.keep``): ``full`` writes best.ckpt whole, ``slim``
    and ``none`` the model only (:func:`model_only`)."""

    def __init__(self, *args: Any, keep: str = "full", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keep = keep

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        if self.keep != "full":
            checkpoint_io = trainer.strategy.checkpoint_io
            if not isinstance(checkpoint_io, RunCheckpointIO):
                raise TypeError(f"keep={self.keep} needs the trainer's RunCheckpointIO plugin")
            checkpoint_io.model_only_files.add(Path(filepath))
        super()._save_checkpoint(trainer, filepath)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        earlier_dir = state_dict.get("dirpath")
        earlier_file = Path(state_dict.get("best_model_path") or "")
        if earlier_dir in (None, self.dirpath) or not earlier_file.is_file():
            super().load_state_dict(state_dict)
            return
        try:  # a path read from a checkpoint is data: copy only a checkpoint train.py wrote
            read_checkpoint(earlier_file)
        except IsotuneError as error:
            log.warning("Not copying the best file the checkpoint names, nor using it: %s", error)
            super().load_state_dict({**state_dict, "best_model_path": ""})
            return
        Path(self.dirpath).mkdir(parents=True, exist_ok=True)
        here = Path(self.dirpath) / earlier_file.name
        with earlier_file.open("rb") as earlier:
            write_atomically(here, partial(shutil.copyfileobj, earlier))
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
