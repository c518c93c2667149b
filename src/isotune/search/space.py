"""The search space: Hydra's sweep grammar read as Optuna distributions, as the official
``hydra-optuna-sweeper`` reads it, so that its ``params`` read unchanged here
(docs/search.md#the-search-space). Ours alone: ``tag(log, signed, interval(low, high))``, two Optuna
parameters (``KEY`` the magnitude, ``KEY:sign`` -1 or 1), the override their product: a weight
whose sign flips what it pushes towards (I-STAR's).

``params`` come first, the command line's overrides after; within ``params`` the later of a key's
values wins (Hydra keeps a preset's ``reg.weight`` and a typed ``reg: {weight: 0.5}`` as two
entries, one key). Every refusal names the key, its value and the fix, before any job runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from isotune.errors import IsotuneError

SIGN = ":sign"  # suffix of the Optuna parameter holding a signed key's sign
SIGNED = "signed"  # the tag that asks for both signs


@dataclass(frozen=True)
class SearchedKey:
    """One override key the search sets: its distribution (the magnitude's, when ``signed``)."""

    key: str
    distribution: BaseDistribution
    signed: bool = False

    def distributions(self) -> dict[str, BaseDistribution]:
        """The Optuna parameters of this key, by name."""
        if not self.signed:
            return {self.key: self.distribution}
        return {self.key: self.distribution, self.key + SIGN: CategoricalDistribution([-1, 1])}

    def value(self, params: Mapping[str, Any]) -> Any:
        """The key's value in a trial with Optuna ``params``."""
        return params[self.key] * params[self.key + SIGN] if self.signed else params[self.key]


@dataclass(frozen=True)
class SearchSpace:
    searched: tuple[SearchedKey, ...]
    fixed: tuple[str, ...]  # overrides every job gets, as typed

    def distributions(self) -> dict[str, BaseDistribution]:
        return {name: d for key in self.searched for name, d in key.distributions().items()}

    def values(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``{key: value}`` of the searched keys in a trial with Optuna ``params``."""
        return {key.key: key.value(params) for key in self.searched}

    def overrides(self, params: Mapping[str, Any]) -> list[str]:
        """A trial's overrides: the fixed ones, then each searched key at its value."""
        values = self.values(params)
        return [*self.fixed, *(f"{key}={override_value(value)}" for key, value in values.items())]


def override_value(value: Any) -> str:
    """A value as an override spells it (``null``, ``true``, ``0.001``, ``isobn``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def params_key(key: str) -> str:
    """Where a plain search's ``params`` set ``key``: the override that fixes or searches it."""
    return f"hydra.sweeper.params.{key}"


def parse_space(
    params: Mapping[str, Any],
    arguments: Sequence[str],
    set_at: Callable[[str], str] = params_key,
) -> SearchSpace:
    """The space of ``params`` (a plain search's ``hydra.sweeper.params``) and the command line's
    ``arguments``. ``set_at(key)`` is the override that sets a key of ``params``, named in a
    refusal's fix: a study's arms keep theirs elsewhere (``hydra.sweeper.catalog``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    searched: dict[str, SearchedKey] = {}
    fixed: dict[str, str] = {}
    for source, texts in (
        ("hydra.sweeper.params", [f"{key}={value}" for key, value in flat_params(params)]),
        ("the command line", list(arguments)),
    ):
        for text in texts:
            override = _parse(parser, text, source)
            key = override.get_key_element()
            if not override.is_sweep_override():
                if source == "the command line" and key in searched:
                    raise IsotuneError(
                        f"{key} is searched ({set_at(key)}) and fixed on the command line "
                        f"({text}). Fix: drop {text} to search it, or type "
                        f"++{set_at(key)}={override.value()} instead to fix it "
                        "in every job"
                        + (
                            " (the search then needs another key to search, e.g. "
                            "'optim.lr=tag(log, interval(1e-5, 2e-4))')."
                            if len(searched) == 1
                            else "."
                        )
                    )
                # In params, a plain value after a sweep of the same key fixes it: a preset's
                # ``reg.weight`` and ``++hydra.sweeper.params.reg.weight=0.5`` are one key.
                searched.pop(key, None)
                fixed[key] = text
                continue
            fixed.pop(key, None)
            searched[key] = searched_key(key, override, text, source)
    return SearchSpace(tuple(searched.values()), tuple(fixed.values()))


def flat_params(params: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(key, value)`` pairs of ``params``, nested keys joined with dots: ``optim.lr`` is one key
    in YAML and two levels when typed as ``hydra.sweeper.params.optim.lr=...``."""
    pairs = []
    for key, value in params.items():
        if isinstance(value, Mapping):
            pairs += flat_params(value, f"{prefix}{key}.")
        else:
            pairs.append((f"{prefix}{key}", value))
    return pairs


def _parse(parser: Any, text: str, source: str) -> Any:
    from hydra.errors import HydraException

    try:
        (override,) = parser.parse_overrides([text])
    except HydraException as error:
        raise IsotuneError(
            f"Cannot read {text!r} of {source}: {error}. Fix: write a value or one of "
            "choice(a, b), range(1, 10), interval(0.1, 1.0), tag(log, interval(1e-5, 1e-2)), "
            "int(interval(1, 8)) (docs/search.md#the-search-space)."
        ) from None
    return override


def searched_key(key: str, override: Any, text: str, source: str) -> SearchedKey:
    """The distribution of one sweep override."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    sweep = override.value()
    where = f"{text!r} of {source}"
    tags = set(getattr(sweep, "tags", ()) or ())
    if SIGNED in tags and not (isinstance(sweep, IntervalSweep) and "log" in tags):
        raise IsotuneError(
            f"{where}: the {SIGNED} tag goes with a log interval only. Fix: "
            f"{key}=tag(log, {SIGNED}, interval(0.01, 1))."
        )
    if isinstance(sweep, ChoiceSweep) or (isinstance(sweep, RangeSweep) and sweep.shuffle):
        values = list(override.sweep_iterator())
        if not values:
            raise IsotuneError(f"{where} offers no value. Fix: name at least one: choice(a, b).")
        return SearchedKey(key, CategoricalDistribution(values))
    if isinstance(sweep, RangeSweep):
        values = list(override.sweep_iterator())
        if not values:
            raise IsotuneError(
                f"{where} holds no value (start {sweep.start}, stop {sweep.stop}, step "
                f"{sweep.step}; the stop is excluded, as in Python). Fix: a stop above the start."
            )
        if len(values) == 1:
            return SearchedKey(key, CategoricalDistribution(values))
        if any(isinstance(x, float) for x in (sweep.start, sweep.stop, sweep.step)):
            return SearchedKey(key, FloatDistribution(values[0], values[-1], step=sweep.step))
        return SearchedKey(key, IntDistribution(values[0], values[-1], step=int(sweep.step)))
    if isinstance(sweep, IntervalSweep):
        low, high, log = sweep.start, sweep.end, "log" in tags
        if low >= high:
            raise IsotuneError(
                f"{where}: its low end {low} is not below its high end {high}. Fix: "
                f"interval(low, high) with low < high, or {key}={low} to fix the key."
            )
        if log and low <= 0:
            raise IsotuneError(
                f"{where}: a log scale needs a low end above 0, got {low}. Fix: a positive low "
                f"end (interval(1e-5, {high})), or tag(log, {SIGNED}, interval(...)) for a "
                "magnitude on a log scale with both signs."
            )
        if isinstance(low, int) and isinstance(high, int):
            return SearchedKey(key, IntDistribution(low, high, log=log))
        return SearchedKey(key, FloatDistribution(float(low), float(high), log=log), SIGNED in tags)
    raise IsotuneError(f"{where} is not a sweep this search reads (docs/search.md).")
