"""Each look of a sequential stated test frozen when it is taken: a look recomputed at every read
would move when a run is replaced after it, changing a decision already taken, silently. Only the
study command appends a look, whole or not at all, and never twice
(docs/study.md#a-plan-no-one-can-bend).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from isotune.atomic_files import append_bytes, complete_lines, write_bytes
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256
from isotune.record.provenance import code_identity
from isotune.study.preregistration import Preregistration
from isotune.study.sequential import LookDecision
from isotune.sweeps.score_resolution import at_resolution

LOOKS_FILE = "sequential_looks.jsonl"
RESULTS = "results.json"


@dataclass(frozen=True)
class PairedRun:
    """One side of a stated pair as a look sees it: the run's folder relative to the study
    folder, its score (a failed run's at its trivial score), and its results.json's sha256."""

    run: str
    score: float
    sha256: str


@dataclass(frozen=True)
class FrozenLook:
    """A look as taken: its pairs ``{seed: (baseline, arm)}`` in stated order; ``recorded``:
    "when taken", or at a migration."""

    decision: LookDecision
    pairs: Mapping[int, tuple[PairedRun, PairedRun]]
    plan_digest: str
    commit: str | None
    taken_at: str
    recorded: str = "when taken"

    def differences(self) -> np.ndarray:
        """The look's paired differences, arm minus baseline, as it decided on them."""
        scores = [run.score for pair in self.pairs.values() for run in pair]
        return at_resolution(
            np.array([arm.score - base.score for base, arm in self.pairs.values()]), scores
        )

    def as_record(self) -> dict[str, Any]:
        return {
            **asdict(self.decision),
            "pairs": [
                {"seed": seed, "baseline": asdict(base), "arm": asdict(arm)}
                for seed, (base, arm) in self.pairs.items()
            ],
            "plan_digest": self.plan_digest,
            "commit": self.commit,
            "taken_at": self.taken_at,
            "recorded": self.recorded,
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> FrozenLook:
        decision = {key: data[key] for key in LookDecision.__dataclass_fields__}
        decision["interval"] = tuple(decision["interval"])
        return cls(
            decision=LookDecision(**decision),
            pairs={
                int(pair["seed"]): (PairedRun(**pair["baseline"]), PairedRun(**pair["arm"]))
                for pair in data["pairs"]
            },
            plan_digest=str(data["plan_digest"]),
            commit=data["commit"],
            taken_at=str(data["taken_at"]),
            recorded=str(data["recorded"]),
        )


def read_journal(folder: Path, registration: Preregistration) -> list[FrozenLook]:
    """The looks taken in the study ``folder``, in order, each checked against the plan that
    decides it: a journal of another plan, a look out of order or a malformed line is refused."""
    path = folder / LOOKS_FILE
    if not path.is_file():
        return []
    looks = []
    for number, line in enumerate(complete_lines(path.read_bytes()).splitlines(), start=1):
        try:
            look = FrozenLook.from_record(json.loads(line))
        except (ValueError, KeyError, TypeError) as error:
            raise IsotuneError(
                f"{path}, line {number}, is no frozen look ({type(error).__name__}: {error}). "
                "Fix: restore the journal from where its looks were taken (the study's commit)."
            ) from None
        planned = registration.plan.looks
        expected = planned[len(looks)] if len(looks) < len(planned) else None
        if look.plan_digest != registration.digest or look.decision.look != len(looks) + 1:
            raise IsotuneError(
                f"{path}, line {number}: look {look.decision.look} of plan "
                f"{look.plan_digest}, where this study's plan is {registration.digest} and its "
                f"next look is {len(looks) + 1}. Fix: restore the journal with its plan."
            )
        if look.decision.n != expected or len(look.pairs) != expected:
            raise IsotuneError(
                f"{path}, line {number}: look {look.decision.look} holds {len(look.pairs)} pairs, "
                f"where the plan looks at {expected}. Fix: restore the journal with its plan."
            )
        looks.append(look)
    return looks


def next_looks(
    registration: Preregistration,
    journal: Sequence[FrozenLook],
    runs: Mapping[int, tuple[PairedRun | None, PairedRun | None]],
    metric_scores: Sequence[float],
    recorded: str = "when taken",
) -> list[FrozenLook]:
    """The looks due after those of ``journal``: each whose pairs are all in and which no earlier
    stop forbids. ``runs``: each stated seed's runs now (None: no score yet; taken looks keep
    their frozen pairs); ``metric_scores`` set the metric's resolution."""
    plan, seeds = registration.plan, registration.seeds
    looks = list(journal)
    while len(looks) < len(plan.looks) and not (looks and looks[-1].decision.stops):
        n = plan.looks[len(looks)]
        frozen = dict(looks[-1].pairs) if looks else {}
        pairs = {seed: frozen.get(seed) or runs.get(seed, (None, None)) for seed in seeds[:n]}
        complete = {seed: (base, arm) for seed, (base, arm) in pairs.items() if base and arm}
        if len(complete) < n:
            break
        d = at_resolution(
            np.array([arm.score - base.score for base, arm in complete.values()]), metric_scores
        )
        looks.append(
            FrozenLook(
                plan.decide(d),
                complete,
                registration.digest,
                code_identity().get("commit"),
                datetime.now(UTC).isoformat(timespec="seconds"),
                recorded,
            )
        )
    return looks[len(journal) :]


def take_due_looks(
    folder: Path,
    registration: Preregistration,
    runs: Mapping[int, tuple[PairedRun | None, PairedRun | None]],
    metric_scores: Sequence[float],
    recorded: str = "when taken",
) -> None:
    """The study command's step: append each look due now to the journal in ``folder``."""
    journal = read_journal(folder, registration)
    for look in next_looks(registration, journal, runs, metric_scores, recorded):
        append_look(folder, look)


def append_look(folder: Path, look: FrozenLook) -> None:
    """Add ``look``'s record at the end of the journal, whole or not at all. A record a kill cut
    short (no newline after it) is no look taken: it is dropped first, as every read drops it."""
    path = folder / LOOKS_FILE
    line = (json.dumps(look.as_record(), sort_keys=False) + "\n").encode()
    journal = path.read_bytes() if path.is_file() else b""
    if journal and journal == complete_lines(journal):
        append_bytes(path, line)
    else:
        write_bytes(path, complete_lines(journal) + line)


def paired_run(folder: Path, run: str, score: float) -> PairedRun:
    """The stated run in ``folder / run`` as a look freezes it."""
    return PairedRun(run, float(score), file_sha256(folder / run / RESULTS))


def changed_runs(folder: Path, journal: Sequence[FrozenLook]) -> list[str]:
    """The runs of frozen looks whose results.json is gone or changed since their look."""
    changed = []
    for look in journal:
        for base, arm in look.pairs.values():
            for run in (base, arm):
                path = folder / run.run / RESULTS
                if run.run not in changed and (
                    not path.is_file() or file_sha256(path) != run.sha256
                ):
                    changed.append(run.run)
    return changed
