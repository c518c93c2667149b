"""Which seed pairs the runs of a sweep: the one that varies.

A run has ``seed`` and the two it sets by default, ``seed_init`` (new layers, dropout) and
``seed_data`` (batch order, I-STAR's subset, the isotropy probe); Dodge et al. (2020) find both
contribute comparably, so a sweep may vary one alone. Runs of two configurations are paired when
they share the seeds that vary. :class:`SeedAxis` names it and gives each run its pairing key
(the tables' ``seed`` column): the seed where both are equal, the varying one where one is fixed,
``"<init>/<data>"`` where both vary apart. Runs from before the split had both set by ``seed``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from isotune.sweeps.runs import Run


def run_seeds(run: Run) -> tuple[int, int]:
    """(seed_init, seed_data) of a completed run; ``seed`` for both in a run older than them."""
    seed = run.field("seed")
    return run.result.get("seed_init", seed), run.result.get("seed_data", seed)


@dataclass(frozen=True)
class SeedAxis:
    """The seed that varies over a set of runs: ``seed``, ``seed_init``, ``seed_data`` or both."""

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
