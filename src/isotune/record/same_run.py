"""Whether a checkpoint or a recorded run comes from the same computation as this start: the
saved config against the current one, key by key, by the tables below.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from isotune.errors import IsotuneError
from isotune.record.checkpoint_reading import CONFIG_KEY

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
    f"isotune.{module}": f"isotune.{wing}.{module}"
    for wing, modules in {
        "norms": "whitening ranges values",
        "isotropy": "penalties enhance",
        "tracking": "metric_keys run_names network wandb_status wandb_logging reporting",
        "data": "tasks metrics",
        "model": "classifier sentence_views regularization adaptation families encoders",
        "record": "results resume checkpoints csv_logging stopping rng_state progress folder_lock",
        "training": "config_checks hydra_callbacks cli instantiate trivial",
    }.items()
    for module in modules.split()
} | {"isotune.norms": "isotune.norms.registry", "isotune.training": "isotune.training.run"}


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config of a run as plain values, without Hydra's own section."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    return plain


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


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``key: saved -> current`` for every computation key whose value differs."""
    old, new = {**KEYS_ADDED_SINCE, **_flatten(saved)}, _flatten(current)
    return [
        f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key) and not _bookkeeping(key)
    ]


def check_same_run(checkpoint: Mapping[str, Any], path: Path, current: Mapping[str, Any]) -> None:
    """Refuse to continue from ``checkpoint`` a run configured otherwise (never a silent mix);
    checkpoints older than :data:`CONFIG_KEY` are compared on the model's hyperparameters."""
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
