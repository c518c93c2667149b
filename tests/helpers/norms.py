"""The checks of a norm's bookkeeping (docs/extending.md, "A norm"), for the tests of every
registered norm and of one added as its class, its entry and its YAML (tests/test_new_norm.py).
They read conf/ through tests.helpers.presets and docs/ from the checkout."""

from __future__ import annotations

import re

from isotune.norms.registry import NORMS, build_norm
from tests.conftest import ROOT
from tests.helpers.presets import load, options, overrides

CODE_SPAN = re.compile(r"`([^`]+)`")


def code_words(text: str) -> set[str]:
    """Every word of every code span in ``text``: `a b`, `c` -> {a, b, c}."""
    return {word for span in CODE_SPAN.findall(text) for word in span.split()}


def config_group_options(group: str) -> set[str]:
    """The options docs/training.md's config groups table names for ``group`` (the row whose
    first cell names it: `paths`, `hydra` share one)."""
    training = (ROOT / "docs" / "training.md").read_text()
    row = next(
        line
        for line in training.splitlines()
        if line.startswith("| `") and group in code_words(line.split("|")[1])
    )
    return code_words(row.split("|")[2])


def documented_options(group: str) -> tuple[set[str], set[str]]:
    """(named in docs/training.md's row for ``group``, expected there): every option, but for
    norms only those an intervention sets, the others optional (and then existing)."""
    documented, expected = config_group_options(group), set(options(group))
    if group == "norm":
        expected = (documented & expected) | set(norms_with_interventions())
    return documented, expected


def unchecked_options(group: str, name: str, checked: set[str]) -> list[str]:
    """``group.option`` for each option of ``conf/<group>/<name>.yaml`` not among the ``checked``
    keys; ``name`` and values taken from elsewhere (``${seed}``) need none."""
    return [
        f"{group}.{option}"
        for option, value in load(group, name).items()
        if option != "name"
        and not (isinstance(value, str) and value.startswith("${"))
        and f"{group}.{option}" not in checked
    ]


def unranged_norm_options(name: str) -> list[str]:
    """The options of ``conf/norm/<name>.yaml`` without a range on its entry in NORMS."""
    return unchecked_options("norm", name, {f"norm.{option}" for option in NORMS[name].options})


def norms_with_interventions() -> list[str]:
    """The norms an intervention preset sets: an intervention, the study's arm and the docs rows
    are optional for a norm (docs/extending.md), and checked for those that have one."""
    chosen = {overrides(intervention).get("norm") for intervention in options("intervention")}
    return [name for name in NORMS if name in chosen]


def check_norm_configs() -> None:
    """conf/norm/<key>.yaml names ``key``, a key of NORMS, for every key; each builds its entry's
    module, keeping each option as an attribute of that name."""
    configs = {name: load("norm", name) for name in options("norm")}
    assert {stem: config["name"] for stem, config in configs.items()} == {k: k for k in NORMS}
    for config in configs.values():
        config = dict(config)
        name = config.pop("name")
        module = build_norm(name, 8, **config)
        assert type(module) is NORMS[name].module
        for option, value in config.items():
            assert getattr(module, option) == value
