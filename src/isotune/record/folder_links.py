"""A run folder written in holds no symbolic link that leads out of it: the run, and Hydra's log,
would write through it into the link's target. Checked before a run or a sweep's job writes;
a sweep records its refusal of a job in the job's results.json.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from isotune.atomic_files import links_leaving
from isotune.errors import IsotuneError
from isotune.record import folder_lock
from isotune.record.results import RESULTS_FILE, RunRecord

log = logging.getLogger(__name__)
WANDB_FOLDER = "wandb"  # what W&B's logger makes in the run folder (logger.wandb.save_dir)


def check_links_stay_inside(folder: str | Path, folder_key: str = "hydra.run.dir") -> None:
    """A run folder continued in (a shared one, a copy) holds no symbolic link that leads out of
    it: the run, and Hydra's log, would write through it into the link's target (a
    ``checkpoints`` link to someone's folder, a ``train.log`` link to their shell profile). Raises
    :class:`IsotuneError` naming the links and the fix (a new folder: ``folder_key`` unset, the
    key that chose this one); a folder that does not exist yet holds none.

    Links below W&B's own folder are W&B's: it links its runs' logs into its cache
    (``logs/debug-core.log -> ~/.cache/wandb/...``), makes a new run folder for every attempt
    and replaces its own links rather than write through them. ``wandb`` itself may not be a link.
    """
    check_no_link_leaves(
        folder,
        "The run would write through them, outside its folder. Fix: replace each link by a copy "
        f"of what it points at, or run in a new folder (leave {folder_key} unset); to keep runs "
        "on other storage, set paths.log_dir there.",
        ignore=_below_wandb_folder,
    )


def check_no_link_leaves(
    folder: str | Path, consequence: str, ignore: Callable[[Path], bool] | None = None
) -> None:
    """Refuse a run folder holding a symbolic link that leads out of it (a folder that does not
    exist holds none), in one message naming the links, then ``consequence``: what the command
    would do through them, and the fix. ``ignore``: links (relative to the folder) that may."""
    folder = Path(folder)
    leaving = [
        (link, target)
        for link, target in (links_leaving(folder) if folder.is_dir() else [])
        if ignore is None or not ignore(link.relative_to(folder))
    ]
    if leaving:
        links = "; ".join(f"{link} -> {target}" for link, target in leaving[:3])
        more = f" (and {len(leaving) - 3} more)" if len(leaving) > 3 else ""
        raise IsotuneError(
            f"The run folder {folder} holds symbolic links that lead out of it: {links}{more}. "
            f"{consequence}"
        )


def record_refusal(folder: str | Path, overrides: list[str], error: IsotuneError) -> None:
    """A sweep's refusal of a job as the job's latest attempt in its results.json, for the sweep's
    summary; under the folder's lock (a job of an earlier sweep may still run there)."""
    try:
        locked = folder_lock.hold(folder)
        try:
            RunRecord(folder, overrides=overrides).finish("failed", error)
        finally:
            if locked:
                folder_lock.release(folder)
    except (IsotuneError, OSError) as unrecorded:
        log.error(f"The refusal could not be recorded in {folder}/{RESULTS_FILE}: {unrecorded}")


def _below_wandb_folder(path: Path) -> bool:
    return len(path.parts) > 1 and path.parts[0] == WANDB_FOLDER
