"""A study's plan: which arms run on which tasks with which budget, checked before any job
(docs/study.md#arms-tasks-budgets). Every arm searches the learning rate beside its own knob, so
the baseline is tuned as much as the interventions (Melis et al. 2018; Bouthillier et al. 2021).
The settings are a study preset's resolved ``hydra.sweeper`` node; what this module cannot know
alone (whether a key is in a composed (task, arm) config) its caller gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotune.errors import IsotuneError
from isotune.search.checks import check_seeds
from isotune.search.space import flat_params
from isotune.sweeps.runs import JOURNAL_FILE

LR_KEY = "optim.lr"  # searched by every arm
TASK_KEY = "task"  # a study's axis: typed on its command line, it names the study's tasks
BUDGET_KEYS = ("n_trials", "seeds")  # an arm that sets its own is refused: budgets are equal
ARM_KEYS = ("overrides", "params", *BUDGET_KEYS)  # what an arm's catalog entry may hold


@dataclass(frozen=True)
class Arm:
    """One arm: its fixed overrides and its searched keys, the learning rate among them."""

    name: str
    overrides: tuple[str, ...]
    params: Mapping[str, Any]

    @property
    def where(self) -> str:
        """The node that sets the arm, as an override names it."""
        return f"hydra.sweeper.catalog.{self.name}"


@dataclass(frozen=True)
class StudyPlan:
    """Arms x tasks, each (task, arm) a search of ``n_trials`` trials over ``seeds``, then its
    best trial on ``report_seeds``."""

    arms: tuple[Arm, ...]
    tasks: tuple[str, ...]
    baseline: str
    n_trials: int
    seeds: tuple[int, ...]
    report_seeds: tuple[int, ...]

    @property
    def searches(self) -> list[tuple[str, Arm]]:
        """Every (task, arm), task by task."""
        return [(task, arm) for task in self.tasks for arm in self.arms]

    @property
    def jobs(self) -> int:
        """The study's runs when none is pruned or fails: per search, every trial on every
        tuning seed, then the best trial on every report seed."""
        per_search = self.n_trials * len(self.seeds) + len(self.report_seeds)
        return len(self.searches) * per_search


def override_values(override: Any) -> list[str]:
    """The values a Hydra override (``task=rte,mrpc`` or ``task=rte``) gives its key, as
    strings: a sweep's each, or the one."""
    if override.is_sweep_override():
        return [str(value) for value in override.sweep_string_iterator()]
    return [str(override.value())]


def plan_study(settings: Mapping[str, Any], tasks: Sequence[str]) -> StudyPlan:
    """The plan of ``settings`` on ``tasks``, or one message for the first thing that would
    break it: an unknown arm, unequal budgets, no task, tuning and report seeds that overlap.
    What needs each (task, arm) composed is checked once it is: :func:`check_arm_keys`,
    :func:`isotune.data.reading.check_task_offline`."""
    catalog = settings.get("catalog") or {}
    names = list(settings.get("arms") or [])
    unknown = [name for name in names if name not in catalog]
    if unknown or not names:
        raise IsotuneError(
            f"Unknown arm(s) {unknown or names} in hydra.sweeper.arms={names}: the study's arms "
            f"are {', '.join(catalog) or 'none'}. Fix: choose among them, e.g. "
            f"'hydra.sweeper.arms=[{','.join(list(catalog)[:3])}]'."
        )
    if len(names) < 2:
        raise IsotuneError(
            f"hydra.sweeper.arms={names} names one arm: a study compares each arm with its "
            "baseline arm on the same report seeds, so with one it compares nothing. Fix: add an "
            f"arm beside it, e.g. 'hydra.sweeper.arms=[{names[0]},"
            f"{next((n for n in catalog if n != names[0]), 'isobn')}]'; to tune one setting alone, "
            "use a search (hparams_search=..., docs/search.md)."
        )
    if len(set(names)) != len(names):
        raise IsotuneError(
            f"hydra.sweeper.arms={names} names an arm twice. Fix: name each arm once."
        )
    baseline = settings.get("baseline_arm")
    if baseline not in names:
        raise IsotuneError(
            f"The baseline arm {baseline!r} (hydra.sweeper.baseline_arm) is not among the arms "
            f"{names}: every arm is compared with it on the same report seeds. Fix: add it to "
            f"hydra.sweeper.arms, or set hydra.sweeper.baseline_arm to one of them."
        )
    arms = tuple(_arm(name, catalog[name], settings) for name in names)
    n_trials, seeds, report_seeds = _budget(settings, names, catalog)
    if not tasks:
        raise IsotuneError("The study has no task. Fix: name them, e.g. task=rte,mrpc.")
    return StudyPlan(arms, tuple(tasks), str(baseline), n_trials, seeds, report_seeds)


def reported_seeds(search_folder: Path) -> set[int]:
    """The report seeds a study's search in ``search_folder`` has run (a ``results.json`` in
    ``report/trial-<n>/seed-<s>/``, whatever its end)."""
    return {
        int(run.parent.name.removeprefix("seed-"))
        for run in Path(search_folder).glob("report/trial-*/seed-*/results.json")
    }


def searches_in(study_folder: Path) -> list[str]:
    """The searches a study folder holds, as ``<task>/<arm>``: each folder two levels down with
    its study's journal."""
    return sorted(
        f"{journal.parent.parent.name}/{journal.parent.name}"
        for journal in Path(study_folder).glob(f"*/*/{JOURNAL_FILE}")
    )


def check_report_seeds_kept(plan: StudyPlan, study_folder: Path) -> None:
    """Refuse report seeds that leave out seeds a search of the study already ran: a study's
    report seeds only grow, so that every pair it has reported stays in its comparisons (a
    finished study typed again with more report seeds runs only the new seeds' runs)."""
    dropped = {
        f"{task}/{arm.name}": sorted(
            reported_seeds(study_folder / task / arm.name) - set(plan.report_seeds)
        )
        for task, arm in plan.searches
    }
    dropped = {search: seeds for search, seeds in dropped.items() if seeds}
    if not dropped:
        return
    seeds = sorted({seed for left_out in dropped.values() for seed in left_out})
    kept = sorted({*plan.report_seeds, *seeds})
    raise IsotuneError(
        f"hydra.sweeper.report_seeds={list(plan.report_seeds)} leaves out report seeds "
        f"{', '.join(map(str, seeds))} that {', '.join(dropped)} already ran: a study's report "
        "seeds only grow, so that every pair it reported stays in its comparisons. Fix: "
        f"'hydra.sweeper.report_seeds=[{','.join(map(str, kept))}]' (only the new seeds' runs "
        "run, nothing is tuned again); to report on other seeds alone, start a study of its "
        "own: hydra.sweeper.study_name=<a new name>."
    )


def _arm(name: str, entry: Mapping[str, Any], settings: Mapping[str, Any]) -> Arm:
    # Dotted keys, as the search reads them: typed on the command line
    # (++hydra.sweeper.catalog.cosreg.params.reg.weight=0.5), a key arrives nested, and the
    # later value of a key wins.
    unread = [key for key in entry or {} if key not in ARM_KEYS]
    if unread:
        raise IsotuneError(
            f"hydra.sweeper.catalog.{name}.{unread[0]} is not a key of an arm, so it would change "
            f"nothing: an arm holds {', '.join(ARM_KEYS[:2])} (and, equal to the study's, "
            f"{', '.join(BUDGET_KEYS)}). Fix: drop it; the keys an arm searches or fixes go "
            f"under hydra.sweeper.catalog.{name}.params."
        )
    own = dict(flat_params(entry.get("params") or {}))
    if LR_KEY in own:
        raise IsotuneError(
            f"Arm {name!r} sets {LR_KEY}={own[LR_KEY]} in its params "
            f"(hydra.sweeper.catalog.{name}.params): every arm searches the learning rate over "
            "the study's one range, hydra.sweeper.lr, so that no arm is tuned more than another "
            f"(the baseline arm least of all). Fix: drop hydra.sweeper.catalog.{name}.params."
            f"{LR_KEY}; set the range of every arm at once, e.g. "
            "'++hydra.sweeper.lr=\"tag(log, interval(1e-5, 1e-4))\"'."
        )
    params = {LR_KEY: str(settings["lr"]), **own}
    return Arm(name, tuple(str(o) for o in entry.get("overrides") or ()), params)


def check_arm_keys(arm: Arm, in_config: Callable[[str], bool]) -> None:
    """Refuse a key ``arm`` fixes or searches that is not in its config (``in_config``)."""
    keys = [override.split("=", 1)[0] for override in arm.overrides] + list(arm.params)
    for key in keys:
        name = key.lstrip("~").split("@")[0]
        if not key.startswith("+") and not in_config(name):
            raise IsotuneError(
                f"Arm {arm.name!r} sets {name}, which is not in the config, so its value would "
                "change nothing (or stop every job). Fix: a key of conf/train.yaml or a config "
                "group, spelled as there (python train.py --cfg job lists them), e.g. "
                f"{arm.where}.params.reg.weight."
            )


def _budget(
    settings: Mapping[str, Any], names: Sequence[str], catalog: Mapping[str, Any]
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    n_trials = settings.get("n_trials")
    if not isinstance(n_trials, int) or n_trials < 1:
        raise IsotuneError(
            f"hydra.sweeper.n_trials={n_trials} asks for no trial. Fix: an integer from 1, "
            "e.g. hydra.sweeper.n_trials=20."
        )
    study = {"n_trials": n_trials, "seeds": list(settings.get("seeds") or [])}
    unequal = [
        f"  {name}: {key}={catalog[name][key]} (the study's {study[key]})"
        for name in names
        for key in BUDGET_KEYS
        if key in (catalog[name] or {}) and catalog[name][key] != study[key]
    ]
    if unequal:
        raise IsotuneError(
            "Arms with a budget of their own: a study compares arms tuned with the same "
            "number of trials on the same tuning seeds (a better-tuned arm wins for that "
            "alone):\n" + "\n".join(unequal) + "\nFix: drop the arms' own n_trials and seeds; "
            "set the study's, e.g. hydra.sweeper.n_trials=20, for every arm at once."
        )
    seeds, report_seeds = study["seeds"], list(settings.get("report_seeds") or [])
    check_seeds(seeds, report_seeds)  # a plain search's check: one message for both
    return n_trials, tuple(int(s) for s in seeds), tuple(int(s) for s in report_seeds)
