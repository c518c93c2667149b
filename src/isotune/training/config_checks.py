"""Validate a composed training config before anything heavy happens: Hydra passes on whatever
the command line says (``data.batch_size=abc`` as a string), which unchecked fails deep inside
Lightning after the model has loaded, or not at all, naming neither key nor value. Every problem
is reported at once; a key added with ``+`` that no code reads (Hydra's own advice for a misspelt
``optim.lrr=1e-3``) is one too.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from isotune.errors import IsotuneError
from isotune.isotropy.penalties import REGULARIZERS
from isotune.model.classifier import SCHEDULES
from isotune.model.regularization import SHRINKAGE_SAMPLES, VIEWS, Regularization
from isotune.norms.ranges import COUNT, NON_NEGATIVE, POSITIVE, SHARE, SWITCH
from isotune.norms.registry import NORMS, Norm
from isotune.norms.values import finite_number, integer
from isotune.record.checkpoints import KEEP_MODES
from isotune.record.resume import RESUME_MODES
from isotune.training.epoch_choice import SELECT_EPOCHS
from isotune.training.trivial import margin_problem

_ABSENT = object()
# seed_init goes to Lightning's seed_everything, whose numpy generator takes 0 <= seed < 2**32;
# seed and seed_data (torch's generators would take more) keep that range: they are one by default.
SEEDS = 2**32
SEED_RANGE = f"an integer from 0 to 2**32 - 1 = {SEEDS - 1} (the seeds numpy takes)"


def valid_seed(value: Any) -> bool:
    return integer(value) and 0 <= value < SEEDS


def _sequence(value: Any) -> bool:
    """A list (a config's ListConfig included), not a string."""
    return isinstance(value, Sequence) and not isinstance(value, str)


def _layers(value: Any) -> bool:
    """``all``, ``last``, an index or a non-empty list of them; the range needs the model."""
    if value in ("all", "last") or integer(value):
        return True
    return _sequence(value) and len(value) > 0 and all(map(integer, value))


def _module_names(value: Any) -> bool:
    """null (the architecture's default) or a non-empty list of non-empty names."""
    if value is None:
        return True
    return _sequence(value) and len(value) > 0 and all(isinstance(v, str) and v for v in value)


def _betas(value: Any) -> bool:
    return (
        _sequence(value)
        and len(value) == 2
        and all(finite_number(beta) and 0 <= beta < 1 for beta in value)
    )


def count_or_null(value: Any) -> bool:
    """null (the option's default: all, or none) or an integer >= 1."""
    return value is None or COUNT.holds(value)


# (key, check, valid range), or a function of the config giving such rows. A key the config does
# not have is skipped: norm, reg and adapt options exist only for the options that take them.
Rules = Sequence[tuple[str, Callable[[Any], bool], str] | Callable[[DictConfig], list[tuple]]]


def _norm(cfg: DictConfig) -> Norm | None:
    """The selected norm's entry in NORMS (None for an unknown name, which building reports)."""
    name = OmegaConf.select(cfg, "norm.name")
    return NORMS.get(name) if isinstance(name, str) else None


def norm_rules(cfg: DictConfig) -> list[tuple]:
    """``norm.<option>`` with its range, for each option of the selected norm's entry."""
    return [(f"norm.{o}", *valid) for o, valid in getattr(_norm(cfg), "options", {}).items()]


RULES: Rules = (
    ("seed", valid_seed, SEED_RANGE),
    ("resume", lambda v: v in RESUME_MODES, f"one of {list(RESUME_MODES)}"),
    ("checkpoint.keep", lambda v: v in KEEP_MODES, f"one of {list(KEEP_MODES)}"),
    ("select_epoch", lambda v: v in SELECT_EPOCHS, f"one of {list(SELECT_EPOCHS)}"),
    ("check_free_space", *SWITCH),
    ("data.max_length", *COUNT),
    ("data.batch_size", *COUNT),
    ("data.eval_batch_size", *COUNT),
    ("data.num_workers", lambda v: integer(v) and v >= 0, "an integer >= 0"),
    ("data.drop_last", *SWITCH),
    ("data.group_by_length", *SWITCH),
    ("task.distinct_label_spellings", *SWITCH),  # task=files only
    ("optim.lr", *POSITIVE),
    ("optim.weight_decay", *NON_NEGATIVE),
    ("optim.adam_eps", *POSITIVE),
    ("optim.betas", _betas, "two numbers in [0, 1), e.g. [0.9,0.999]"),
    ("optim.warmup_ratio", *SHARE),
    (
        "optim.schedule",
        lambda v: isinstance(v, str) and v in SCHEDULES,
        f"one of {list(SCHEDULES)}",
    ),
    (
        "trainer.max_epochs",
        lambda v: v is None or (integer(v) and (v >= 1 or v == -1)),
        "an integer >= 1, or -1 or null to stop by trainer.max_steps",
    ),
    norm_rules,  # the ranges its constructor checks too
    ("reg.weight", finite_number, "a finite number (> 0 towards isotropy, < 0 away from it)"),
    ("reg.view", lambda v: v in VIEWS, f"one of {list(VIEWS)}"),
    ("reg.layers", _layers, "all, last, or hidden-state indices such as [-1] or [1,2]"),
    ("reg.include_padding", *SWITCH),
    ("reg.zeta", *SHARE),
    ("reg.shrinkage_points", lambda v: integer(v) and v >= 2, "an integer >= 2"),
    ("reg.shrinkage_examples", *COUNT),
    ("reg.shrinkage_sample", lambda v: v in SHRINKAGE_SAMPLES, f"one of {list(SHRINKAGE_SAMPLES)}"),
    ("callbacks.isotropy.probe_size", *COUNT),
    ("callbacks.isotropy.max_tokens", *COUNT),
    (
        "callbacks.isotropy.token_layers",
        lambda v: _sequence(v) and all(integer(layer) for layer in v),
        "a list of hidden-state indices, e.g. [] or [0,-1]",
    ),
    ("callbacks.isotropy.local_k", count_or_null, "null or an integer >= 1"),
    ("callbacks.isotropy.dominant_factor", *POSITIVE),
    ("callbacks.isotropy.figures", *SWITCH),
    ("callbacks.isotropy.outlier_factor", *POSITIVE),
    ("callbacks.isotropy.rogue_k", *COUNT),
    ("adapt.r", *COUNT),
    ("adapt.alpha", *POSITIVE),
    ("adapt.dropout", lambda v: finite_number(v) and 0 <= v < 1, "a number in [0, 1)"),
    ("adapt.target_modules", _module_names, "null or a list of module names, e.g. [query,value]"),
)


def _norm_batch_problems(cfg: DictConfig) -> list[str]:
    """Training batches too small for the norm's statistics, by the norm's own entry in NORMS."""
    norm, name = _norm(cfg), OmegaConf.select(cfg, "norm.name")
    batch_size = OmegaConf.select(cfg, "data.batch_size")
    if norm is None or not integer(batch_size) or batch_size < 1:  # reported elsewhere
        return []
    smallest, module = norm.min_batch_size, norm.module.__name__
    if norm.smaller_batch_raises:
        fails = f"{module} raises on a training batch of fewer than {smallest} examples"
    else:
        fails = (
            f"{module} skips training batches of fewer than {smallest} examples, so its running "
            f"statistics would never update and the run, recorded as norm={name}, would go "
            "without it"
        )
    if batch_size < smallest:
        return [
            f"  data.batch_size={batch_size!r}: must be >= {smallest} with norm={name}: {fails} "
            "(a batch of one has no variance); or use norm=none"
        ]
    if OmegaConf.select(cfg, "data.drop_last") is False and norm.smaller_batch_raises:
        return [
            f"  data.drop_last=False: must be true with norm={name}: the last training batch of "
            f"each epoch holds the len(train) mod data.batch_size leftover examples, and {fails} "
            f"(the run stops in its first epoch where that leaves a batch of fewer than {smallest})"
        ]
    return []


def _reg_weight_problems(cfg: DictConfig) -> list[str]:
    """A weight without a penalty: ``reg=none`` weighs nothing, so a non-zero ``reg.weight`` would
    only be recorded, and the run read as a configuration of its own instead of the baseline."""
    weight = OmegaConf.select(cfg, "reg.weight")
    if OmegaConf.select(cfg, "reg.name") != "none" or not finite_number(weight) or weight == 0:
        return []  # a penalty's weight, or a bad value its own rule reports
    penalties = ", ".join(f"reg={name}" for name in REGULARIZERS if name != "none")
    return [
        f"  reg.weight={weight!r}: reg=none has no penalty to weigh; choose one ({penalties}) "
        "or leave reg.weight out"
    ]


def _split_seed_problems(cfg: DictConfig) -> list[str]:
    """seed_init and seed_data, each when set apart from seed (by default they are seed, whose
    own rule reports it once)."""
    seed = OmegaConf.select(cfg, "seed")
    problems = []
    for key in ("seed_init", "seed_data"):
        value = OmegaConf.select(cfg, key, default=seed)
        if value != seed and not valid_seed(value):
            problems.append(f"  {key}={value!r}: must be {SEED_RANGE} (default: seed)")
    return problems


def _accelerator_problems(cfg: DictConfig) -> list[str]:
    """A GPU accelerator on a machine where torch sees no GPU: Lightning's own error has no fix."""
    accelerator = OmegaConf.select(cfg, "trainer.accelerator")
    if accelerator not in ("gpu", "cuda") or torch.cuda.is_available():
        return []
    if accelerator == "gpu" and torch.backends.mps.is_available():
        return []  # Lightning's "gpu" takes Apple's MPS where there is one
    if torch.version.cuda is None:
        why = f"this torch, {torch.__version__}, is a CPU build: torch.version.cuda is None"
    else:
        why = "check nvidia-smi and CUDA_VISIBLE_DEVICES"
    return [
        f"  trainer.accelerator={accelerator!r}: needs a CUDA GPU, but torch sees none ({why}); "
        "use trainer=cpu, or trainer=default (accelerator auto: a GPU where there is one)"
    ]


# Sections whose keys code reads: a key added under one (+optim.lrr=1e-3) must be among its keys,
# or a parameter of what builds it: its _target_, or for norm and reg the class built from them.
READ_SECTIONS = ("optim", "reg", "norm", "model", "data", "trainer", "callbacks")
SECTION_BUILDERS: dict[str, Callable[[DictConfig], Any]] = {
    "norm": lambda section: getattr(NORMS.get(section.get("name")), "module", None),
    "reg": lambda section: Regularization,
}


def _added_key_problems(cfg: DictConfig) -> list[str]:
    """Each key the command line added (``+key=value``, or ``++key=value``, which adds or sets)
    under :data:`READ_SECTIONS` that no code reads, with the nearest key that it does."""
    problems = []
    added = [
        (o[: len(o) - len(o.lstrip("+"))], *o.lstrip("+").split("=", 1))
        for o in _task_overrides(cfg)
        if o.startswith("+") and "=" in o
    ]
    added = [
        (pluses, key, value) for pluses, key, value in added if key.split(".")[0] in READ_SECTIONS
    ]
    # ``++`` adds a key or sets one the config has; only the config composed without them tells.
    forced = [f"{pluses}{key}={value}" for pluses, key, value in added if pluses == "++"]
    before = _composed_without(cfg, forced) if forced else None
    added_keys = {
        key
        for pluses, key, _ in added
        if pluses == "+" or OmegaConf.select(before, key, default=_MISSING) is _MISSING
    }
    for pluses, key, value in added:
        parts = key.split(".")
        if len(parts) < 2:
            continue
        unread = _unread_part(cfg, parts, added_keys)
        if unread is not None:
            section, name, known = unread
            nearest = difflib.get_close_matches(name, known, n=1)
            if nearest:
                hint = f"did you mean {section}.{nearest[0]}? (a key the config has takes no +)"
            else:
                hint = f"the keys code reads there: {', '.join(known)}"
            problems.append(
                f"  {pluses}{key}={value}: no code reads {section}.{name}, "
                f"so the run would ignore it; {hint}"
            )
    return problems


def _unread_part(
    cfg: DictConfig, parts: list[str], added_keys: set[str]
) -> tuple[str, str, list[str]] | None:
    """(section, name, its known keys) at the first level of ``parts`` that names no key its
    section has or its builder takes; None where code reads the key (or builds a new object)."""
    for depth in range(1, len(parts)):
        section, name = ".".join(parts[:depth]), parts[depth]
        node = OmegaConf.select(cfg, section)
        if not isinstance(node, DictConfig) or name == "_target_":
            return None
        tree = OmegaConf.to_container(node, resolve=False)
        created = {k for k, v in tree.items() if _only_added(f"{section}.{k}", v, added_keys)}
        child = tree.get(name)
        if name in created and isinstance(child, dict) and "_target_" in child:
            return None  # a whole object added (+callbacks.mine={_target_: ...}): it is built
        known = set(tree) - created
        builder = _builder(node, section)
        if builder is not None:
            parameters = inspect.signature(builder).parameters.values()
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
                return None  # it takes any keyword: no telling
            known |= {p.name for p in parameters}
        if name not in known:
            return section, name, sorted(known - {"_target_"})
    return None


_MISSING = object()


def _composed_without(cfg: DictConfig, dropped: list[str]) -> DictConfig:
    """The config Hydra composes from the command line that made ``cfg``, less the overrides
    ``dropped``: in the running Hydra app, else from the config folder ``cfg`` records."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = cfg.hydra if "hydra" in cfg else HydraConfig.get()
    name = hydra_cfg.job.config_name
    kept = [o for o in _task_overrides(cfg) if o not in dropped]
    if GlobalHydra.instance().is_initialized():
        return compose(config_name=name, overrides=kept)
    (folder,) = [s.path for s in hydra_cfg.runtime.config_sources if s.provider == "main"]
    with initialize_config_dir(config_dir=folder, version_base="1.3"):
        return compose(config_name=name, overrides=kept)


def _only_added(path: str, value: Any, added_keys: set[str]) -> bool:
    """Whether the config node at ``path`` (``value``, plain) holds only what ``+`` added."""
    if path in added_keys:
        return True
    if isinstance(value, dict) and value:
        return all(_only_added(f"{path}.{k}", v, added_keys) for k, v in value.items())
    return False


def _builder(node: DictConfig, section: str) -> Any:
    """What builds a config section from its keys: its ``_target_``, or the class of
    :data:`SECTION_BUILDERS`; None for a section read key by key."""
    if "_target_" in node:
        from hydra.utils import get_object

        try:
            return get_object(node["_target_"])
        except (ImportError, ValueError):  # building it will say so
            return None
    make = SECTION_BUILDERS.get(section)
    return make(node) if make is not None else None


def _task_overrides(cfg: DictConfig) -> list[str]:
    """The command line's overrides: Hydra's record in ``cfg`` (a composed config), else in the
    running job's Hydra config; none outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    recorded = OmegaConf.select(cfg, "hydra.overrides.task")
    if recorded is None and HydraConfig.initialized():
        recorded = HydraConfig.get().overrides.task
    return list(recorded or [])


def rule_problems(cfg: DictConfig, rules: Rules) -> list[str]:
    """One line per key of ``rules`` whose value in ``cfg`` is outside its range."""
    problems = []
    rows = [row for rule in rules for row in (rule(cfg) if callable(rule) else [rule])]
    for key, valid, expected in rows:
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is not _ABSENT and not valid(value):
            problems.append(f"  {key}={value!r}: must be {expected}")
    return problems


def raise_problems(problems: list[str]) -> None:
    """Raise one :class:`IsotuneError` listing every problem, if there is any."""
    if problems:
        raise IsotuneError(
            "Invalid config values; set each on the command line (key=value) or in the config "
            "to a value in its range:\n" + "\n".join(problems)
        )


def check_train_config(cfg: DictConfig) -> None:
    """Raise one :class:`IsotuneError` listing every value in ``cfg`` outside its valid range."""
    problems = rule_problems(cfg, RULES)
    margin = margin_problem(OmegaConf.select(cfg, "failure.margin", default=0.0))
    problems += [f"  {margin}"] if margin else []
    problems += _split_seed_problems(cfg) + _norm_batch_problems(cfg) + _reg_weight_problems(cfg)
    problems += _accelerator_problems(cfg) + _added_key_problems(cfg)
    raise_problems(problems)
