"""The study report's figures (docs/study.md#the-study-report): each task's expected best over
its trials (Dodge et al. 2019: which arm wins can depend on the budget), the held-out score on
each report seed, and the geometry against the score within arms; drawn from the outcomes the
report's tables use, so a held-back run is in neither."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from isotune.atomic_files import save_figure
from isotune.search.expected_best import MIN_TRIALS, expected_best_curve
from isotune.study.comparison import WITHIN_ARMS, geometry_correlations, geometry_points
from isotune.study.results import GEOMETRY, ArmOutcome
from isotune.study.stated_report import number

HELD_OUT_FIGURE = "held_out"
WITHIN_FIGURE = "geometry_within_arms"


def expected_best(outcome: ArmOutcome, maximize: bool) -> list[Any]:
    """The arm's expected best by trials spent, from :data:`MIN_TRIALS` trials with a value
    (below, its trials' values are reported instead: show_your_work's advice)."""
    values = outcome.trial_values
    if len(values) < MIN_TRIALS or all(v is None for v in values):
        return []
    return expected_best_curve(values, maximize)


@dataclass(frozen=True)
class TuningSeries:
    """One arm's line on a task's tuning figure: x and y, and whether it is an expected-best
    curve (x: trials spent) or its trials' values (x: trial number)."""

    arm: str
    x: list[int]
    y: list[float]
    curve: bool


def tuning_figure(task: str, outcomes: Sequence[ArmOutcome], maximize: bool) -> dict[str, Any]:
    """The task's tuning figure: each arm's expected best from :data:`MIN_TRIALS` trials, else its
    trials' values, titled so that values are never read as an expected best."""
    series = []
    for outcome in (o for o in outcomes if o.task == task):
        curve = [best.mean for best in expected_best(outcome, maximize)]
        if curve:
            series.append(TuningSeries(outcome.arm, list(range(1, len(curve) + 1)), curve, True))
            continue
        points = [(i, v) for i, v in enumerate(outcome.trial_values) if v is not None]
        series.append(
            TuningSeries(outcome.arm, [i for i, _ in points], [v for _, v in points], False)
        )
    if any(s.curve for s in series):
        title = f"{task}: expected best over trials (Dodge et al. 2019)"
        xlabel, ylabel = "trials spent (values: trial number)", "expected best dev score"
    else:
        title = f"{task}: each trial's tuning value (below {MIN_TRIALS} trials, no expected best)"
        xlabel, ylabel = "trial", "tuning value (dev score)"
    return {"title": title, "xlabel": xlabel, "ylabel": ylabel, "series": series}


def held_out_figure(outcomes: Sequence[ArmOutcome]) -> Any:
    """Each arm's held-out score on each report seed, a seed's runs joined across arms (the
    pairs the tests compare); the legend beside the panels, where it covers no point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(o.task for o in outcomes))
    arm_names = list(dict.fromkeys(o.arm for o in outcomes))
    figure, panels = plt.subplots(1, len(tasks), figsize=(4 * len(tasks) + 1.5, 3.5), squeeze=False)
    for axes, task in zip(panels[0], tasks, strict=True):
        scores = {o.arm: o.held_out_scores() for o in outcomes if o.task == task}
        seeds = sorted({seed for by_seed in scores.values() for seed in by_seed})
        for seed in seeds:
            xs = [i for i, arm in enumerate(arm_names) if seed in scores.get(arm, {})]
            ys = [scores[arm_names[i]][seed] for i in xs]
            axes.plot(xs, ys, marker="o", alpha=0.6, label=f"seed {seed}")
        axes.set_xticks(range(len(arm_names)), arm_names, rotation=30)
        axes.set_title(f"{task}: held-out score per seed")
    if panels[0][-1].get_legend_handles_labels()[0]:  # no held-out run yet: no legend
        panels[0][-1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.tight_layout()
    return figure


def write_figures(folder: Path, outcomes: Sequence[ArmOutcome], maximize: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arm_names = list(dict.fromkeys(o.arm for o in outcomes))
    colours = {arm: plt.get_cmap("tab10")(i % 10) for i, arm in enumerate(arm_names)}
    for task in dict.fromkeys(o.task for o in outcomes):
        content = tuning_figure(task, outcomes, maximize)
        figure, axes = plt.subplots(figsize=(5, 3.5))
        for series in content["series"]:
            colour = colours[series.arm]
            if series.curve:
                axes.plot(series.x, series.y, marker="o", label=series.arm, color=colour)
            else:
                axes.scatter(series.x, series.y, label=f"{series.arm} (trial values)", color=colour)
        axes.set_xlabel(content["xlabel"])
        axes.set_ylabel(content["ylabel"])
        axes.set_title(content["title"], fontsize=9)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
        figure.tight_layout()
        save_figure(figure, folder / f"expected_best_{task}.png")
        plt.close(figure)
    figure = held_out_figure(outcomes)
    save_figure(figure, folder / f"{HELD_OUT_FIGURE}.png")
    plt.close(figure)
    figure = within_arms_figure(outcomes, colours)
    save_figure(figure, folder / f"{WITHIN_FIGURE}.png")
    plt.close(figure)


def within_arms_figure(outcomes: Sequence[ArmOutcome], colours: dict[str, Any]) -> Any:
    """A panel per (task, measure) of the points the within-arm test ranks: each held-out run's
    measure and score centred on its arm's medians, with rho and p in the title."""
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(o.task for o in outcomes))
    correlations = geometry_correlations(outcomes)
    within = correlations.loc[correlations["scope"] == WITHIN_ARMS].set_index(["task", "measure"])
    figure, panels = plt.subplots(
        len(tasks), len(GEOMETRY), figsize=(4.2 * len(GEOMETRY), 3.4 * len(tasks)), squeeze=False
    )
    for row, task in zip(panels, tasks, strict=True):
        arms = [o for o in outcomes if o.task == task]
        for axes, measure in zip(row, GEOMETRY, strict=True):
            for outcome in arms:
                points = geometry_points([outcome], measure)
                if len(points) < 2:
                    continue
                x, y = np.array([p[0] for p in points]), np.array([p[1] for p in points])
                axes.scatter(
                    x - np.median(x), y - np.median(y), color=colours[outcome.arm],
                    label=outcome.arm, alpha=0.8,
                )  # fmt: skip
            result = within.loc[(task, measure)]
            axes.set_title(
                f"{task}: within arms rho {number(result['rho'], 2)}, p {number(result['p'], 3)}",
                fontsize=9,
            )
            axes.set_xlabel(f"{measure} − arm median")
            axes.set_ylabel("score − arm median")
            axes.axhline(0, color="grey", lw=0.5)
            axes.axvline(0, color="grey", lw=0.5)
            if axes.get_legend_handles_labels()[0]:
                axes.legend(fontsize="small")
    figure.tight_layout()
    return figure
