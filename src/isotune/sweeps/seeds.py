"""Which seed pairs the runs of a sweep: the one that varies.

A run has three seeds (``conf/train.yaml``): ``seed``, the one knob, and the two it sets by
default, ``seed_init`` (the new layers' initialisation and dropout) and ``seed_data`` (the batch
order, I-STAR's subset, the isotropy probe). Dodge et al. (2020) find both contribute comparably
to the variance of fine-tuning, so a sweep may vary one with the other fixed. Runs of two
configurations are paired when they share the seeds that vary: then a pair differs by its
configuration alone. :class:`SeedAxis` says which varies over a set of runs and gives each run its
pairing key, the ``seed`` column of every table:

- ``seed``: each run's seed_init equals its seed_data (``seed=1,2,3``, the defaults): the key is
  that seed;
- ``seed_init`` or ``seed_data``: only that one varies, the other is one value for every run: the
  key is the varying one;
- ``seed_init/seed_data``: both vary apart: the key is ``"<init>/<data>"``, and only runs that share
  both are pairs.

Runs written before the split (no ``seed_init``/``seed_data`` in results.json) had both set by
``seed``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from isotune.sweeps.runs import Run

SEED_AXES = ("seed", "seed_init", "seed_data")


def run_seeds(run: Run) -> tuple[int, int]:
    """(seed_init, seed_data) of a completed run; ``seed`` for both in a run older than them."""
    seed = run.field("seed")
    return run.result.get("seed_init", seed), run.result.get("seed_data", seed)


@dataclass(frozen=True)
class SeedAxis:
    """The seed that varies over a set of runs (one of :data:`SEED_AXES`, or both split ones)."""

    name: str

    @classmethod
    def of(cls, runs: Sequence[Run]) -> SeedAxis:
        seeds = [run_seeds(run) for run in runs]
        if all(init == data for init, data in seeds):
            return cls("seed")
        inits, datas = ({pair[i] for pair in seeds} for i in (0, 1))
        if len(datas) == 1:
            return cls("seed_init")
        if len(inits) == 1:
            return cls("seed_data")
        return cls("seed_init/seed_data")

    def key(self, run: Run) -> Hashable:
        """The run's pairing key: its value of the varying seed."""
        init, data = run_seeds(run)
        if self.name in ("seed", "seed_init"):
            return init
        return data if self.name == "seed_data" else f"{init}/{data}"
