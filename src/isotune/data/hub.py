"""A data set's split from the Hugging Face Hub (GLUE's copy, or any data set by name), with the
revision it was loaded at for the run's provenance; one message naming the fix when the Hub
cannot be reached (offline, ``HF_HUB_OFFLINE``) and the data set is not cached."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from isotune.errors import IsotuneError

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
# The Hub revision (commit sha) of each (config, split) this process loaded, for the provenance
# record: the revision loaded, not the one the cache's refs/main names now.
HUB_REVISIONS: dict[tuple[str, str], str | None] = {}


def load_hub_split(dataset: str, config: str | None, split: str, fix: str) -> Any:
    """``split`` of ``dataset`` (its ``config``) from the Hub or its cache; ``fix`` ends the
    message when it cannot be loaded (the other source of the same data)."""
    import datasets  # heavy import, only needed for the Hub

    source = f"{dataset}{f'/{config}' if config else ''} ({split})"
    try:
        rows = datasets.load_dataset(dataset, config, split=split)
    except Exception as error:
        offline = offline_settings()
        why = (
            f"{offline[0]}={os.environ[offline[0]]} keeps the Hub away and it is not cached"
            if offline
            else f"{type(error).__name__}: {error}"
        )
        reach = f"unset {offline[0]} and run" if offline else "run"
        raise IsotuneError(
            f"Could not load {source} from the Hugging Face Hub: {why}. Fix: {reach} once with "
            f"network access to cache it, or {fix}."
        ) from error
    HUB_REVISIONS[(config or dataset, split)] = loaded_revision(rows)
    return rows


def offline_settings() -> list[str]:
    """The variables set to keep the Hub away (``HF_HUB_OFFLINE=1``), in the order read."""
    return [name for name in OFFLINE_VARIABLES if os.environ.get(name, "") not in ("", "0")]


def loaded_revision(rows: object) -> str | None:
    """The Hub revision a loaded data set came from: ``datasets`` caches a Hub data set under
    ``<namespace>___<name>/<config>/<version>/<commit sha>/``, so the folder of its cache files
    names it (online and offline alike); None when no such folder does."""
    for cache in getattr(rows, "cache_files", None) or []:
        folder = Path(cache["filename"]).parent.name
        if len(folder) == 40 and all(c in "0123456789abcdef" for c in folder):
            return folder
    return None
