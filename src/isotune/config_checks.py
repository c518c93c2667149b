"""Validate a composed training config before anything heavy happens.

Hydra passes on whatever the command line says (``data.batch_size=abc`` arrives as the string
``'abc'``, ``optim.lr=-1`` as an integer). Unchecked, such a value fails deep inside Lightning or
PyTorch after the model has loaded, or not at all, with an error naming neither key nor value.
The keys users set are checked here against their valid ranges, and every problem is reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from isotune.errors import IsotuneError
from isotune.module import SCHEDULES
from isotune.regularization import VIEWS

_ABSENT = object()


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int in Python


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _layers(value: Any) -> bool:
    """``all``, ``last``, an index or a non-empty list of them; the range needs the model."""
    if value in ("all", "last") or _integer(value):
        return True
    sequence = isinstance(value, Sequence) and not isinstance(value, str)
    return sequence and len(value) > 0 and all(map(_integer, value))


def _module_names(value: Any) -> bool:
    """null (the architecture's default) or a non-empty list of non-empty names."""
    if value is None:
        return True
    sequence = isinstance(value, Sequence) and not isinstance(value, str)
    return sequence and len(value) > 0 and all(isinstance(v, str) and v for v in value)


def _betas(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) == 2
        and all(_number(beta) and 0 <= beta < 1 for beta in value)
    )


# (key, check, valid range). A key the config does not have is skipped: norm, reg and adapt
# options exist only for the options that take them.
RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("seed", _integer, "an integer"),
    ("data.max_length", lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("data.batch_size", lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("data.eval_batch_size", lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("data.num_workers", lambda v: _integer(v) and v >= 0, "an integer >= 0"),
    ("data.drop_last", lambda v: isinstance(v, bool), "true or false"),
    ("data.group_by_length", lambda v: isinstance(v, bool), "true or false"),
    ("optim.lr", lambda v: _number(v) and v > 0, "a finite number > 0"),
    ("optim.weight_decay", lambda v: _number(v) and v >= 0, "a finite number >= 0"),
    ("optim.adam_eps", lambda v: _number(v) and v > 0, "a finite number > 0"),
    ("optim.betas", _betas, "two numbers in [0, 1), e.g. [0.9,0.999]"),
    ("optim.warmup_ratio", lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    (
        "optim.schedule",
        lambda v: isinstance(v, str) and v in SCHEDULES,
        f"one of {list(SCHEDULES)}",
    ),
    (
        "trainer.max_epochs",
        lambda v: v is None or (_integer(v) and (v >= 1 or v == -1)),
        "an integer >= 1, or -1 or null to stop by trainer.max_steps",
    ),
    ("norm.momentum", lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    ("norm.eps", lambda v: _number(v) and v > 0, "a finite number > 0"),
    ("norm.beta", lambda v: _number(v) and v >= 0, "a finite number >= 0"),
    ("norm.bias_correction", lambda v: isinstance(v, bool), "true or false"),
    ("norm.group_size", lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("norm.iterations", lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("norm.affine", lambda v: isinstance(v, bool), "true or false"),
    ("reg.weight", _number, "a finite number (> 0 towards isotropy, < 0 away from it)"),
    ("reg.view", lambda v: v in VIEWS, f"one of {list(VIEWS)}"),
    ("reg.layers", _layers, "all, last, or hidden-state indices such as [-1] or [1,2]"),
    ("reg.include_padding", lambda v: isinstance(v, bool), "true or false"),
    ("reg.zeta", lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    ("reg.shrinkage_points", lambda v: _integer(v) and v >= 2, "an integer >= 2"),
    ("reg.shrinkage_examples", lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("adapt.r", lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("adapt.alpha", lambda v: _number(v) and v > 0, "a finite number > 0"),
    ("adapt.dropout", lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)"),
    ("adapt.target_modules", _module_names, "null or a list of module names, e.g. [query,value]"),
)


def check_train_config(cfg: DictConfig) -> None:
    """Raise one :class:`IsotuneError` listing every value in ``cfg`` outside its valid range."""
    problems = []
    for key, valid, expected in RULES:
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is not _ABSENT and not valid(value):
            problems.append(f"  {key}={value!r}: must be {expected}")
    if problems:
        raise IsotuneError(
            "Invalid config values; set each on the command line (key=value) or in the config "
            "to a value in its range:\n" + "\n".join(problems)
        )
