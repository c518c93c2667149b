"""A run's kept model as ``analyze.py`` and ``predict.py`` read it: the one loader of a typed
``ckpt_path``, and what a run that kept no model is told to train again.

Both read a checkpoint a person points them at, so both refuse the same things before anything
is built: no ``ckpt_path``, a run folder with a link leading out of it, a run that kept no model
(naming the command that trains it again keeping one), and a file that is not a train.py
checkpoint or holds more than data (torch's weights_only loader). The model is built from the
data elsewhere (:func:`isotune.model.classifier.model_from_checkpoint`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotune.errors import IsotuneError
from isotune.record.checkpoint_reading import MODEL_KEYS, read_checkpoint
from isotune.record.folder_links import check_no_link_leaves
from isotune.record.results import RESULTS_FILE, kept_model_file, read_results

KEEP_OVERRIDE = "checkpoint.keep="  # what a run keeps (docs/training.md#what-a-run-keeps)
KEEP_A_MODEL = "slim"  # the best epoch's model, what analyze.py and predict.py read
# Config groups that make train.py a sweep (a study, a search): a job of one records them among
# its overrides, so training that job again needs hydra.mode=RUN.
SWEEP_GROUPS = ("study=", "hparams_search=")
# What a refused checkpoint's message tells analyze.py and predict.py to do (neither has resume=).
FIX_KEPT_MODEL = (
    "point ckpt_path at checkpoints/best.ckpt (or last.ckpt) of a run folder written by train.py"
)
# What each command that reads a kept model does with it, as its messages say it.
USES = {"analyze.py": "analyse", "predict.py": "predict with"}


@dataclass(frozen=True)
class KeptCheckpoint:
    """A kept model's checkpoint, read as data and checked, with where it was read."""

    file: Path
    run_folder: Path
    checkpoint: dict[str, Any]


def read_kept_checkpoint(ckpt_path: str | Path | None, command: str) -> KeptCheckpoint:
    """``ckpt_path`` as ``command`` (a key of :data:`USES`) reads it: set, in a run folder with
    no link leading out, of a run that kept a model, a train.py checkpoint holding only data.
    Each refusal is one :class:`IsotuneError` naming the fix."""
    if ckpt_path is None:
        raise IsotuneError(
            f"ckpt_path is not set: no checkpoint to {USES[command]}. Fix: python {command} "
            "ckpt_path=logs/runs/<run>/checkpoints/best.ckpt (or last.ckpt) of a train.py run."
        )
    file = Path(ckpt_path).expanduser()
    folder = run_folder_of(file)
    check_no_link_leaves(
        folder,
        f"What {command} reads there would not be the run's own. Fix: replace each link by a "
        f"copy of what it points at (cp --remove-destination), then run {command} again.",
    )
    if not file.is_file():
        check_a_model_was_kept(file, command)
    checkpoint = read_checkpoint(file, required=MODEL_KEYS, fix=FIX_KEPT_MODEL)
    return KeptCheckpoint(file=file, run_folder=folder, checkpoint=checkpoint)


def run_folder_of(path: Path) -> Path:
    """The run folder ``path`` names: ``<run>/checkpoints/<name>.ckpt``, ``<run>/checkpoints``
    or ``<run>`` itself (a ``ckpt_path`` typed as a folder: its links are checked, not those of
    the folder above it); else a file's own folder."""
    if path.is_dir():
        return path.parent if path.name == "checkpoints" else path
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def check_a_model_was_kept(path: Path, command: str) -> None:
    """A ``ckpt_path`` that is no file, in (or naming) the folder of a run that completed without
    keeping a model (``checkpoint.keep=none``): say so, and how to train it again keeping one.
    Else the checkpoint reader's own message stands."""
    for folder in (path, path.parent, path.parent.parent):
        try:
            record = read_results(folder / RESULTS_FILE)
        except (OSError, ValueError):
            continue
        if record.get("status") != "completed" or kept_model_file(folder, record) is not None:
            return
        raise IsotuneError(
            f"The run in {folder} kept no model to {USES[command]}: it completed with "
            "checkpoint.keep=none (its results.json and metrics.csv hold its results; "
            "best_checkpoint: null). Fix: train it again keeping its best model: "
            f"{command_keeping_a_model(record)} hydra.run.dir={shlex.quote(str(folder))} (or "
            f"without hydra.run.dir and resume=never, in a new folder); then python {command} "
            "ckpt_path=<its folder>/checkpoints/best.ckpt."
        )


def command_keeping_a_model(record: Mapping[str, Any]) -> str:
    """The ``train.py`` command that trains the run of ``record`` (a results.json) again, with
    its overrides and seed, keeping its best model (``checkpoint.keep=slim``): a run that kept
    none has nothing to analyse or predict with. Without ``hydra.run.dir``: in a new folder."""
    overrides = [o for o in record.get("overrides") or [] if not o.startswith(KEEP_OVERRIDE)]
    overrides.append(f"{KEEP_OVERRIDE}{KEEP_A_MODEL}")
    if any(o.lstrip("+").startswith(SWEEP_GROUPS) for o in overrides):
        overrides.append("hydra.mode=RUN")  # this one job, with the sweep's other settings
    return shlex.join(["python", "train.py", *overrides, "resume=never"])
