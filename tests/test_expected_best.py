"""The expected best of n trials (Dodge et al. 2019; docs/search.md): each estimator against every
draw enumerated, and against allentune's ``samplemax`` restated loop by loop; failed trials as
draws that found nothing; the band clipped to the values observed."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from scipy.special import comb

from isotune.search.expected_best import (
    WITH_REPLACEMENT,
    WITHOUT_REPLACEMENT,
    best_of_n,
    expected_best_curve,
)

SCORES = [0.61, 0.55, 0.70, 0.55, 0.64]  # a tie included
DRAWS = {
    WITH_REPLACEMENT: lambda values, n: itertools.product(values, repeat=n),
    WITHOUT_REPLACEMENT: lambda values, n: itertools.combinations(values, n),
}


@pytest.mark.parametrize("estimator", [WITH_REPLACEMENT, WITHOUT_REPLACEMENT])
@pytest.mark.parametrize("maximize", [True, False])
def test_each_estimator_is_the_mean_and_sd_of_the_best_over_every_draw(estimator, maximize):
    best = max if maximize else min
    for n in range(1, len(SCORES) + 1):
        bests = [best(draw) for draw in DRAWS[estimator](SCORES, n)]
        point = best_of_n(SCORES, n, maximize, estimator)
        assert point.mean == pytest.approx(statistics.fmean(bests), abs=1e-12)
        assert point.sd == pytest.approx(statistics.pstdev(bests), abs=1e-12)
        assert point.none == 0
    curve = expected_best_curve(SCORES, maximize, estimator)
    assert curve[0].mean == pytest.approx(np.mean(SCORES))
    means = [point.mean for point in curve]
    assert means == sorted(means, reverse=not maximize)
    if estimator == WITHOUT_REPLACEMENT:  # all N drawn: the observed best, for sure
        assert curve[-1].mean == pytest.approx(best(SCORES)) and curve[-1].sd == pytest.approx(0)


@pytest.mark.parametrize("estimator", [WITH_REPLACEMENT, WITHOUT_REPLACEMENT])
def test_failed_trials_are_draws_that_found_nothing(estimator):
    """The expected best given one of the n draws has a value, and the chance none has."""
    values = [0.61, None, 0.70, 0.55, None, 0.64]
    for n in range(1, len(values) + 1):
        draws = list(DRAWS[estimator](values, n))
        found = [
            max(v for v in draw if v is not None)
            for draw in draws
            if any(v is not None for v in draw)
        ]
        point = best_of_n(values, n, True, estimator)
        assert point.mean == pytest.approx(statistics.fmean(found), abs=1e-12)
        assert point.sd == pytest.approx(statistics.pstdev(found), abs=1e-12)
        assert point.none == pytest.approx(1 - len(found) / len(draws), abs=1e-12)
    # A failure costs budget: the curve over 6 trials spent lies below the 4 values' own.
    assert best_of_n(values, 2).mean < best_of_n([0.61, 0.70, 0.55, 0.64], 2).mean


def allentune_samplemax(values: list[float], with_replacement: bool) -> dict[str, list[float]]:
    """allentune's ``samplemax`` (allentune/commands/plot.py), restated loop by loop: the CDF
    (i/N)^n or C(i, n)/C(N, n), its differences as the pdf, the mean, and the field ``var``,
    which is a standard deviation."""
    v = sorted(values)
    big_n = len(v)
    means, sds = [], []
    for n in range(1, big_n + 1):
        cdf = [
            (i / big_n) ** n if with_replacement else comb(i, n) / comb(big_n, n)
            for i in range(1, big_n + 1)
        ]
        pdf = [cdf[0]] + [cdf[i] - cdf[i - 1] for i in range(1, big_n)]
        mean = sum(p * x for p, x in zip(pdf, v, strict=True))
        means.append(mean)
        sds.append(math.sqrt(sum(p * (x - mean) ** 2 for p, x in zip(pdf, v, strict=True))))
    return {"mean": means, "var": sds, "max": max(v), "min": min(v)}


@pytest.mark.parametrize("estimator", [WITH_REPLACEMENT, WITHOUT_REPLACEMENT])
def test_the_curve_and_its_band_are_allentunes(estimator):
    values = list(np.random.default_rng(0).normal(0.6, 0.05, size=12))
    theirs = allentune_samplemax(values, estimator == WITH_REPLACEMENT)
    ours = expected_best_curve(values, True, estimator)
    assert [p.mean for p in ours] == pytest.approx(theirs["mean"], abs=1e-12)
    assert [p.sd for p in ours] == pytest.approx(theirs["var"], abs=1e-12)
    # The shaded band: mean +- SD, clipped to the observed maximum and minimum.
    for point, mean, sd in zip(ours, theirs["mean"], theirs["var"], strict=True):
        assert point.high == pytest.approx(min(mean + sd, theirs["max"]))
        assert point.low == pytest.approx(max(mean - sd, theirs["min"]))
    assert any(p.high == theirs["max"] for p in ours)  # the clip bites


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="finite value"):
        best_of_n([None, None], 1)
    with pytest.raises(ValueError, match="n = 4"):
        best_of_n([0.5, 0.6, 0.7], 4, estimator=WITHOUT_REPLACEMENT)
    with pytest.raises(ValueError, match="estimator"):
        best_of_n([0.5], 1, estimator="bootstrap")
