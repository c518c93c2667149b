"""Whether the sequential design holds its error rates, and the report seeds it spends, measured
on simulated studies (docs/study.md, "Seeds in planned looks").

The plan is the project's design (docs/results.md, the sequential run): looks at 10, 20, 30 and
40 pairs, O'Brien-Fleming-type spending at two-sided 0.05, an equivalence margin of 1 point,
boundaries on the t scale as ``isotune.study.calibration.design_plan`` makes a new plan's (b_1
exact, the later ones calibrated on 8,000,000 studies, numpy seed 20261206) or typed with
``--boundaries`` (6.86 3.11 2.44 2.12: the IsoBN plan as stated), under the rules a new plan
states (the repeated interval and the exact signed-rank tests; ``--interval-only``: the
interval alone, the IsoBN plan's stated rules). Each study decides as
``SequentialPlan.decide`` does. Each setting simulates
``--studies`` studies, from a numpy seed apart from the calibration's, of differences that are
normal at the spreads of this project's pairs on RTE (IsoBN 0.93 points, CosReg 1.61), or the
real CosReg-minus-none differences of seeds 106-125 (docs/results/confirmatory_rte_cosreg, read
as the study report reads them) recentred on the true difference and resampled with replacement.
It prints, per setting, the share of studies ending in each decision with its Monte Carlo
standard error and the pairs used: with no true difference and no margin, "different" is the
error rate (at most alpha plus its Monte Carlo error); at a true difference equal to the margin,
"equivalent" is the equivalence error (at most alpha/2 plus its error). Then the mean pairs at
no difference and at 1 point beside a fixed design with the sequential design's power at 1 point
(the smallest paired t-test with it, by the noncentral t).

    python benchmarks/bench_sequential.py
    python benchmarks/bench_sequential.py --studies 20000 --boundaries 6.86 3.11 2.44 2.12
    python benchmarks/bench_sequential.py --interval-only --boundaries 6.86 3.11 2.44 2.12
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import stats
from sequential_simulation import SimulatedStudies, fixed_pairs, simulate

from isotune.study.calibration import CALIBRATION_STUDIES, design_plan
from isotune.study.results import read_arm
from isotune.study.sequential import (
    BOUNDED,
    DIFFERENT_SMALL,
    EQUIVALENT,
    INTERVAL,
    RULES,
    SequentialPlan,
)
from isotune.sweeps.statistics import paired_comparison

LOOKS = (10, 20, 30, 40)
ALPHA = 0.05
MARGIN = 1.0  # points
SPREADS = {"IsoBN pairs": 0.93, "CosReg pairs": 1.61}  # points, this project's on RTE
RTE_STUDY = Path(__file__).resolve().parents[1] / "docs/results/confirmatory_rte_cosreg"
RTE_SEEDS = range(106, 126)  # the confirmatory seeds: 101-105 chose the comparison
SIMULATION_SEED = 20261207  # apart from the calibration's


def rte_differences(study: Path) -> np.ndarray:
    """CosReg minus none on RTE, seed by seed, in points, at the accuracy's resolution."""
    held_out = {
        arm: read_arm(study / "rte" / arm, "rte", arm, RTE_SEEDS).held_out_scores()
        for arm in ("none", "cosreg")
    }
    comparison = paired_comparison(held_out["none"], held_out["cosreg"])
    if comparison.n != len(RTE_SEEDS):
        raise SystemExit(f"{study} has {comparison.n} pairs on seeds 106-125, not 20")
    return 100 * np.asarray(comparison.differences)


def row(plan: str, name: str, spread: float, true: float, found: SimulatedStudies) -> None:
    looks = " ".join(f"{share:5.3f}" for share in found.stopped_at)
    print(
        f"| {plan} | {name} | {spread:.2f} | {true:g} | {found.studies:,} "
        f"| {found.different:.4f} ± {found.error(found.different):.4f} "
        f"| {found.rates[DIFFERENT_SMALL]:.4f} "
        f"| {found.rates[EQUIVALENT]:.4f} ± {found.error(found.rates[EQUIVALENT]):.4f} "
        f"| {found.rates[BOUNDED]:.4f} | {found.mean_pairs:.1f} | {looks} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=1_000_000, help="simulated per setting")
    parser.add_argument("--boundaries", type=float, nargs=len(LOOKS), help="t-scale, typed")
    parser.add_argument("--rte-study", type=Path, default=RTE_STUDY, help="the confirmatory study")
    parser.add_argument("--interval-only", action="store_true", help="the interval decides alone")
    args = parser.parse_args()
    start = time.perf_counter()
    rules = (INTERVAL,) if args.interval_only else RULES
    if args.boundaries:
        plan = SequentialPlan(LOOKS, ALPHA, "obf", MARGIN, tuple(args.boundaries), "typed", rules)
    else:
        plan = replace(design_plan(LOOKS, ALPHA, "obf", MARGIN), rules=rules)
    without_margin = replace(plan, margin=None)
    # one look spends all of alpha there: the fixed paired t-test, to set the others beside
    critical = float(stats.t.isf(ALPHA / 2, LOOKS[-1] - 1))
    t_test = SequentialPlan(LOOKS[-1:], ALPHA, "obf", None, (critical,), "Student's t", (INTERVAL,))
    rte = rte_differences(args.rte_study)
    print(
        f"Looks at {', '.join(map(str, LOOKS))} pairs, O'Brien-Fleming type at {ALPHA}, margin "
        f"{MARGIN} point; boundaries {', '.join(f'{b:.2f}' for b in plan.boundaries)} "
        f"({plan.boundaries_from}); rules {', '.join(plan.rules)}; studies simulated from numpy "
        f"seed {SIMULATION_SEED}."
    )
    print(f"RTE differences (CosReg - none, seeds 106-125, points): {np.round(rte, 2).tolist()}")
    print(f"  mean {rte.mean():+.2f}, sd {rte.std(ddof=1):.2f}; recentred before resampling\n")
    print(
        "| plan | differences | sd | true difference | studies | different | of which "
        "smaller than the margin | equivalent | bounded | mean pairs | stopped at each look |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(SIMULATION_SEED)
    sources = [(name, spread, {"sd": spread}) for name, spread in SPREADS.items()]
    # resampled with replacement, the differences spread as the pool does: its sd with ddof 0
    sources.append(("RTE resampled", float(rte.std()), {"pool": rte}))
    results = {}
    settings = (
        (f"t-test at {LOOKS[-1]} pairs", t_test, 0.0),  # the fixed design's error, for scale
        ("sequential, no margin", without_margin, 0.0),  # the error of "different"
        (f"sequential, margin {MARGIN:g}", plan, 0.0),
        (f"sequential, margin {MARGIN:g}", plan, MARGIN),  # the error of "equivalent"
    )
    for label, stated, true in settings:
        for name, spread, draws in sources:
            found = simulate(stated, true, args.studies, rng, **draws)
            results[name, true, stated] = found
            row(label, name, spread, true, found)

    def two_errors(rate: float, calibration: int = CALIBRATION_STUDIES) -> float:
        """Twice the Monte Carlo error of a rate the plan's boundaries hold: the calibration's
        (its boundaries hold alpha to within its own error) and this simulation's."""
        return 2 * np.sqrt(rate * (1 - rate) * (1 / calibration + 1 / args.studies))

    print(
        f"\nBounds, alpha plus twice the Monte Carlo error of the calibration "
        f"({CALIBRATION_STUDIES:,} studies) and of this simulation: 'different' at no difference "
        f"without a margin {ALPHA + two_errors(ALPHA):.4f}; 'equivalent' at a true difference "
        f"of one margin {ALPHA / 2 + two_errors(ALPHA / 2):.4f}\n"
    )
    print(
        "| differences | sd | power at 1 point | mean pairs at 0 | mean pairs at 1 point "
        "| fixed design of that power |"
    )
    print("|---|---|---|---|---|---|")
    for name, spread, _ in sources:
        at_zero, at_one = results[name, 0.0, plan], results[name, MARGIN, plan]
        power = min(at_one.different, 1 - 1 / at_one.studies)  # 1 in every study: at least this
        fixed = fixed_pairs(MARGIN, spread, power, ALPHA)
        print(
            f"| {name} | {spread:.2f} | {at_one.different:.4f} | {at_zero.mean_pairs:.1f} "
            f"| {at_one.mean_pairs:.1f} | {fixed} |"
        )
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
