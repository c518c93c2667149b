"""A search's Optuna study: where it lives, the settings it was made with, and the sampler that
asks each trial (docs/search.md#how-it-works, "Continuing" and "Several searches on one study").

Trial ``k`` is asked by a sampler seeded with ``SeedSequence([seed, k])``, so the trials asked do
not depend on where a search was stopped, and searches with other sampler seeds share no trial
(with ``seed + k``, seed 1's trials 0-4 were seed 0's trials 1-5); a QMC sampler, reseeded per
trial, would scramble its sequence anew, so it is seeded once. A RUNNING trial is taken over only
from an owner whose folder lock is free, so two searches never run one trial.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.samplers import QMCSampler
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from isotune.errors import IsotuneError
from isotune.record import folder_lock
from isotune.search.checks import baseline_folder, changes_a_run, check_same_ranking
from isotune.search.settings import SearchSettings
from isotune.sweeps.runs import JOURNAL_FILE

HOME_ATTR = "isotune_folder"  # a trial's user attribute: the search folder its jobs run in
OWNER_ATTR = "isotune_owner"  # the search running it: its folder, host and process
SETTINGS_ATTR = "isotune_settings"  # the study's user attribute: what ranks its trials
RETRIED_ATTR = "isotune_retried"  # the study's user attribute: FAILED trials run again as new ones
BASELINES_ATTR = "isotune_baselines"  # every baseline its report ran, the first in report/baseline


def storage_file(settings: SearchSettings, folder: Path) -> Path | None:
    """The file the study lives in: a journal (``storage`` null or a path) or a SQLite database;
    None for a database server's URL."""
    storage = settings.storage
    if storage is None:
        return folder / JOURNAL_FILE
    if str(storage).startswith("sqlite:///"):
        return Path(str(storage).removeprefix("sqlite:///"))
    return None if "://" in str(storage) else Path(str(storage))


def check_storage(settings: SearchSettings, folder: Path) -> None:
    """Refuse a storage file that cannot be written, before the search folder is made."""
    path = storage_file(settings, folder)
    if path is None:
        return  # a database server: Optuna reports its own errors
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as error:
        raise IsotuneError(
            f"Cannot write the study's storage {path}: {error.strerror or error}. Fix: "
            "hydra.sweeper.storage=null (a journal file in the search folder) or a file in a "
            "folder you can write."
        ) from None


def open_study(settings: SearchSettings, folder: Path) -> Any:
    """The study (made, or loaded to be continued), its settings checked against this
    command's (:func:`check_same_settings`)."""
    storage: Any = settings.storage
    if storage is None or "://" not in str(storage):
        storage = JournalStorage(JournalFileBackend(str(storage_file(settings, folder))))
    study = optuna.create_study(
        study_name=settings.study_name,
        storage=storage,
        sampler=trial_sampler(settings, 0),
        pruner=settings.pruner if settings.pruner is not None else optuna.pruners.NopPruner(),
        direction=settings.direction,
        load_if_exists=True,
    )
    check_same_settings(study, settings, folder)
    return study


def check_same_settings(study: Any, settings: SearchSettings, folder: Path) -> None:
    """Record what ranks the trials in a new study; refuse to continue one that ranked them
    under others (:func:`~isotune.search.checks.check_same_ranking`). A study older than the
    record is recorded now: its past settings are unknown."""
    record = settings.record()
    recorded = study.user_attrs.get(SETTINGS_ATTR)
    if recorded is None:
        study.set_user_attr(SETTINGS_ATTR, record)
        return
    check_same_ranking(recorded, record, settings.study_name, folder)


def report_baseline_folder(study: Any, baseline: tuple[str, ...]) -> str:
    """The folder, under the search folder, of ``baseline``'s report runs in ``study``: the
    study's first baseline in ``report/baseline``, a later one in ``report/baseline-<k>``
    (:func:`~isotune.search.checks.baseline_folder`), so that the old one's runs are kept."""
    first = study.user_attrs.get(SETTINGS_ATTR, {}).get("baseline")  # a record before ours
    baselines = study.user_attrs.get(
        BASELINES_ATTR, [sorted(filter(changes_a_run, first))] if first else []
    )
    folder = baseline_folder(baselines, baseline)
    study.set_user_attr(BASELINES_ATTR, baselines)
    return folder


def trial_sampler(settings: SearchSettings, trial_number: int, current: Any = None) -> Any:
    """The sampler that asks trial ``trial_number`` (see the module docstring); ``current`` is
    the study's sampler until now, kept where it is unseeded or keeps a sequence."""
    if current is not None and (settings.sampler_seed is None or isinstance(current, QMCSampler)):
        return current
    if settings.sampler_seed is None:
        return settings.make_sampler(None)
    sampler = settings.make_sampler(int(settings.sampler_seed))
    if isinstance(sampler, QMCSampler):  # keeps a sequence: reseeded, it would scramble anew
        return sampler
    (seed,) = np.random.SeedSequence([int(settings.sampler_seed), trial_number]).generate_state(1)
    return settings.make_sampler(int(seed))


def owner(folder: Path) -> dict[str, Any]:
    """The record of the search in ``folder`` running a trial, as its owner."""
    return {"folder": str(folder), "host": socket.gethostname(), "pid": os.getpid()}


def owner_stopped(trial: Any, folder: Path) -> bool:
    """Whether the RUNNING ``trial`` may be taken over by the search in ``folder``: its owner is
    this folder's search (one live search per folder), unrecorded (a study older than the
    record), or has stopped (its folder's lock is free)."""
    recorded = trial.user_attrs.get(OWNER_ATTR)
    if recorded is None or Path(recorded["folder"]) == folder:
        return True
    return folder_lock.holder(recorded["folder"]) is None
