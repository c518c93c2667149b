"""The t-scale boundaries of a sequential plan, made so that anyone can make them again: b_1
exact (a simulation would rest it on a few dozen crossings), the later ones, whose joint law has
no closed form, simulated from a fixed numpy seed, stored only to the decimals their Monte Carlo
error leaves whole (docs/study.md#seeds-in-planned-looks-the-sequential-design).
:func:`design_plan` is the one way a new plan is made.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from isotune.errors import IsotuneError
from isotune.study.sequential import (
    ALPHA,
    SequentialPlan,
    check_design,
    check_margin,
    spent_alpha,
)

# The later boundaries of four OBF looks at 0.05 hold a Monte Carlo error below 0.003 at this
# size (about 10 s on 2 CPU cores)
CALIBRATION_STUDIES = 8_000_000
CALIBRATION_SEED = 20261206
CALIBRATION_BATCHES = 20  # batch means: the Monte Carlo error of the simulated boundaries
DIGITS = (3, 2, 1)  # decimals a plan may store, the most its Monte Carlo error leaves whole
CHUNK_STUDIES = 50_000  # simulated at once: 50,000 studies of 40 pairs hold 16 MB

Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


@dataclass(frozen=True)
class Calibration:
    """Boundaries as :func:`boundaries` made them: the values at full precision, the Monte
    Carlo standard error of each (0 for the exact first one), and how they were drawn."""

    values: tuple[float, ...]
    errors: tuple[float, ...]
    studies: int
    seed: int

    @property
    def digits(self) -> int | None:
        """The most decimals of :data:`DIGITS` that the Monte Carlo error leaves whole (below
        half of the last one), None where it reaches even the first."""
        return next((d for d in DIGITS if max(self.errors) < 0.5 * 10**-d), None)

    @property
    def stored(self) -> tuple[float, ...]:
        """The values as a plan stores them, to :attr:`digits` decimals."""
        assert self.digits is not None, "a calibration too coarse for any digit stores none"
        return tuple(round(b, self.digits) for b in self.values)

    @property
    def description(self) -> str:
        """What a plan stores in ``boundaries_from``: enough to make the numbers again."""
        errors = ", ".join(f"{e:.4f}" for e in self.errors[1:])
        return (
            "t scale: b_1 exact, Student's t quantile at n_1 - 1 degrees of freedom; the later "
            f"ones calibrated on {self.studies:,} simulated studies of normal differences with "
            f"no true difference, numpy {np.__version__} default_rng({self.seed}), Monte Carlo "
            f"standard errors {errors or 'none'} (batch means over {CALIBRATION_BATCHES} "
            f"batches); rounded to {self.digits} decimals"
        )


def boundaries(
    looks: Sequence[int],
    alpha: float = ALPHA,
    spending: str = "obf",
    studies: int = CALIBRATION_STUDIES,
    seed: int = CALIBRATION_SEED,
) -> Calibration:
    """The boundaries b_k on the t scale: b_1 Student's t quantile at 1 - alpha(t_1) / 2, each
    later b_k the quantile of |T_k| among simulated null studies not stopped before, so that the
    share crossing at look k is alpha(t_k) - alpha(t_{k-1}) (6.70, 3.13, 2.44, 2.12 for looks at
    10, 20, 30, 40, OBF, 0.05); docs/study.md#seeds-in-planned-looks-the-sequential-design."""
    check_design(looks, alpha, spending)
    if studies < CALIBRATION_BATCHES:
        raise IsotuneError(
            f"A calibration of {studies} simulated studies cannot estimate its own error over "
            f"{CALIBRATION_BATCHES} batches. Fix: give studies at least {CALIBRATION_BATCHES} "
            f"(the default, {CALIBRATION_STUDIES:,}, for a plan)."
        )
    crossing = np.diff(spent_alpha(np.asarray(looks) / looks[-1], alpha, spending), prepend=0.0)
    first = float(stats.t.isf(crossing[0] / 2, looks[0] - 1))
    if len(looks) == 1:
        return Calibration((first,), (0.0,), studies, seed)
    draw = normal_draws(0.0, 1.0)
    statistic = np.concatenate(
        [
            np.abs(mean) / (spread / np.sqrt(looks))
            for mean, spread in look_moments(looks, draw, studies, np.random.default_rng(seed))
        ]
    )
    batches = np.array(
        [
            _calibrated(part, first, crossing)
            for part in np.array_split(statistic, CALIBRATION_BATCHES)
        ]
    )
    errors = batches.std(axis=0, ddof=1) / math.sqrt(CALIBRATION_BATCHES)
    return Calibration(
        _calibrated(statistic, first, crossing), tuple(float(e) for e in errors), studies, seed
    )


def design_plan(
    looks: Sequence[int],
    alpha: float = ALPHA,
    spending: str = "obf",
    margin: float | None = None,
    studies: int = CALIBRATION_STUDIES,
    seed: int = CALIBRATION_SEED,
) -> SequentialPlan:
    """A new plan with both decision rules, checked before the calibration starts and refused
    where the boundaries' Monte Carlo error reaches even their first decimal."""
    check_design(looks, alpha, spending)
    check_margin(margin, "the sequential plan")
    made = boundaries(looks, alpha, spending, studies, seed)
    if made.digits is None:
        raise IsotuneError(
            f"The boundaries' Monte Carlo errors {', '.join(f'{e:.4f}' for e in made.errors)} "
            "reach their first decimal. Fix: calibrate on more studies "
            f"(studies={4 * studies:,})."
        )
    return SequentialPlan(tuple(looks), alpha, spending, margin, made.stored, made.description)


def normal_draws(mean: float, sd: float) -> Draw:
    return lambda rng, shape: rng.normal(mean, sd, size=shape)


def look_moments(
    looks: Sequence[int], draw: Draw, studies: int, rng: np.random.Generator
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per chunk of at most ``CHUNK_STUDIES`` simulated studies, each study's mean and sample
    standard deviation of its differences at each look (studies x looks), computed as
    :meth:`SequentialPlan.decide` computes them."""
    return [moments(looks, d) for d in chunks(looks, draw, studies, rng)]


def chunks(looks: Sequence[int], draw: Draw, studies: int, rng: np.random.Generator):
    for start in range(0, studies, CHUNK_STUDIES):
        yield draw(rng, (min(CHUNK_STUDIES, studies - start), looks[-1]))


def moments(looks: Sequence[int], d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each study's mean and sample standard deviation at each look (studies x looks)."""
    return (
        np.stack([d[:, :n].mean(axis=1) for n in looks], axis=1),
        np.stack([d[:, :n].std(axis=1, ddof=1) for n in looks], axis=1),
    )


def _calibrated(statistic: np.ndarray, first: float, crossing: np.ndarray) -> tuple[float, ...]:
    """The boundaries whose crossings among these studies (``statistic``: studies x looks) are
    the shares ``crossing`` look by look, the first given."""
    running = statistic[:, 0] <= first
    found = [first]
    for k in range(1, len(crossing)):
        left = statistic[running, k]
        found.append(float(np.quantile(left, 1 - crossing[k] * len(statistic) / left.size)))
        running &= statistic[:, k] <= found[-1]
    return tuple(found)
