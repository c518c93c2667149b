"""The intervention presets as their YAML files state them, read without Hydra: the one list of
presets (``conf/intervention/``) that the tests and the docs are checked against, so a preset
added there is checked everywhere without a second list to update."""

from __future__ import annotations

import re

import yaml

from tests.conftest import CONF_DIR, ROOT


def load(group: str, name: str) -> dict:
    return yaml.safe_load((CONF_DIR / group / f"{name}.yaml").read_text()) or {}


def options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))


def overrides(intervention: str) -> dict[str, str]:
    """``{"norm": ..., "reg": ...}`` from an intervention's ``override /group: option`` defaults."""
    found = {}
    for entry in load("intervention", intervention).get("defaults", []):
        for key, value in entry.items():
            found[key.removeprefix("override /")] = value
    return found


def preset(intervention: str) -> tuple[str, str, float]:
    """(norm, reg, weight) the preset stands for: its weight file
    (``conf/intervention_weight/<intervention>_<reg>.yaml``) where it has one, else the penalty's
    own default."""
    chosen = overrides(intervention)
    reg = chosen["reg"]
    weight_file = CONF_DIR / "intervention_weight" / f"{intervention}_{reg}.yaml"
    source = yaml.safe_load(weight_file.read_text()) if weight_file.is_file() else load("reg", reg)
    return chosen["norm"], reg, float(source["weight"])


def sweep_params(experiment: str) -> dict[str, list[str]]:
    """Each swept key of ``conf/experiment/<experiment>.yaml`` with its values."""
    params = (load("experiment", experiment).get("hydra") or {}).get("sweeper", {}).get("params")
    return {key: str(values).split(",") for key, values in (params or {}).items()}


_JOBS = re.compile(r"(\d+) jobs")
_FACTORS = re.compile(r"(?<= x )\d+|\d+(?=[^x\d]*? x )")  # 3 modes x 2 norms x 4 tasks: 3, 2, 4


def stated_job_counts(experiment: str) -> list[tuple[str, list[int], int]]:
    """Every place that counts the jobs of ``experiment=<experiment>``: (file:line, the factors it
    multiplies, the jobs it states), from each line or list item of README.md and docs/ naming
    the preset, and each comment line of its own YAML (``8 interventions x 4 tasks x 5 seeds =
    160 jobs``)."""
    own = CONF_DIR / "experiment" / f"{experiment}.yaml"
    places = [
        (page, number, statement)
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for number, statement in _statements(page.read_text())
        if f"experiment={experiment}" in statement
    ]
    places += [
        (own, number, line.partition("#")[2])
        for number, line in enumerate(own.read_text().splitlines(), start=1)
    ]
    found = []
    for page, number, statement in places:
        jobs = _JOBS.search(statement)
        if jobs:
            factors = [int(factor) for factor in _FACTORS.findall(statement)]
            found.append((f"{page.relative_to(ROOT)}:{number}", factors, int(jobs.group(1))))
    return found


def _statements(markdown: str) -> list[tuple[int, str]]:
    """(first line's number, text) of each line, a list item joined with the lines it wraps onto,
    so a count broken across two lines is read whole."""
    statements: list[tuple[int, str]] = []
    for number, line in enumerate(markdown.splitlines(), start=1):
        if statements and line.startswith("  ") and not line.lstrip().startswith(("-", "|")):
            first, joined = statements[-1]
            statements[-1] = (first, f"{joined} {line.strip()}")
        else:
            statements.append((number, line))
    return statements
