"""Checks that must pass before Hydra makes a run's or a sweep's folder, or rewrites one, and the
folder's lock.

Hydra creates the output folder (and ``.hydra/``) before the task function starts, so an
uncreatable folder ends in chained tracebacks, a refused run leaves an empty folder, and a
refused start in a run's folder would rewrite its ``.hydra/`` and ``train.log``. These callbacks
run first and stop with one message and exit status 1, raising ``SystemExit``: Hydra turns an
``Exception`` raised in a callback into a warning and goes on.
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from isotune.errors import IsotuneError
from isotune.record import folder_lock
from isotune.record.folder_links import check_links_stay_inside
from isotune.record.results import RESULTS_FILE
from isotune.training.cli import stop


class OutputFolderCheck(Callback):
    """The run's (or the sweep's) folder can be created and written, or one message says why."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_writable(Path(str(config.hydra.run.dir)), "run", config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_writable(Path(str(config.hydra.sweep.dir)), "sweep", config)


def check_writable(folder: Path, what: str, config: DictConfig) -> None:
    """Create ``folder`` and write a file in it, then remove what was created (Hydra makes the
    folder a moment later, unless a later check stops the run first); stop with the reason and
    the fix if either fails."""
    created = next((p for p in reversed([folder, *folder.parents]) if not p.exists()), None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        log_dir = OmegaConf.select(config, "paths.log_dir", default=None)
        stop(
            f"Cannot write the {what}'s folder {folder}: {error.strerror or error}. It lies under "
            f"paths.log_dir={log_dir}. Fix: run from a folder you can write, or set "
            "paths.log_dir to one (e.g. paths.log_dir=$HOME/isotune-logs)."
        )
    finally:
        for made in [folder, *folder.parents]:
            if created is None or not made.is_relative_to(created) or not made.is_dir():
                break
            made.rmdir()


class RequiredBeforeStart(Callback):
    """A key the run cannot do without is set, else stop before any folder is made."""

    def __init__(self, key: str, fix: str) -> None:
        self.key = key
        self.fix = fix

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if OmegaConf.select(config, self.key, default=None) is None:
            stop(f"{self.key} is not set. Fix: {self.fix}")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.on_run_start(config)


class PreviewOfASweep(Callback):
    """``hydra.sweeper.preview=true`` on a single run (no ``-m``) is refused before any folder is
    made: no sweeper sees a single run, so it would train, the opposite of a preview
    (docs/sweeps.md#preview)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if OmegaConf.select(config, "hydra.sweeper.preview", default=False):
            stop(
                "hydra.sweeper.preview=true previews a sweep, but this command is a single run "
                "(no -m), which no sweeper sees: it would train. Fix: add -m to preview its one "
                "job (python train.py -m ... hydra.sweeper.preview=true), or drop "
                "hydra.sweeper.preview=true to run it."
            )


class FolderLock(Callback):
    """The run's (or the sweep's) folder is this process's alone
    (:mod:`isotune.record.folder_lock`), taken before Hydra writes there: a second process in a
    folder whose run is alive stops with one message naming its pid and writes nothing. DDP's ranks
    above 0 share rank 0's folder and lock."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.hold(config.hydra.run.dir, "run")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.hold(config.hydra.sweep.dir, "sweep")

    @staticmethod
    def hold(folder: str, what: str) -> None:
        from lightning.pytorch.utilities import rank_zero_only

        if rank_zero_only.rank != 0:
            return
        try:
            folder_lock.hold(Path(str(folder)), what)
        except IsotuneError as error:
            stop(str(error))
        except OSError:  # a folder that cannot be written: OutputFolderCheck says so
            pass


class StartCheckInRunFolder(Callback):
    """A start in an existing folder is refused if a link leads out of it
    (:func:`isotune.record.folder_links.check_links_stay_inside`), and in a folder holding a run it
    is checked as the run checks its start (:func:`isotune.training.run.check_start`), both before
    Hydra rewrites the folder, so a refused start leaves every file there byte-identical. In a new
    folder the run checks itself, and records a refusal in results.json."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        folder = os.path.abspath(str(config.hydra.run.dir))
        if not os.path.isfile(os.path.join(folder, RESULTS_FILE)):
            try:  # before Hydra writes .hydra/ and train.log through one (check_start does below)
                check_links_stay_inside(folder)
            except IsotuneError as error:
                stop(str(error))
            return
        from isotune.training.run import check_start  # the training stack, only for this case

        job = copy.deepcopy(config)  # as Hydra's run_job makes it: the folder, then no hydra key
        with read_write(job.hydra.runtime), open_dict(job.hydra.runtime):
            job.hydra.runtime.output_dir = folder
        HydraConfig.instance().set_config(job)  # ${hydra:...} resolves as in the job
        with read_write(job), open_dict(job):
            del job["hydra"]
        try:
            check_start(job)
        except IsotuneError as error:
            stop(str(error))


class InputsChecked(Callback):
    """``predict.py``'s inputs checked before Hydra makes the output folder
    (:func:`isotune.prediction.run.check_inputs`): a refusal is one message, and nothing is written.
    What the check found is handed to the run (``InputsChecked.handed_over(cfg)`` in predict.py), so
    that the checkpoint is read and the data hashed once: Hydra gives a callback and the task
    function nothing to share but the process, so the hand-off is one slot, taken once, and only by
    the inputs it checked.
    """

    _found: ClassVar[tuple[tuple, Any] | None] = None  # (the inputs, what their check found)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from isotune.prediction.run import check_inputs, inputs_of  # predict.py's stack only

        inputs = inputs_of(config, Path(str(config.hydra.run.dir)))
        InputsChecked._found = None
        try:
            InputsChecked._found = (inputs, check_inputs(*inputs))
        except IsotuneError as error:
            stop(str(error))

    @classmethod
    def handed_over(cls, cfg: DictConfig) -> Any:
        """What :meth:`on_run_start` found for ``cfg``'s inputs, taken: None after the first
        take, or where it checked other inputs (then :func:`isotune.prediction.run.predict`
        checks them itself)."""
        from isotune.prediction.run import inputs_of

        found, cls._found = cls._found, None
        inputs = inputs_of(cfg, Path(cfg.paths.output_dir))
        return found[1] if found is not None and found[0] == inputs else None
