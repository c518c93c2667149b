"""Continuing a run where it stopped: which checkpoint, and whether it belongs to this run.

One run is one folder. Started again in its own folder (the command printed after an
interruption, a SLURM requeue, ``python -m isotune.rerun``, or the same ``hydra.run.dir=`` typed
again), a run with ``resume=auto`` continues from the folder's ``checkpoints/last.ckpt``; an
explicit ``ckpt_path=`` wins over it, and ``resume=never`` starts afresh. Either way the checkpoint
must be readable and must come from the same computation: every checkpoint carries its run's
config (:data:`CONFIG_KEY`), and a difference in any key that changes what is computed stops the
run with those keys named, before anything is written. Keys that only say where results go or how
they are shown (:data:`BOOKKEEPING_KEYS`) may differ.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from isotune.atomic_files import links_leaving
from isotune.errors import IsotuneError
from isotune.record import folder_lock
from isotune.record.results import RESULTS_FILE, RunRecord, kept_model_file, read_results

RESUME_MODES = ("auto", "never")
LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"
PREDICTIONS_FOLDER = "predictions"  # <output_dir>/predictions/<TASK>.tsv (write_test_predictions)
CONFIG_KEY = "isotune_config"  # the run's resolved config, in every checkpoint it writes
OVERRIDES_KEY = "isotune_overrides"  # its command-line overrides
RECORD_KEY = "isotune_record"  # its results.json as of the save, to rebuild a lost one from
PROVENANCE_KEY = "isotune_provenance"  # where the attempt that saved it came from (provenance.py)
KEEP_KEY = "isotune_keep"  # "slim": the model only, without the state continuing training needs
# What a checkpoint must hold: to rebuild the model (analyze.py), and to continue training.
MODEL_KEYS = ("state_dict", "hyper_parameters")
RESUME_KEYS = (*MODEL_KEYS, "global_step", "epoch", "loops", "optimizer_states", "lr_schedulers")
UNSAFE_LOAD_VARIABLE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"

log = logging.getLogger(__name__)
WANDB_FOLDER = "wandb"  # what W&B's logger makes in the run folder (logger.wandb.save_dir)
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

# Keys the config gained after checkpoints were written, each with the value that reproduces a run
# made before the key existed: a checkpoint lacking one ran as that value, and compares as it.
KEYS_ADDED_SINCE = {
    "callbacks.isotropy.layer_profiles": False,  # the layer-by-layer geometry, off before it came
    "callbacks.isotropy.profile_tokens": 2000,  # read only when layer_profiles is on
    "data.train_file": None,  # task=files' files (docs/data.md): GLUE tasks read none
    "data.validation_file": None,
    "data.test_file": None,
    "data.dataset_name": None,
    "data.dataset_config_name": None,
    # foreach AdamW then; continued, such a run steps fused: the same update to float rounding
    "optim.fused": "auto",
    "compile": False,  # eager, before the option
    "data.pad_buckets": None,  # each batch padded to its longest example, as before the option
    "data.tuning_split": False,  # chosen on dev, as before hydra.sweeper.tune_on=train_split
    "data.tuning_split_size": None,
    "data.tuning_split_seed": 0,
    "select_epoch": "best",  # the dev metric's epoch, as before the option
}

# Dotted keys (or prefixes ending in ".") that change nothing a run computes (where files go,
# what is logged where, how the console looks); everything else must match to resume.
BOOKKEEPING_KEYS = (
    "paths.",
    "ckpt_path",
    "resume",
    "logger",
    "checkpoint.",  # what a completed run keeps of its checkpoints
    "check_free_space",
    # a check that refuses or passes, never changes: the labels it passes are task.labels
    "task.distinct_label_spellings",
    "write_test_predictions",
    "failure.",  # judges the run against the trivial predictor, changes nothing it computes
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.log_every_n_steps",
    "trainer.default_root_dir",
    "data.num_workers",
    "task.id_column",  # task=files: how its test predictions name the examples, as
    "task.keeps_ids",  # isotune.data.example_ids says (absent from a checkpoint from before)
    "callbacks.isotropy.figures",
    "callbacks.isotropy.output_dir",
    "callbacks.isotropy.shared_dir",  # where epoch 0's measures are shared, equal to measuring
    "callbacks.model_checkpoint.dirpath",
    "callbacks.model_checkpoint.keep",
    "callbacks.last_checkpoint.dirpath",
)
# Seeds that `seed` set before they could be set apart: a checkpoint without them used `seed`.
SPLIT_SEEDS = ("seed_init", "seed_data")
# Sections of the model's hyperparameters, compared for checkpoints older than CONFIG_KEY.
MODEL_SECTIONS = ("task", "model", "norm", "optim", "reg", "adapt")
# Where each top-level module went when the modules moved into wings: a checkpoint saved before
# names the old paths in its ``_target_``s, read as the new ones (:func:`current_targets`).
MOVED_MODULES = {
    "isotune.norms": "isotune.norms.registry",
    "isotune.whitening": "isotune.norms.whitening",
    "isotune.ranges": "isotune.norms.ranges",
    "isotune.values": "isotune.norms.values",
    "isotune.penalties": "isotune.isotropy.penalties",
    "isotune.enhance": "isotune.isotropy.enhance",
    "isotune.metric_keys": "isotune.tracking.metric_keys",
    "isotune.run_names": "isotune.tracking.run_names",
    "isotune.network": "isotune.tracking.network",
    "isotune.wandb_status": "isotune.tracking.wandb_status",
    "isotune.wandb_logging": "isotune.tracking.wandb_logging",
    "isotune.reporting": "isotune.tracking.reporting",
    "isotune.tasks": "isotune.data.tasks",
    "isotune.metrics": "isotune.data.metrics",
    "isotune.classifier": "isotune.model.classifier",
    "isotune.sentence_views": "isotune.model.sentence_views",
    "isotune.regularization": "isotune.model.regularization",
    "isotune.adaptation": "isotune.model.adaptation",
    "isotune.families": "isotune.model.families",
    "isotune.encoders": "isotune.model.encoders",
    "isotune.results": "isotune.record.results",
    "isotune.resume": "isotune.record.resume",
    "isotune.checkpoints": "isotune.record.checkpoints",
    "isotune.csv_logging": "isotune.record.csv_logging",
    "isotune.stopping": "isotune.record.stopping",
    "isotune.rng_state": "isotune.record.rng_state",
    "isotune.progress": "isotune.record.progress",
    "isotune.folder_lock": "isotune.record.folder_lock",
    "isotune.training": "isotune.training.run",
    "isotune.config_checks": "isotune.training.config_checks",
    "isotune.hydra_callbacks": "isotune.training.hydra_callbacks",
    "isotune.cli": "isotune.training.cli",
    "isotune.instantiate": "isotune.training.instantiate",
    "isotune.trivial": "isotune.training.trivial",
}


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config of a run as plain values, without Hydra's own section."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    return plain


def checkpoint_to_resume(cfg: DictConfig, settings: Mapping[str, Any]) -> Path | None:
    """``ckpt_path`` if given; else, with ``resume=auto``, the run folder's ``last.ckpt`` if it
    has one (the same run started again in its folder); else None: a fresh start, or nothing to
    do for a completed run started again with its own settings (:func:`completed_record`;
    ``settings``: what this start would record in results.json, its overrides included)."""
    if cfg.ckpt_path is not None:
        return Path(cfg.ckpt_path).expanduser()
    if cfg.get("resume", "auto") != "auto":
        return None
    last = Path(cfg.paths.output_dir) / LAST_CHECKPOINT
    if last.is_file():
        return last
    record = completed_record(cfg)
    if record is not None:
        check_same_completed_run(Path(cfg.paths.output_dir), record, run_config(cfg), settings)
    return None


def completed_record(cfg: DictConfig) -> dict[str, Any] | None:
    """The record of the completed run in ``cfg``'s folder that ``cfg`` starts again
    (``resume=auto``, no ``ckpt_path``), when it kept no last.ckpt (``checkpoint.keep``); else
    None. Such a run has nothing left to train: started again (a sweep typed again in its folder,
    a SLURM requeue that came as it finished) it stands as it is, as a completed run that kept its
    last.ckpt does. One that trained no step has nothing to lose, and starts afresh."""
    if cfg.ckpt_path is not None or cfg.get("resume", "auto") != "auto":
        return None
    folder = Path(cfg.paths.output_dir)
    if (folder / LAST_CHECKPOINT).is_file():
        return None
    try:
        record = read_results(folder / RESULTS_FILE)
    except (OSError, ValueError):  # no record, or one the run will report itself
        return None
    return record if record.get("status") == "completed" and record.get("steps") else None


def interrupted_runs_like(folder: Path, settings: Mapping[str, Any]) -> list[Path]:
    """The folders beside ``folder`` (a new run's, whose command chose no folder: each start of
    it makes another there) holding an interrupted run of the same command that can continue
    (its ``last.ckpt``): the same overrides, and the same ``settings`` that its results.json
    records (task, model, norm, seeds, ...); oldest first. One interrupted before its first
    checkpoint has nothing to continue from. Only results.json files beside a last.ckpt are
    read, and parsed only where ``interrupted`` is in them: a start among thousands of runs
    stays quick."""
    runs = []
    for record_file in sorted(folder.parent.glob(f"*/{RESULTS_FILE}")):
        if record_file.parent == folder or not (record_file.parent / LAST_CHECKPOINT).is_file():
            continue
        try:
            if '"interrupted"' not in record_file.read_text(encoding="utf-8"):
                continue
            record = read_results(record_file)
        except (OSError, UnicodeDecodeError, ValueError):  # not a run's record to compare
            continue
        if (
            record.get("status") == "interrupted"
            and sorted(record.get("overrides") or []) == sorted(settings["overrides"])
            and not recorded_differences(record, settings)
        ):
            runs.append(record_file.parent)
    return runs


def predictions_left_unwritten(cfg: DictConfig, record: Mapping[str, Any]) -> str | None:
    """What to type for the test predictions of a completed run started again with
    ``write_test_predictions=true`` and none written (a run writes them after training, and this
    one trains no more); None where the option is off or its predictions are there. From its kept
    model ``predict.py`` writes them; a run that kept none must train again."""
    folder = Path(cfg.paths.output_dir)
    if not cfg.write_test_predictions or any((folder / PREDICTIONS_FOLDER).glob("*.tsv")):
        return None
    best_file = kept_model_file(folder, record)
    said = (
        f"write_test_predictions=true writes nothing here: the run in {folder} completed without "
        "them, and a completed run trains no more."
    )
    if best_file is not None and best_file.is_file():
        return (
            f"{said} Fix: write them from its best model: python predict.py ckpt_path={best_file}"
        )
    return (
        f"{said} It kept no model (checkpoint.keep=none) to predict with. Fix: train it again "
        "with its predictions: the same command with resume=never added (over its results, in "
        "this folder), or without hydra.run.dir (in a new folder)."
    )


def check_same_completed_run(
    folder: Path, record: Mapping[str, Any], current: Mapping, settings: Mapping[str, Any]
) -> None:
    """The completed run in ``folder`` was configured as ``current``, by its best.ckpt's saved
    config (:func:`check_same_run` names the keys that differ); one that kept no model
    (``checkpoint.keep=none``) by what its results.json records (``settings``: task, model, norm,
    seeds, ..., and the overrides that change a result). With other settings it is refused:
    starting afresh would train it again over its results."""
    best_file = kept_model_file(folder, record)
    if best_file is not None and best_file.is_file():
        check_same_run(read_checkpoint(best_file, required=MODEL_KEYS), best_file, current)
        return
    differences = recorded_differences(record, settings)
    if differences:
        listed = "\n".join(f"  {line}" for line in differences)
        raise IsotuneError(
            f"The run folder {folder} holds a completed run that kept no model "
            "(checkpoint.keep=none), recorded in its results.json with other settings than this "
            f"start's (recorded -> now):\n{listed}\nTraining afresh here would overwrite its "
            "results. Fix: run with its settings (it then stands as it is), or in a new folder "
            "(leave hydra.run.dir unset); to train it again here over its results, add "
            "resume=never."
        )


def recorded_differences(record: Mapping[str, Any], settings: Mapping[str, Any]) -> list[str]:
    """``key: recorded -> now`` for each of ``settings`` that ``record`` (a results.json) holds
    otherwise; for ``overrides``, each override that changes a result (not bookkeeping) that is
    only on one side. A key the record lacks (written before it was recorded) is not compared."""
    differences = []
    for key, value in settings.items():
        recorded = record.get(key)
        if key == "overrides" and recorded is not None:
            old, new = result_overrides(recorded), result_overrides(value)
            if old != new:
                differences.append(f"{key}: {sorted(old - new)} -> {sorted(new - old)}")
        elif recorded is not None and recorded != value:
            differences.append(f"{key}: {recorded!r} -> {value!r}")
    return differences


def result_overrides(overrides: Iterable[str]) -> frozenset[str]:
    """The ``overrides`` that change a result (not bookkeeping), in any order: one computation's."""
    return frozenset(o for o in overrides if not _bookkeeping(o.lstrip("+~").split("=", 1)[0]))


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
    """A sweep's refusal of a job (:func:`check_links_stay_inside`) as the job's latest attempt
    in its results.json, so that the sweep's summary reports it rather than how the job ended
    before; holding the folder's lock (a job of an earlier sweep may still run there: then its
    record is left to it)."""
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


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``key: saved -> current`` for every computation key whose value differs."""
    old, new = {**KEYS_ADDED_SINCE, **_flatten(saved)}, _flatten(current)
    return [
        f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key) and not _bookkeeping(key)
    ]


def check_same_run(checkpoint: Mapping[str, Any], path: Path, current: Mapping[str, Any]) -> None:
    """Refuse to continue from ``checkpoint`` a run configured otherwise (never a silent mix).

    Checkpoints older than :data:`CONFIG_KEY` are compared on the model's hyperparameters; the
    classes a checkpoint saved before the modules' move names are read where they are now."""
    saved = current_targets(checkpoint.get(CONFIG_KEY))
    if saved is None:
        hyperparameters = checkpoint.get("hyper_parameters") or {}
        saved = {key: hyperparameters[key] for key in MODEL_SECTIONS if hyperparameters.get(key)}
        current = {key: current.get(key) for key in saved}
    elif "seed" in saved:
        saved = {**{key: saved["seed"] for key in SPLIT_SEEDS}, **saved}
    differences = config_differences(saved, current)
    if differences:
        listed = "\n".join(f"  {line}" for line in differences)
        raise IsotuneError(
            f"The checkpoint {path} comes from a run configured otherwise, so continuing from it "
            f"would mix two computations. The keys that differ (checkpoint -> now):\n{listed}\n"
            "Fix: run with the checkpoint's settings (its run folder's .hydra/overrides.yaml), "
            "or start afresh in a new folder (or here with resume=never)."
        )


def current_targets(values: Any) -> Any:
    """A saved config with every ``_target_`` that names a module before its move
    (``isotune.<module>.<name>``, :data:`MOVED_MODULES`) naming it where it is now."""
    if isinstance(values, Mapping):
        return {
            key: _current_target(value) if key == "_target_" else current_targets(value)
            for key, value in values.items()
        }
    if isinstance(values, list):
        return [current_targets(value) for value in values]
    return values


def _current_target(target: Any) -> Any:
    if not isinstance(target, str) or target.count(".") != 2:  # moved: isotune.<wing>.<module>.
        return target
    module, _, name = target.rpartition(".")
    return f"{MOVED_MODULES[module]}.{name}" if module in MOVED_MODULES else target


def _bookkeeping(key: str) -> bool:
    return any(
        key.startswith(prefix)
        if prefix.endswith(".")
        else key == prefix or key.startswith(prefix + ".")
        for prefix in BOOKKEEPING_KEYS
    )


def _flatten(values: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{"a.b": leaf}``; lists and scalars are leaves."""
    if not isinstance(values, Mapping):
        return {prefix.rstrip("."): values}
    if not values and prefix:
        return {prefix.rstrip("."): {}}
    flat: dict[str, Any] = {}
    for key, value in values.items():
        flat.update(_flatten(value, f"{prefix}{key}."))
    return flat
