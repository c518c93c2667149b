"""A comparison that stops when its question is answered: report seeds in planned looks, the
two-sided error rate held over all of them (a group sequential design). The spending convention
(Lan & DeMets 1983, two-sided; gsDesign's one-sided one gives other boundaries), the t-scale
boundaries (:mod:`isotune.study.calibration`), the repeated confidence interval that decides
(Jennison & Turnbull 1989), the exact rule that makes a stop harder where ties leave no spread,
and what a simulation shows they hold: docs/study.md#seeds-in-planned-looks-the-sequential-design.
A stored plan holds its boundaries and never computes them again, so no new numpy moves it.
NumPy and SciPy only: a plan is made, stored, read and decided without the training stack.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from isotune.errors import IsotuneError
from isotune.sweeps.statistics import signed_rank_p

SPENDING = ("obf", "pocock")  # O'Brien-Fleming type, Pocock type
ALPHA = 0.05

DIFFERENT = "different"
DIFFERENT_SMALL = "different, smaller than the margin"
EQUIVALENT = "equivalent"
GO_ON = "go on"
BOUNDED = "bounded"
DECISIONS = (DIFFERENT, DIFFERENT_SMALL, EQUIVALENT, GO_ON, BOUNDED)  # codes 0-4 below
PLAN_KEYS = ("looks", "alpha", "spending", "margin", "boundaries", "boundaries_from", "rules")
INTERVAL = "repeated_interval"  # the repeated interval decides (every plan)
EXACT = "exact_signed_rank"  # ... and an exact test agrees
RULES = (INTERVAL, EXACT)


def spent_alpha(fractions: Sequence[float], alpha: float = ALPHA, spending: str = "obf"):
    """The two-sided alpha spent by each information fraction t in ``fractions``: 0 at t = 0,
    ``alpha`` at t = 1."""
    t = np.asarray(fractions, dtype=float)
    if spending == "obf":
        with np.errstate(divide="ignore"):  # t = 0: z / 0 = inf, nothing spent
            return 2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / np.sqrt(t))
    return alpha * np.log1p((math.e - 1) * t)


def nominal_levels(looks: Sequence[int], found: Sequence[float]) -> tuple[float, ...]:
    """Each boundary's nominal two-sided level: the Student's t tail beyond b_k at n_k - 1
    degrees of freedom (about 7.4e-5, 0.0058, 0.021, 0.040 for the IsoBN plan's 6.86, 3.11,
    2.44, 2.12 at 10, 20, 30, 40 pairs): the level of a look's exact tests."""
    return tuple(float(2 * stats.t.sf(b, n - 1)) for n, b in zip(looks, found, strict=True))


@dataclass(frozen=True)
class LookDecision:
    """The decision at one look (``look`` 1 for the first); ``exact_p`` is None where every
    difference is 0, and ``note`` says which rule decided where the interval alone would have
    said otherwise, or where the interval is a point."""

    look: int
    n: int
    boundary: float
    mean: float
    sd: float
    interval: tuple[float, float]
    decision: str
    alpha_spent: float
    exact_p: float | None = None
    nominal: float | None = None
    note: str = ""

    @property
    def stops(self) -> bool:
        return self.decision != GO_ON


@dataclass(frozen=True)
class SequentialPlan:
    """A sequential comparison's plan, stated before its runs: plain data, boundaries and all,
    that :mod:`isotune.study.preregistration` stores locked; ``margin`` in the metric's units
    (None: no equivalence stop); docs/study.md#seeds-in-planned-looks-the-sequential-design."""

    looks: tuple[int, ...]
    alpha: float
    spending: str
    margin: float | None
    boundaries: tuple[float, ...]
    boundaries_from: str = ""
    rules: tuple[str, ...] = RULES

    def __post_init__(self) -> None:
        where = "the sequential plan"
        check_design(self.looks, self.alpha, self.spending, where)
        check_margin(self.margin, where)
        _check_boundaries(self.boundaries, len(self.looks), where)
        if not self.rules or self.rules[0] != INTERVAL or not set(self.rules) <= set(RULES):
            raise IsotuneError(
                f"{where}: rules {list(self.rules)} are not [{INTERVAL}] or [{', '.join(RULES)}]. "
                "Fix: restore the plan from where it was stated."
            )

    @property
    def spent(self) -> tuple[float, ...]:
        fractions = np.asarray(self.looks, dtype=float) / self.looks[-1]
        return tuple(float(a) for a in spent_alpha(fractions, self.alpha, self.spending))

    @property
    def nominal(self) -> tuple[float, ...]:
        return nominal_levels(self.looks, self.boundaries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "looks": list(self.looks),
            "alpha": self.alpha,
            "spending": self.spending,
            "margin": self.margin,
            "boundaries": list(self.boundaries),
            "boundaries_from": self.boundaries_from,
            "rules": list(self.rules),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "a stored sequential plan") -> SequentialPlan:
        """The plan ``data`` holds (as :meth:`to_dict` gave it), its boundaries as stored: never
        computed again. A malformed plan is refused, naming ``where`` it came from."""
        if not isinstance(data, Mapping) or set(data) != set(PLAN_KEYS):
            found = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise IsotuneError(
                f"{where} holds {found}, where a sequential plan has exactly the keys "
                f"{', '.join(PLAN_KEYS)}: it is not a plan this code wrote. Fix: restore the "
                "plan from where it was stated (its study's commit), or design it anew with "
                "SequentialPlan.design and store that."
            )
        for key in ("looks", "boundaries", "rules"):
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
            rules=tuple(data["rules"]),
        )

    def decide(self, differences: Sequence[float]) -> LookDecision:
        """The decision at the look with ``len(differences)`` pairs, from paired differences at the
        metric's resolution (as ``paired_comparison`` gives them: float32 noise would make a
        spread of no spread); refused between looks. With no spread the interval is the point
        [d, d], and under the exact rule the exact tests decide (ten identical one-example
        differences: p = 2/1024, no stop at look 1)."""
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
        last = k == len(self.looks) - 1
        by_interval = DECISIONS[
            int(decision_codes(np.array([mean]), np.array([half]), self.margin, last)[0])
        ]
        nominal = self.nominal[k]
        decision, note = by_interval, ""
        if EXACT in self.rules:
            decision = exact_decision(d, by_interval, nominal, self.margin, last)
        if decision != by_interval:
            note = (
                f"The interval alone says {by_interval}; the exact signed-rank tests at the "
                f"look's nominal level {nominal:.2g} do not agree, so: {decision}."
            )
        elif sd == 0:
            rule = "the exact tests agree" if EXACT in self.rules else "the interval decides"
            note = (
                f"No spread: every difference is {mean:g}, so the interval is that point and "
                f"the t statistic is undefined; {rule}."
            )
        return LookDecision(
            look=k + 1,
            n=d.size,
            boundary=self.boundaries[k],
            mean=mean,
            sd=sd,
            interval=(mean - half, mean + half),
            decision=decision,
            alpha_spent=self.spent[k],
            exact_p=_nonzero_signed_rank_p(d),
            nominal=nominal,
            note=note,
        )


def exact_decision(
    d: np.ndarray, by_interval: str, nominal: float, margin: float | None, last: bool
) -> str:
    """What the exact rule leaves of ``by_interval``'s decision: "different" needs the exact
    two-sided signed-rank p <= ``nominal``, "equivalent" both one-sided tests at ``nominal`` / 2;
    what does not stand goes on (at the ``last`` look: is bounded)."""
    undecided = BOUNDED if last else GO_ON
    if by_interval in (DIFFERENT, DIFFERENT_SMALL):
        p = _nonzero_signed_rank_p(d)
        return by_interval if p is not None and p <= nominal else undecided
    if by_interval == EQUIVALENT and margin is not None:
        return by_interval if equivalence_p(d, margin) <= nominal / 2 else undecided
    return by_interval


def _nonzero_signed_rank_p(d: np.ndarray) -> float | None:
    """The exact two-sided signed-rank p of the non-zero ``d`` (zeros carry no sign: Wilcoxon's
    convention), None where none is left."""
    nonzero = d[d != 0]
    return signed_rank_p(nonzero) if nonzero.size else None


def equivalence_p(d: np.ndarray, margin: float) -> float:
    """The exact p of equivalence within ``margin``: the larger of the one-sided signed-rank p
    that d - margin lies below 0 and that d + margin lies above it (two one-sided tests)."""
    return max(_one_sided_p(d - margin, below=True), _one_sided_p(d + margin, below=False))


def _one_sided_p(d: np.ndarray, below: bool) -> float:
    """The exact one-sided signed-rank p that ``d`` lies below 0 (``below``) or above it: half
    the two-sided p when the signed ranks lean that way (the null distribution is symmetric),
    else at least one half (reported as 1: it rejects nothing)."""
    nonzero = d[d != 0]
    if not nonzero.size:
        return 1.0
    ranks = stats.rankdata(np.abs(nonzero))
    leaning = ranks[nonzero > 0].sum() - ranks.sum() / 2
    if (leaning < 0) != below or leaning == 0:
        return 1.0
    return signed_rank_p(nonzero) / 2


def decision_codes(
    mean: np.ndarray, half: np.ndarray, margin: float | None, last: bool
) -> np.ndarray:
    """The index in ``DECISIONS`` of the decision on each interval mean ± half; "go on" only
    where ``last`` is False."""
    low, high = mean - half, mean + half
    different = (low > 0) | (high < 0)
    inside = (low > -margin) & (high < margin) if margin is not None else np.zeros_like(different)
    undecided = DECISIONS.index(BOUNDED if last else GO_ON)
    return np.select(
        [different & inside, different, inside],
        [DECISIONS.index(DIFFERENT_SMALL), DECISIONS.index(DIFFERENT), DECISIONS.index(EQUIVALENT)],
        default=undecided,
    )


def check_design(
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


def check_margin(margin: float | None, where: str) -> None:
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
