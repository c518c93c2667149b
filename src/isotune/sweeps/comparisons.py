"""Configurations of a sweep, their baselines, and the paired statistics between them.

A configuration is what sets a run apart other than its task and seed: its axes (:data:`AXES`)
and other overrides, minus bookkeeping that changes no result. Its baseline is the same
configuration with the axes' baseline values (``--baseline``); runs of the two on one task that
share the seed that varies are paired. In a search folder, tuning and report runs are different
configurations, never pooled, and only the report's have a baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from isotune.errors import IsotuneError
from isotune.sweeps.intention_to_treat import (
    TableRun,
    intention_to_treat_comparison,
    intention_to_treat_line,
)
from isotune.sweeps.runs import TUNING, Run
from isotune.sweeps.statistics import PairedComparison, holm, paired_comparison, seed_count_caveat
from isotune.tracking.run_names import NOT_IN_GROUP


@dataclass(frozen=True)
class Axis:
    """A field of results.json that sets a run's configuration. Its values are plain strings:
    reading a sweep needs no registry, so it needs no torch."""

    missing: str | None = None  # what a run written before the axis existed had; None: required
    baseline: str | None = None  # its value in the default baseline; None: the baseline keeps it
    override: str | None = None  # the override key that sets it, when not the field's name
    first: str | None = None  # the value tables list first (default: the baseline's); then A-Z
    # (axis, value) under which this axis sets nothing and reads as its baseline: a weight
    # recorded beside reg=none (as runs before the weight was tied to its penalty could be)
    void_when: tuple[str, str] | None = None

    @property
    def leading(self) -> str | None:
        return self.first if self.first is not None else self.baseline


# A new axis is one entry here, in the order the tables sort by.
AXES: dict[str, Axis] = {
    "model": Axis(),
    "adapt": Axis(missing="full", first="full"),  # compared within each mode
    "norm": Axis(baseline="none"),
    "reg": Axis(missing="none", baseline="none"),
    "reg_weight": Axis(
        missing="0.0", baseline="0.0", override="reg.weight", void_when=("reg", "none")
    ),
}
# Override keys (or prefixes ending in "." or "/") that change no result: not in a configuration.
BOOKKEEPING = (*NOT_IN_GROUP, "hydra/")
# Not in a configuration either: table columns, and what pairs runs (isotune.sweeps.seeds).
PAIRED_BY = ("task", "seed", "seed_init", "seed_data")


@dataclass(frozen=True)
class Configuration:
    """The axes (name, value) in :data:`AXES` order, the other overrides, sorted, and in a search
    folder the part of the search its runs belong to (:attr:`Run.search_part`)."""

    axes: tuple[tuple[str, str], ...]
    overrides: tuple[str, ...]
    search_part: str | None = None

    @classmethod
    def of(cls, run: Run) -> Configuration:
        """The configuration of a completed run (an axis it lacks: that axis's ``missing``)."""
        axes = tuple((name, _axis_value(run, name, axis)) for name, axis in AXES.items())
        kept = (o for o in run.overrides if not _not_a_setting(override_key(o)))
        return cls(axes, tuple(sorted(kept)), run.search_part)

    @property
    def parts(self) -> tuple[str, ...]:
        """``axis=value`` of every axis, the other overrides, then ``search=<part>`` in a search
        folder: what the name is made of."""
        part = () if self.search_part is None else (f"search={self.search_part}",)
        return (*(f"{name}={value}" for name, value in self.axes), *self.overrides, *part)

    def value(self, axis: str) -> str:
        return dict(self.axes)[axis]

    def with_values(self, values: Mapping[str, str]) -> Configuration:
        """This configuration with some axes set to ``values``; an axis that changes loses its
        sub-options (``norm.beta=0.3`` goes with ``norm=isobn``)."""
        changed = tuple(f"{name}." for name, value in values.items() if self.value(name) != value)
        return replace(
            self,
            axes=tuple((name, values.get(name, value)) for name, value in self.axes),
            overrides=tuple(o for o in self.overrides if not override_key(o).startswith(changed)),
        )

    def sort_key(self) -> tuple[Any, ...]:
        """Each axis's leading value (the baseline's: ``norm=none``) first, the rest A-Z."""
        positions = [(value != AXES[name].leading, value) for name, value in self.axes]
        return (*positions, self.overrides, self.search_part != TUNING)


def _axis_value(run: Run, name: str, axis: Axis) -> str:
    if axis.void_when is not None:
        other, value = axis.void_when
        if _axis_value(run, other, AXES[other]) == value:
            return str(axis.baseline)
    if run.result.get(name) is None and axis.missing is not None:
        return axis.missing
    return str(run.field(name))


def override_key(override: str) -> str:
    """``optim.lr`` of ``optim.lr=1e-4``, ``+trainer.x=1`` or ``~callbacks.isotropy``."""
    return override.lstrip("+~").split("=", 1)[0]


def _not_a_setting(key: str) -> bool:
    """Bookkeeping, the pairing keys, and the axes (results.json records their value)."""
    if key in PAIRED_BY or key in (axis.override or name for name, axis in AXES.items()):
        return True
    return any(
        key == prefix or key.startswith(prefix if prefix.endswith((".", "/")) else f"{prefix}.")
        for prefix in BOOKKEEPING
    )


def baseline_values(choices: Sequence[str] = ()) -> dict[str, str]:
    """The axes a baseline sets: each axis's default baseline, then ``choices`` (``norm=x``)."""
    values = {name: axis.baseline for name, axis in AXES.items() if axis.baseline is not None}
    for choice in choices:
        name, _, value = choice.partition("=")
        if name not in AXES or not value:
            raise IsotuneError(
                f"--baseline {choice!r} is not AXIS=VALUE with one of the axes "
                f"{', '.join(AXES)}; for example --baseline norm=batchnorm."
            )
        values[name] = value
    return values


@dataclass(frozen=True)
class Configurations:
    """The configurations of a set of runs in display order, their names (the parts not every
    configuration shares; all shared: its axes), and their baselines."""

    ordered: tuple[Configuration, ...]
    shared: tuple[str, ...]
    baselines: dict[Configuration, Configuration]  # every configuration that is not a baseline

    @classmethod
    def of(
        cls, configurations: Iterable[Configuration], baseline: Mapping[str, str]
    ) -> Configurations:
        ordered = tuple(sorted(set(configurations), key=Configuration.sort_key))
        parts = [set(config.parts) for config in ordered]
        shared = tuple(p for p in ordered[0].parts if all(p in s for s in parts)) if ordered else ()
        baselines = {
            config: config.with_values(baseline)
            for config in ordered
            if config.search_part != TUNING  # the search ran no baseline on its tuning seeds
        }
        return cls(ordered, shared, {c: b for c, b in baselines.items() if b != c})

    def name(self, config: Configuration) -> str:
        own = [part for part in config.parts if part not in self.shared]
        return " ".join(own or config.parts[: len(config.axes)])

    @property
    def names(self) -> list[str]:
        return [self.name(config) for config in self.ordered]

    @property
    def baseline_names(self) -> dict[str, str]:
        """The name of each compared configuration's baseline, by the configuration's name."""
        return {self.name(c): self.name(b) for c, b in self.baselines.items()}


def paired_statistics(
    scores: pd.DataFrame,
    configurations: Configurations,
    without_score: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per compared configuration and task: the paired comparison with its baseline over seeds
    (``scores``: :func:`isotune.sweeps.tables.scores_frame`'s, its row order kept), and Holm p
    over every comparison with a pair (:data:`HOLM_FAMILY`). With ``without_score``, also the
    intention-to-treat sensitivity, and a row for a cell whose runs all ended without a score."""
    by_cell = {
        key: dict(zip(group["seed"], group["score"], strict=True))
        for key, group in scores.groupby(["configuration", "task"], sort=False)
    }
    ended: dict[tuple[str, str], list[TableRun]] = {}
    for r in () if without_score is None else without_score.itertuples(index=False):
        ended.setdefault((r.configuration, r.task), []).append(
            TableRun(r.seed, None, r.trivial, r.status)
        )

    def runs(cell: tuple[str, str]) -> list[TableRun]:
        counted = [TableRun(s, v, None, "completed") for s, v in by_cell.get(cell, {}).items()]
        return [*counted, *ended.get(cell, [])]

    cells, comparisons, sensitivities = [], [], []
    for config, baseline in configurations.baselines.items():
        name, baseline_name = configurations.name(config), configurations.name(baseline)
        for cell_name, task in dict.fromkeys([*by_cell, *ended]):
            if cell_name == name:
                reference = by_cell.get((baseline_name, task), {})
                comparisons.append(paired_comparison(reference, by_cell.get((name, task), {})))
                sides = (baseline_name, task), (name, task)
                sensitivities.append(
                    intention_to_treat_comparison(*map(runs, sides))
                    if any(side in ended for side in sides)
                    else None
                )
                absent = "" if reference else f"No run of the baseline on {task}. "
                cells.append((name, baseline_name, task, absent))
    family = [i for i, c in enumerate(comparisons) if c.n]
    wilcoxon_holm, m = holm({i: comparisons[i].wilcoxon_p for i in family})
    ttest_holm, _ = holm({i: comparisons[i].ttest_p for i in family})
    rows = []
    for i, ((name, baseline, task, absent), c) in enumerate(zip(cells, comparisons, strict=True)):
        t_low, t_high = c.t_interval or (None, None)
        bootstrap_low, bootstrap_high = c.bootstrap_interval or (None, None)
        # in PAIRED_COLUMNS' order
        values = (
            name, baseline, task, c.n, c.median_difference, c.mean_difference,
            t_low, t_high, bootstrap_low, bootstrap_high, c.excludes_zero,
            c.wilcoxon_p, c.wilcoxon_n, wilcoxon_holm.get(i), c.ttest_p, ttest_holm.get(i),
            f"{HOLM_FAMILY} ({m})", " ".join(map(str, c.unpaired_seeds)), (absent + c.note).strip(),
        )  # fmt: skip
        row = dict(zip(PAIRED_COLUMNS, values, strict=True))
        rows.append({**row, **_intention_to_treat_row(sensitivities[i])})
    columns = PAIRED_COLUMNS if without_score is None else [*PAIRED_COLUMNS, *ITT_COLUMNS]
    return pd.DataFrame(rows, columns=columns, dtype=object)  # None stays None


def _intention_to_treat_row(
    sensitivity: tuple[PairedComparison, int] | None,
) -> dict[str, object]:
    """The :data:`ITT_COLUMNS` of a comparison's sensitivity (None: no run of either side ended
    without a score): none but the count where no run was substituted, the comparison then
    being the plain one."""
    if sensitivity is None:
        return {"itt_substituted": 0}
    itt, substituted = sensitivity
    low, high = itt.t_interval or (None, None)
    shown = {
        "itt_n": itt.n,
        "itt_mean_difference": itt.mean_difference,
        "itt_t_low": low,
        "itt_t_high": high,
        "itt_wilcoxon_p": itt.wilcoxon_p,
        "itt_ttest_p": itt.ttest_p,
        "intention_to_treat": intention_to_treat_line(itt, substituted),
    }
    return {"itt_substituted": substituted, **(shown if substituted else {})}


PAIRED_COLUMNS = [
    "configuration", "baseline", "task", "n", "median_difference", "mean_difference",
    "t_low", "t_high", "bootstrap_low", "bootstrap_high", "excludes_zero",
    "wilcoxon_p", "wilcoxon_n", "wilcoxon_p_holm", "ttest_p", "ttest_p_holm", "holm_family",
    "unpaired_seeds", "note",
]  # fmt: skip
ITT_COLUMNS = [
    "itt_substituted", "itt_n", "itt_mean_difference", "itt_t_low", "itt_t_high",
    "itt_wilcoxon_p", "itt_ttest_p", "intention_to_treat",
]  # fmt: skip
HOLM_FAMILY = "every configuration against its baseline on every task of the folder"


def comparison_counts(paired: pd.DataFrame) -> tuple[int, int, int]:
    """The m of each Holm adjustment (every comparison with a pair, for both tests), and the
    fewest non-zero pairs of any comparison that has one (the Wilcoxon test's floor)."""
    compared = int((paired["n"] > 0).sum())
    ranked = paired.loc[paired["wilcoxon_n"] > 0, "wilcoxon_n"]
    fewest = int(ranked.min()) if len(ranked) else 0
    return compared, compared, fewest


def caveat(paired: pd.DataFrame) -> str:
    """The sentence under the table on what the fewest non-zero pairs of any comparison can
    show."""
    fewest = comparison_counts(paired)[2]
    return seed_count_caveat(fewest) if fewest else ""


def across_tasks(paired: pd.DataFrame, summary: pd.DataFrame, average: str) -> pd.DataFrame:
    """Per compared configuration: the mean of its per-task medians and of its baseline's (the
    ``average`` rows of the summary), and on how many tasks its median paired difference is
    above 0 (beat the baseline), below 0, or 0, of the tasks with at least one pair."""
    means = summary.loc[summary["task"] == average].set_index("configuration")["median"]
    rows = []
    for (name, baseline), group in paired.groupby(["configuration", "baseline"], sort=False):
        compared = group.loc[group["n"] > 0, "median_difference"].astype(float)
        mean, reference = means.get(name), means.get(baseline)
        difference = None if mean is None or reference is None else mean - reference
        counts = (int((compared > 0).sum()), int((compared < 0).sum()), int((compared == 0).sum()))
        values = (name, baseline, mean, reference, difference, *counts, len(compared))
        rows.append(dict(zip(ACROSS_COLUMNS, values, strict=True)))
    return pd.DataFrame(rows, columns=ACROSS_COLUMNS, dtype=object)


ACROSS_COLUMNS = [
    "configuration", "baseline", "mean_of_medians", "baseline_mean_of_medians", "difference",
    "tasks_better", "tasks_worse", "tasks_equal", "tasks_compared",
]  # fmt: skip
