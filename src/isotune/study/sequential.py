"""A comparison that stops when its question is answered: report seeds in planned looks, the
error rate held over all of them (docs/study.md, "Seeds in planned looks").

A fixed design picks n report seeds up front; when the spread turns out larger the answer is
"not established", and more seeds mean a new, unplanned test (looking after every batch and
stopping at the first |t| >= 1.96 is a 12.6% test over four looks, not a 5% one). A group
sequential design plans the looks instead: pairs n_1 < ... < n_K, and at each look a boundary
b_k that spends part of the two-sided level alpha, so that over all the looks together a study
with no true difference says "different" with probability alpha.

- **Spending** (Lan & DeMets 1983), two-sided, with t_k = n_k / n_K: O'Brien-Fleming type
  ``"obf"``, alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), which spends little early; Pocock
  type ``"pocock"``, alpha(t) = alpha ln(1 + (e - 1) t), which spends evenly. (gsDesign, rpact
  and ldbounds spend the one-sided function at alpha/2 per side instead, which gives other
  boundaries: 4.33, 2.96, 2.36, 2.01 for four equal looks against this convention's 3.92, 2.77,
  2.30, 2.04.)
- **Boundaries on the t scale** (:func:`boundaries`), calibrated by simulation: the spread is
  estimated from the pairs, and at 10-40 pairs the normal-scale boundaries
  (:func:`normal_boundaries`) mapped through t quantiles give about 5.4%, not 5%. Many studies
  of normal differences with no true difference are simulated from a fixed numpy seed; b_k is
  the quantile of |T_k| = |mean| / (sd / sqrt(n_k)) among those not stopped before, so that the
  share crossing by look k is alpha(t_k). T is pivotal under normality, so boundaries made at
  no difference and unit spread hold at every true difference and spread.
- **The plan** (:class:`SequentialPlan`) is plain data that stores its boundaries: a plan read
  back (:meth:`SequentialPlan.from_dict`, :meth:`SequentialPlan.read`) never computes them
  again, so neither a new numpy nor scipy's randomized integration moves a stated plan.
- **The decision at a look** (:meth:`SequentialPlan.decide`): the repeated confidence interval
  (Jennison & Turnbull 1989) mean(d) ± b_k sd(d) / sqrt(n_k), which holds its coverage at every
  look together whatever the stopping rule. "different" when it excludes 0 ("different, smaller
  than the margin" when it also lies inside (-margin, +margin)); "equivalent" when it lies
  inside (-margin, +margin) and contains 0; otherwise "go on", and at the last look "bounded",
  the interval reported as the bound. Equivalence stops are non-binding: the boundaries are
  calibrated as if the study never stopped for equivalence, so stopping for it only lowers the
  rate of "different"; with 1 - alpha intervals it errs at most alpha/2 per side.
- **Simulation** (:func:`simulate`): the rate of each decision and the pairs a plan uses, on
  normal differences or on real ones recentred and resampled, and the pairs a fixed design
  needs for the same power (:func:`fixed_pairs`). ``benchmarks/bench_sequential.py`` runs them
  at full size.

NumPy and SciPy only: a plan is made, stored, read and decided without the training stack.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy import optimize, stats

from isotune.atomic_files import write_text
from isotune.errors import IsotuneError

SPENDING = ("obf", "pocock")  # O'Brien-Fleming type, Pocock type (module docstring)
ALPHA = 0.05
CALIBRATION_STUDIES = 400_000  # b_1 of four OBF looks rests on about 35 crossings at this size
CALIBRATION_SEED = 20261206
CHUNK_STUDIES = 50_000  # simulated at once: 50,000 studies of 40 pairs hold 16 MB
MAX_FIXED_PAIRS = 100_000  # the largest fixed design :func:`fixed_pairs` looks for

DIFFERENT = "different"
DIFFERENT_SMALL = "different, smaller than the margin"
EQUIVALENT = "equivalent"
GO_ON = "go on"
BOUNDED = "bounded"
DECISIONS = (DIFFERENT, DIFFERENT_SMALL, EQUIVALENT, GO_ON, BOUNDED)  # codes 0-4 below
PLAN_KEYS = ("looks", "alpha", "spending", "margin", "boundaries", "boundaries_from")


def spent_alpha(fractions: Sequence[float], alpha: float = ALPHA, spending: str = "obf"):
    """The two-sided alpha spent by each information fraction t in ``fractions`` (module
    docstring): 0 at t = 0, ``alpha`` at t = 1."""
    t = np.asarray(fractions, dtype=float)
    if spending == "obf":
        with np.errstate(divide="ignore"):  # t = 0: z / 0 = inf, nothing spent
            return 2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / np.sqrt(t))
    return alpha * np.log1p((math.e - 1) * t)


def normal_boundaries(
    looks: Sequence[int], alpha: float = ALPHA, spending: str = "obf"
) -> tuple[float, ...]:
    """The boundaries c_k on the normal scale (a known spread): c_k solves
    P(|Z_1| < c_1, ..., |Z_k| < c_k) = 1 - alpha(t_k), (Z_1..Z_K) jointly normal with
    corr(Z_i, Z_j) = sqrt(t_i / t_j) for i < j. Four equal looks at alpha 0.05: O'Brien-Fleming
    type 3.92, 2.77, 2.30, 2.04; Pocock type 2.37, 2.37, 2.36, 2.35.

    SciPy integrates the rectangles by randomized quasi-Monte Carlo (to about 1e-5, from a fixed
    seed here): a reference for :func:`boundaries` and for reading, not what a plan stores."""
    _check_design(looks, alpha, spending)
    t = np.asarray(looks, dtype=float) / looks[-1]
    spent = spent_alpha(t, alpha, spending)
    correlation = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    found = [float(stats.norm.isf(spent[0] / 2))]
    for k in range(1, len(looks)):
        joint = stats.multivariate_normal(mean=np.zeros(k + 1), cov=correlation[: k + 1, : k + 1])

        def unstopped(c: float, k: int = k, joint: Any = joint) -> float:
            upper = np.array([*found, c])
            inside = joint.cdf(upper, lower_limit=-upper, rng=np.random.default_rng(k))
            return inside - (1 - spent[k])

        found.append(float(optimize.brentq(unstopped, 0.1, 20.0, xtol=1e-5)))
    return tuple(found)


def boundaries(
    looks: Sequence[int],
    alpha: float = ALPHA,
    spending: str = "obf",
    studies: int = CALIBRATION_STUDIES,
    seed: int = CALIBRATION_SEED,
) -> tuple[float, ...]:
    """The boundaries b_k on the t scale, calibrated on ``studies`` simulated studies of normal
    differences with no true difference, drawn from ``numpy.random.default_rng(seed)`` (module
    docstring): b_k is the quantile of |T_k| among the studies that crossed no earlier look such
    that the share of all studies crossing (|T_k| > b_k) at look k is alpha(t_k) -
    alpha(t_{k-1}). Looks at 10, 20, 30, 40 pairs, O'Brien-Fleming type at 0.05: 6.86, 3.11,
    2.44, 2.12. One look gives Student's t_{1-alpha/2, n-1} within its Monte Carlo error.

    A boundary that few studies cross is coarse: b_1 of those looks rests on about 35 crossings
    of 400,000 (alpha(0.25) = 0.00009); the later ones on thousands."""
    _check_design(looks, alpha, spending)
    if studies < 1:
        raise IsotuneError(
            f"A calibration of {studies} simulated studies calibrates nothing. Fix: give "
            f"studies a positive count (the default, {CALIBRATION_STUDIES:,}, for a plan)."
        )
    draw = _normal_draws(0.0, 1.0)
    statistic = np.concatenate(
        [
            np.abs(mean) / (spread / np.sqrt(looks))
            for mean, spread in _look_moments(looks, draw, studies, np.random.default_rng(seed))
        ]
    )
    crossing = np.diff(spent_alpha(np.asarray(looks) / looks[-1], alpha, spending), prepend=0.0)
    running = np.ones(studies, dtype=bool)
    found = []
    for k, share in enumerate(crossing):
        left = statistic[running, k]
        found.append(float(np.quantile(left, 1 - share * studies / left.size)))
        running &= statistic[:, k] <= found[-1]
    return tuple(found)


@dataclass(frozen=True)
class LookDecision:
    """The decision at one look: the look (1 for the first), its pairs n and boundary, the
    differences' mean and sample standard deviation, the repeated confidence interval
    mean ± boundary sd / sqrt(n), the decision (one of ``DECISIONS``), the two-sided alpha spent
    by this look, and a note where the interval is a point (no spread), "" otherwise."""

    look: int
    n: int
    boundary: float
    mean: float
    sd: float
    interval: tuple[float, float]
    decision: str
    alpha_spent: float
    note: str = ""

    @property
    def stops(self) -> bool:
        """Whether the study ends at this look: every decision but "go on"."""
        return self.decision != GO_ON


@dataclass(frozen=True)
class SequentialPlan:
    """A sequential comparison's plan, stated before its runs (module docstring): the pairs at
    each look, the two-sided ``alpha``, the ``spending`` function (``SPENDING``), the
    equivalence ``margin`` in the metric's units (None: no equivalence stop), the t-scale
    ``boundaries`` of its looks, and how they were made (``boundaries_from``). Plain data:
    :meth:`to_dict` and :meth:`from_dict` store and read it, boundaries and all."""

    looks: tuple[int, ...]
    alpha: float
    spending: str
    margin: float | None
    boundaries: tuple[float, ...]
    boundaries_from: str = ""

    def __post_init__(self) -> None:
        where = "the sequential plan"
        _check_design(self.looks, self.alpha, self.spending, where)
        _check_margin(self.margin, where)
        _check_boundaries(self.boundaries, len(self.looks), where)

    @classmethod
    def design(
        cls,
        looks: Sequence[int],
        alpha: float = ALPHA,
        spending: str = "obf",
        margin: float | None = None,
        studies: int = CALIBRATION_STUDIES,
        seed: int = CALIBRATION_SEED,
    ) -> SequentialPlan:
        """A new plan, its boundaries calibrated by :func:`boundaries` (seconds at the default
        400,000 studies), checked before the calibration starts."""
        _check_design(looks, alpha, spending)
        _check_margin(margin, "the sequential plan")
        return cls(
            looks=tuple(looks),
            alpha=alpha,
            spending=spending,
            margin=margin,
            boundaries=boundaries(looks, alpha, spending, studies, seed),
            boundaries_from=(
                f"t scale, calibrated on {studies:,} simulated studies of normal differences "
                f"with no true difference, numpy default_rng({seed})"
            ),
        )

    @property
    def spent(self) -> tuple[float, ...]:
        """The two-sided alpha spent by each look, alpha(n_k / n_K)."""
        fractions = np.asarray(self.looks, dtype=float) / self.looks[-1]
        return tuple(float(a) for a in spent_alpha(fractions, self.alpha, self.spending))

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain YAML/JSON values, every key of ``PLAN_KEYS``."""
        return {
            "looks": list(self.looks),
            "alpha": self.alpha,
            "spending": self.spending,
            "margin": self.margin,
            "boundaries": list(self.boundaries),
            "boundaries_from": self.boundaries_from,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "a stored sequential plan") -> SequentialPlan:
        """The plan ``data`` holds (as :meth:`to_dict` wrote it), its boundaries as stored: never
        computed again. A malformed plan is refused, naming ``where`` it came from."""
        if not isinstance(data, Mapping) or set(data) != set(PLAN_KEYS):
            found = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise IsotuneError(
                f"{where} holds {found}, where a sequential plan has exactly the keys "
                f"{', '.join(PLAN_KEYS)}: it is not a plan this code wrote. Fix: restore the "
                "plan from where it was stated (its study's commit), or design it anew with "
                "SequentialPlan.design and store that."
            )
        for key in ("looks", "boundaries"):
            if not isinstance(data[key], list):
                raise IsotuneError(
                    f"{where}: {key} is {data[key]!r}, where a plan holds a list. Fix: restore "
                    "the plan from where it was stated."
                )
        return cls(
            looks=tuple(data["looks"]),
            alpha=data["alpha"],
            spending=data["spending"],
            margin=data["margin"],
            boundaries=tuple(data["boundaries"]),
            boundaries_from=str(data["boundaries_from"]),
        )

    def write(self, path: str | Path) -> Path:
        """Store the plan as YAML at ``path``, whole or not at all."""
        return write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def read(cls, path: str | Path) -> SequentialPlan:
        """The plan stored at ``path`` by :meth:`write`, its boundaries as stored."""
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise IsotuneError(
                f"{path} is not YAML ({error}), so its sequential plan cannot be read. Fix: "
                "restore the plan from where it was stated."
            ) from None
        return cls.from_dict(data, where=str(path))

    def decide(self, differences: Sequence[float]) -> LookDecision:
        """The decision at the look with ``len(differences)`` pairs (module docstring), from the
        paired differences in the metric's units, at the metric's resolution (as
        :func:`isotune.sweeps.statistics.paired_comparison` gives them: float32 noise would
        make a spread of no spread). A count that is no planned look is refused: the plan
        decides nothing between its looks.

        With no spread (every difference the same d) the interval is the point [d, d]: the t
        statistic is undefined, and the interval decides, "different" when d is not 0,
        "equivalent" when d is 0 and the plan has a margin; the note says so.
        """
        d = np.asarray(differences, dtype=float)
        if d.size not in self.looks:
            raise IsotuneError(
                f"{d.size} paired differences are no look of this plan (looks at "
                f"{', '.join(map(str, self.looks))} pairs): a sequential plan decides at its "
                "looks only, since a look between them spends alpha the plan did not. Fix: "
                "decide when the pairs reach the next look."
            )
        if not np.isfinite(d).all():
            raise IsotuneError(
                f"The paired differences hold {d[~np.isfinite(d)].tolist()}, which no interval "
                "can use. Fix: a failed run counts at the score its plan states for it; give "
                "that score's difference."
            )
        k = self.looks.index(d.size)
        if (d == d[0]).all():  # exactly: a float sum's rounding would make a spread of 1e-17
            mean, sd = float(d[0]), 0.0
        else:
            mean, sd = float(d.mean()), float(d.std(ddof=1))
        half = self.boundaries[k] * sd / math.sqrt(d.size)
        code = _decision_codes(
            np.array([mean]), np.array([half]), self.margin, k == len(self.looks) - 1
        )
        note = ""
        if sd == 0:
            note = (
                f"No spread: every difference is {mean:g}, so the interval is that point and "
                "the t statistic is undefined; the interval decides."
            )
        return LookDecision(
            look=k + 1,
            n=d.size,
            boundary=self.boundaries[k],
            mean=mean,
            sd=sd,
            interval=(mean - half, mean + half),
            decision=DECISIONS[int(code[0])],
            alpha_spent=self.spent[k],
            note=note,
        )


@dataclass(frozen=True)
class SimulatedStudies:
    """What a plan did over ``studies`` simulated studies: the share ending in each decision
    (every study ends: the last look decides "bounded" at worst), the share stopped at each
    look, and the mean pairs used."""

    studies: int
    rates: Mapping[str, float]
    stopped_at: tuple[float, ...]
    mean_pairs: float

    @property
    def different(self) -> float:
        """The share that said "different", smaller than the margin or not: the error rate at
        no true difference, the power at one."""
        return self.rates[DIFFERENT] + self.rates[DIFFERENT_SMALL]

    def error(self, rate: float) -> float:
        """The Monte Carlo standard error of a ``rate`` over these studies."""
        return math.sqrt(rate * (1 - rate) / self.studies)


def simulate(
    plan: SequentialPlan,
    true_difference: float,
    studies: int,
    rng: np.random.Generator,
    *,
    sd: float | None = None,
    pool: Sequence[float] | None = None,
) -> SimulatedStudies:
    """``studies`` simulated studies of ``plan`` at ``true_difference``, each deciding as
    :meth:`SequentialPlan.decide` does at every look until one stops it. The differences are
    normal with standard deviation ``sd``, or drawn with replacement from ``pool`` (real
    differences) recentred on ``true_difference``: exactly one of the two."""
    if (sd is None) == (pool is None):
        raise ValueError("simulate takes sd (normal differences) or pool (real ones), one of them")
    if pool is None:
        draw = _normal_draws(true_difference, sd)
    else:
        draw = _resampled_draws(np.asarray(pool, dtype=float), true_difference)
    scale = np.asarray(plan.boundaries) / np.sqrt(plan.looks)  # half-width per unit of sd
    ends = np.concatenate(
        [
            _first_stops(mean, scale * spread, plan.margin)
            for mean, spread in _look_moments(plan.looks, draw, studies, rng)
        ]
    )
    look, code = ends[:, 0], ends[:, 1]
    return SimulatedStudies(
        studies=studies,
        rates={
            decision: float(np.mean(code == i))
            for i, decision in enumerate(DECISIONS)
            if decision != GO_ON
        },
        stopped_at=tuple(float(np.mean(look == k)) for k in range(len(plan.looks))),
        mean_pairs=float(np.mean(np.asarray(plan.looks)[look])),
    )


def fixed_pairs(difference: float, sd: float, power: float, alpha: float = ALPHA) -> int:
    """The fewest pairs whose two-sided paired t-test at ``alpha`` detects a true mean
    ``difference`` of differences with spread ``sd`` with at least ``power``: a fixed design
    to set beside a sequential one of the same power (its simulated :attr:`different` rate).
    The power at n pairs is P(|T| > t_{1-alpha/2, n-1}) for T noncentral t with n - 1 degrees
    of freedom and noncentrality difference / sd * sqrt(n); it grows with n, so the fewest is
    found by doubling n, then halving the gap."""
    if not 0 < power < 1 or difference == 0 or not sd > 0:
        raise ValueError(
            f"fixed_pairs needs 0 < power < 1, a difference and a spread, got power {power}, "
            f"difference {difference}, sd {sd}"
        )

    def enough(n: int) -> bool:
        critical, shift = stats.t.isf(alpha / 2, n - 1), abs(difference) / sd * math.sqrt(n)
        found = stats.nct.sf(critical, n - 1, shift) + stats.nct.cdf(-critical, n - 1, shift)
        return found >= power

    low, high = 1, 2  # too few, and a candidate
    while not enough(high):
        if high >= MAX_FIXED_PAIRS:
            raise ValueError(f"no fixed design up to {MAX_FIXED_PAIRS:,} pairs has power {power}")
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


def _normal_draws(mean: float, sd: float) -> Draw:
    return lambda rng, shape: rng.normal(mean, sd, size=shape)


def _resampled_draws(pool: np.ndarray, true_difference: float) -> Draw:
    centred = pool - pool.mean() + true_difference
    return lambda rng, shape: rng.choice(centred, size=shape, replace=True)


def _look_moments(
    looks: Sequence[int], draw: Draw, studies: int, rng: np.random.Generator
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per chunk of at most ``CHUNK_STUDIES`` simulated studies, each study's mean and sample
    standard deviation of its differences at each look (studies x looks), computed as
    :meth:`SequentialPlan.decide` computes them."""
    chunks = []
    for start in range(0, studies, CHUNK_STUDIES):
        d = draw(rng, (min(CHUNK_STUDIES, studies - start), looks[-1]))
        chunks.append(
            (
                np.stack([d[:, :n].mean(axis=1) for n in looks], axis=1),
                np.stack([d[:, :n].std(axis=1, ddof=1) for n in looks], axis=1),
            )
        )
    return chunks


def _decision_codes(
    mean: np.ndarray, half: np.ndarray, margin: float | None, last: bool
) -> np.ndarray:
    """The index in ``DECISIONS`` of the decision on each interval mean ± half (module
    docstring); "go on" only where ``last`` is False."""
    low, high = mean - half, mean + half
    different = (low > 0) | (high < 0)
    inside = (low > -margin) & (high < margin) if margin is not None else np.zeros_like(different)
    undecided = DECISIONS.index(BOUNDED if last else GO_ON)
    return np.select(
        [different & inside, different, inside],
        [DECISIONS.index(DIFFERENT_SMALL), DECISIONS.index(DIFFERENT), DECISIONS.index(EQUIVALENT)],
        default=undecided,
    )


def _first_stops(mean: np.ndarray, half: np.ndarray, margin: float | None) -> np.ndarray:
    """Each study's first look whose decision stops it and that decision's code (studies x 2),
    from its means and half-widths at every look (studies x looks)."""
    last = mean.shape[1] - 1
    codes = np.stack(
        [_decision_codes(mean[:, k], half[:, k], margin, k == last) for k in range(last + 1)],
        axis=1,
    )
    look = np.argmax(codes != DECISIONS.index(GO_ON), axis=1)  # the last look always stops
    return np.stack([look, codes[np.arange(len(look)), look]], axis=1)


def _check_design(
    looks: Sequence[int], alpha: float, spending: str, where: str = "the sequential plan"
) -> None:
    fix = "Fix: give the pair counts of the looks in increasing order, as looks=[10, 20, 30, 40]."
    if not looks or any(isinstance(n, bool) or not isinstance(n, int) for n in looks):
        raise IsotuneError(f"{where}: looks {list(looks)} are not pair counts. {fix}")
    if looks[0] < 2 or any(b <= a for a, b in itertools.pairwise(looks)):
        raise IsotuneError(
            f"{where}: looks {list(looks)} are not strictly increasing pair counts of at least "
            f"2 (a spread needs two pairs, and each look adds pairs). {fix}"
        )
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise IsotuneError(
            f"{where}: alpha {alpha!r} is no level; the two-sided alpha lies in (0, 1). Fix: "
            f"give one, as alpha={ALPHA}."
        )
    if spending not in SPENDING:
        raise IsotuneError(
            f"{where}: spending {spending!r} is none this code knows. Fix: give one of "
            f"{', '.join(SPENDING)} (O'Brien-Fleming type, Pocock type)."
        )


def _check_margin(margin: float | None, where: str) -> None:
    if margin is None:
        return
    number = isinstance(margin, (int, float)) and not isinstance(margin, bool)
    if not number or not math.isfinite(margin) or margin <= 0:
        raise IsotuneError(
            f"{where}: margin {margin!r} is no equivalence margin, which is a positive number "
            "in the metric's units (the difference that would not matter). Fix: give one, as "
            "margin=1.0 for one point, or none for a plan without an equivalence stop."
        )


def _check_boundaries(found: Sequence[float], looks: int, where: str) -> None:
    numbers = all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in found)
    if len(found) != looks or not numbers or not all(math.isfinite(b) and b > 0 for b in found):
        raise IsotuneError(
            f"{where}: boundaries {list(found)} are not {looks} positive numbers, one per "
            "look. Fix: restore the plan from where it was stated, or design it anew with "
            "SequentialPlan.design."
        )
