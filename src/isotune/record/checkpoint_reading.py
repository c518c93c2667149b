"""Reading a checkpoint written by train.py, as data only (a pickle can run any code it names):
what a checkpoint holds, and every read of one, :func:`read_checkpoint`.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from isotune.errors import IsotuneError

CONFIG_KEY = "isotune_config"  # the run's resolved config, in every checkpoint it writes
OVERRIDES_KEY = "isotune_overrides"  # its command-line overrides
RECORD_KEY = "isotune_record"  # its results.json as of the save, to rebuild a lost one from
PROVENANCE_KEY = "isotune_provenance"  # where the attempt that saved it came from (provenance.py)
KEEP_KEY = "isotune_keep"  # "slim": the model only, without the state continuing training needs
# What a checkpoint must hold: to rebuild the model (analyze.py), and to continue training.
MODEL_KEYS = ("state_dict", "hyper_parameters")
RESUME_KEYS = (*MODEL_KEYS, "global_step", "epoch", "loops", "optimizer_states", "lr_schedulers")
UNSAFE_LOAD_VARIABLE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"
# What a refused checkpoint's message tells train.py to do, by where the checkpoint came from:
# ckpt_path= wins over the folder's last.ckpt and over resume=never, so it must change or go.
FIX_CKPT_PATH = (
    "point ckpt_path at checkpoints/last.ckpt (or best.ckpt) of a run folder written by "
    "train.py, or leave ckpt_path unset to start without it"
)
START_WITHOUT_CKPT_PATH = (
    "start afresh by leaving ckpt_path unset (resume=never alone does not: ckpt_path wins over it)"
)
FIX_OWN_LAST = (
    "start afresh in this folder with resume=never (its broken last.ckpt is replaced at the "
    "first save), or in a new folder (leave hydra.run.dir unset)"
)


def read_checkpoint(
    path: Path, required: tuple[str, ...] = RESUME_KEYS, fix: str | None = None
) -> dict[str, Any]:
    """A checkpoint written by train.py, loaded on the CPU (memory-mapped: the weights are read
    only when used) as data only; one clear error if it is missing, truncated, not such a
    checkpoint, lacks one of the ``required`` keys, or holds anything but data. The error's fix is
    ``fix``, the one that works for the command reading it (:data:`FIX_CKPT_PATH` by default).

    A checkpoint is a pickle, and unpickling can run any code the file names: torch's
    ``weights_only`` loader refuses every object but containers, numbers, strings and tensors,
    before any of them is built. Every read of a checkpoint goes through here (Lightning's own,
    through :class:`isotune.record.checkpoints.RunCheckpointIO`), whatever the environment says.
    """
    import torch

    fix = fix or FIX_CKPT_PATH
    if not path.is_file():
        raise IsotuneError(_not_a_file(path, fix))
    if not zipfile.is_zipfile(path):  # what torch.save writes; a truncated one has lost its end
        raise IsotuneError(
            f"Cannot read {path} as a checkpoint written by train.py: it is not a complete "
            "PyTorch checkpoint file (a job killed while saving leaves a truncated one; a "
            f"results.json or a log is not one). Fix: {fix}."
        )
    try:
        with _weights_only_not_overridden():
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:  # what the weights_only loader raises for code
        raise IsotuneError(
            f"Refused to read {path}: it holds more than data ({_refused_object(error)}), and "
            "loading it would run code the file names; nothing of it was run. Checkpoints "
            "written by train.py hold only numbers, strings, containers and tensors; take them "
            f"only from sources you trust. Fix: {fix}."
        ) from None
    except (OSError, RuntimeError, EOFError, ValueError) as error:
        reason = str(error).strip().split(". ")[0][:200]  # torch's messages run on for lines
        raise IsotuneError(
            f"Cannot read {path} as a checkpoint written by train.py ({type(error).__name__}: "
            f"{reason}). Fix: {fix}."
        ) from error
    missing = [key for key in required if not isinstance(checkpoint, dict) or key not in checkpoint]
    if "optimizer_states" in missing and not set(missing) & set(MODEL_KEYS):  # the model only
        afresh = FIX_OWN_LAST if fix == FIX_OWN_LAST else START_WITHOUT_CKPT_PATH
        raise IsotuneError(
            f"{path} holds the model only, without the optimizer's and scheduler's state that "
            "continuing training needs (lacks " + ", ".join(missing) + "): a completed run "
            "keeps its best epoch so by default, and removes its last.ckpt. Fix: continue from "
            "checkpoints/last.ckpt of a run that has not completed; to keep completed runs "
            f"continuable, train them with checkpoint.keep=full; or {afresh}."
        )
    if missing:
        raise IsotuneError(
            f"{path} is not a checkpoint written by train.py: it lacks {', '.join(missing)}. "
            f"Fix: {fix}."
        )
    return checkpoint


def _not_a_file(path: Path, fix: str) -> str:
    """The message for a ``ckpt_path`` that is no file: a run folder (or its checkpoints folder)
    names the checkpoints in it, each a working value."""
    found = [
        str(checkpoint)
        for folder in (path / LAST_CHECKPOINT.parent, path)
        for checkpoint in sorted(folder.glob("*.ckpt") if folder.is_dir() else [])
        if checkpoint.is_file()
    ]
    if found:
        listed = " or ".join(f"ckpt_path={checkpoint}" for checkpoint in found)
        return f"ckpt_path={path} is a folder, not a checkpoint file. Fix: {listed}."
    what = "is a folder without checkpoints" if path.is_dir() else "does not exist"
    return f"ckpt_path={path} {what}. Fix: {fix}."


@contextmanager
def _weights_only_not_overridden() -> Iterator[None]:
    """Without ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` for the duration: the variable turns
    torch's safe loader off where a call does not say ``weights_only`` (Lightning's own loads:
    torch 2.13 honours an explicit ``weights_only=True`` over it, and pyproject allows torch
    from 2.1), and a ``.env`` or a shared environment can set it."""
    saved = os.environ.pop(UNSAFE_LOAD_VARIABLE, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[UNSAFE_LOAD_VARIABLE] = saved


def _refused_object(error: pickle.UnpicklingError) -> str:
    """What torch's safe loader refused, e.g. ``it names posix.system``, from its long message."""
    found = re.search(r"GLOBAL (\S+)", str(error))
    return f"it names {found[1]}" if found else "an object that is not data"
