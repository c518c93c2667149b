"""The search report's section on what the trials spent bought, and its figure
(docs/search.md#the-expected-best-curve; Dodge et al. 2019).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotune.atomic_files import save_figure
from isotune.search.expected_best import (
    DEFAULT_ESTIMATOR,
    ESTIMATORS,
    MIN_TRIALS,
    WITHOUT_REPLACEMENT,
    BestOfN,
    expected_best_curve,
)
from isotune.search.outcomes import TrialRow, median_score, shown
from isotune.tracking.reporting import counted, markdown_table

EXPECTED_BEST = "expected_best"  # drawn as <name>.png
IID_SAMPLER = "RandomSampler"  # the one sampler whose trials are i.i.d. draws


def spent_value(trial: TrialRow) -> float | None:
    """What a trial spent adds to the expected best: its value when COMPLETE; when PRUNED, the
    median of the seeds it ran (it stopped looking worse, so that median stands for the value it
    did not finish); None for a FAIL, a draw that found nothing."""
    if trial.state == "PRUNED":
        return median_score(trial.jobs)
    return trial.value if trial.state == "COMPLETE" else None


@dataclass(frozen=True)
class ExpectedBest:
    """The expected best by trials spent (:mod:`isotune.search.expected_best`) over every
    finished trial, each entering at :func:`spent_value`; ``curves`` by estimator, empty below
    :data:`MIN_TRIALS` trials or without a value; ``sampler``: the class that asked the trials."""

    trials: Sequence[TrialRow]
    values: Sequence[float | None]
    curves: Mapping[str, Sequence[BestOfN]]
    sampler: str | None

    @classmethod
    def of(cls, trials: Sequence[TrialRow], maximize: bool, study: Any = None) -> ExpectedBest:
        values = [spent_value(trial) for trial in trials]
        curves: dict[str, list[BestOfN]] = {}
        if len(values) >= MIN_TRIALS and any(v is not None for v in values):
            curves = {e: expected_best_curve(values, maximize, e) for e in ESTIMATORS}
        sampler = None if study is None else type(study.sampler).__name__
        return cls(trials, values, curves, sampler)

    @property
    def pruned(self) -> list[int]:
        return [t.number for t in self.trials if t.state == "PRUNED"]

    def record(self) -> dict[str, Any]:
        """``optimization_results.yaml``'s ``expected_best``."""
        return {
            "estimator": DEFAULT_ESTIMATOR,
            "sampler": self.sampler,
            "iid": self.sampler == IID_SAMPLER,
            "pruned_at_partial_median": self.pruned,
            "values": [None if v is None else float(v) for v in self.values],
            "curve": {
                estimator: [dataclasses.asdict(point) for point in points]
                for estimator, points in self.curves.items()
            },
        }

    def lines(self) -> list[str]:
        """The report's section: the curve with its band, or the values below MIN_TRIALS."""
        n, failed = len(self.values), sum(t.state == "FAIL" for t in self.trials)
        pruned = self.pruned
        lines = [
            "## Expected best dev score by trials spent (Dodge et al. 2019)",
            "",
            f"Over all {counted(n, 'trial')} spent: complete ones at their value, "
            + (
                f"{len(pruned)} pruned at the median of the seeds they ran (marked *: a value from "
                "fewer seeds than the others', where a curve over complete trials only would "
                "leave out the trials that looked worst and be too high), "
                if pruned
                else "none pruned, "
            )
            + (
                f"{failed} failed as draws that found nothing (the curve is given one of the n "
                "has a value; 'none' is the chance that none has)."
                if failed
                else "none failed."
            ),
        ]
        if self.sampler != IID_SAMPLER:
            lines += [
                "",
                f"The trials were asked by {self.sampler or 'a sampler not recorded here'}, not "
                "random search: each trial was chosen from the earlier ones, so this curve "
                "describes this search, not n i.i.d. draws from the space. "
                "`hydra/sweeper/sampler=random` gives the i.i.d. curve.",
            ]
        if not self.curves:
            lines += [
                "",
                f"Fewer than {MIN_TRIALS} trials (or none with a value): their values, not a "
                "curve.",
                "",
                markdown_table(
                    ["trial", "state", "value"],
                    [
                        [self._label(t), t.state, shown(v)]
                        for t, v in zip(self.trials, self.values, strict=True)
                    ],
                ),
            ]
            return lines
        default, other = self.curves[DEFAULT_ESTIMATOR], self.curves[WITHOUT_REPLACEMENT]
        lines += [
            "",
            f"Estimator: {DEFAULT_ESTIMATOR} (Dodge et al.'s, allentune's default); the band is "
            "the mean +- one SD of the best of n (allentune's closed form), clipped to the "
            f"values observed; {WITHOUT_REPLACEMENT} beside it (it ends at the observed best).",
            "",
            markdown_table(
                ["trials", "expected best", "SD", "band", WITHOUT_REPLACEMENT, "none"][
                    : 6 if failed else 5
                ],
                [
                    [
                        p.n,
                        shown(p.mean),
                        shown(p.sd),
                        f"[{shown(p.low)}, {shown(p.high)}]",
                        shown(q.mean),
                        f"{p.none:.3f}",
                    ][: 6 if failed else 5]
                    for p, q in zip(default, other, strict=True)
                ],
            ),
            "",
            "Values entered: "
            + ", ".join(
                f"{self._label(t)} {shown(v)}"
                for t, v in zip(self.trials, self.values, strict=True)
            )
            + ".",
        ]
        return lines

    def draw(self, folder: Path) -> None:
        """``expected_best.png``: the curve with its band, and the estimator without replacement
        beside it; nothing without a curve."""
        if not self.curves:
            return
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        points = self.curves[DEFAULT_ESTIMATOR]
        n = [p.n for p in points]
        figure, axes = plt.subplots(figsize=(5, 3.5))
        axes.fill_between(n, [p.low for p in points], [p.high for p in points], alpha=0.25)
        axes.plot(n, [p.mean for p in points], marker="o", label=DEFAULT_ESTIMATOR)
        without = [p.mean for p in self.curves[WITHOUT_REPLACEMENT]]
        axes.plot(n, without, ls="--", label=WITHOUT_REPLACEMENT)
        axes.set_xlabel(
            "trials spent" + (" (pruned at their partial median)" if self.pruned else "")
        )
        axes.set_ylabel("expected best dev score")
        iid = "" if self.sampler == IID_SAMPLER else f", {self.sampler or 'sampler'}: not i.i.d."
        axes.set_title(f"Expected best, +- 1 SD (Dodge et al. 2019){iid}", fontsize=9)
        axes.legend(fontsize=8)
        figure.tight_layout()
        save_figure(figure, folder / f"{EXPECTED_BEST}.png")
        plt.close(figure)

    @staticmethod
    def _label(trial: TrialRow) -> str:
        return f"{trial.number}{'*' if trial.state == 'PRUNED' else ''}"
