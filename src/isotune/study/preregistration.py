"""A sequential stated test's pre-registration: the plan locked from its statement to its last
look, since a plan that can be edited after its runs is one the data could have chosen. The
margin is in the statistic's units (0.01 is one point of accuracy); every reader checks the
digest and each field against what was typed; a format-1 plan is refused with the command that
migrates it (:mod:`isotune.study.migration`). Docs: docs/study.md#a-plan-no-one-can-bend.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from isotune.atomic_files import write_text
from isotune.errors import IsotuneError
from isotune.study.sequential import PLAN_KEYS, SequentialPlan
from isotune.study.stated import SELECT_EPOCHS, StatedTest

PLAN_FILE = "sequential_plan.yaml"
FORMAT = 2
# Stored after the plan's own keys, in this order; the digest covers every one but itself
LOCKED_KEYS = ("format", "task", "arm", "baseline", "seeds", "statistic", "stated_at")
STATISTIC_KEYS = ("metric", "split", "select_epoch")
RESTORE = (
    "Fix: restore the file from the commit that stated the plan (git log -- <the file>; "
    "git checkout <that commit> -- <the file>), or state a new plan in a study of its own "
    "(hydra.sweeper.study_name=<a new name>)."
)


@dataclass(frozen=True)
class Statistic:
    """What each stated run scores: its task's ``metric`` on ``split``, at the epoch
    ``select_epoch`` takes (``best``: the one the same split's metric chose; ``last``: the last,
    no early stopping, so no choice is made on the scored examples)."""

    metric: str
    split: str
    select_epoch: str

    def describe(self) -> str:
        if self.select_epoch == "best":
            return f"{self.split} {self.metric} at the epoch {self.split} {self.metric} chose"
        return f"{self.split} {self.metric} at the last epoch (no early stopping)"


@dataclass(frozen=True)
class Preregistration:
    """A sequential stated test as locked in its study folder: the comparison (``task``,
    ``arm`` minus ``baseline`` on ``seeds`` in order), the ``statistic``, when it was stated,
    and the :class:`~isotune.study.sequential.SequentialPlan` that decides it."""

    task: str
    arm: str
    baseline: str
    seeds: tuple[int, ...]
    statistic: Statistic
    stated_at: str
    plan: SequentialPlan

    def fields(self) -> dict[str, Any]:
        """Every locked field as plain values, in the order the file stores them."""
        return {
            **{key: value for key, value in self.plan.to_dict().items() if key != "rules"},
            "format": FORMAT,
            "task": self.task,
            "arm": self.arm,
            "baseline": self.baseline,
            "seeds": list(self.seeds),
            "statistic": {
                "metric": self.statistic.metric,
                "split": self.statistic.split,
                "select_epoch": self.statistic.select_epoch,
            },
            "rules": list(self.plan.rules),
            "stated_at": self.stated_at,
        }

    @property
    def digest(self) -> str:
        """The sha256 of the locked fields, as canonical JSON."""
        canonical = json.dumps(self.fields(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    def text(self) -> str:
        """The plan as stored: the plan's own keys first, as :class:`SequentialPlan` has always
        stored them, then the others and the digest."""
        fields = self.fields()
        own = {key: fields.pop(key) for key in PLAN_KEYS if key != "rules"}
        text = yaml.safe_dump(own, sort_keys=False)
        return text + yaml.safe_dump({**fields, "digest": self.digest}, sort_keys=False)

    def write(self, path: Path) -> Path:
        """Store the plan at ``path``, which must not exist: nothing writes over a stored plan."""
        if path.exists():
            raise IsotuneError(
                f"{path} exists: a stored plan is never written over, so that the plan the runs "
                f"are judged by is the one stated before them. {RESTORE}"
            )
        return write_text(path, self.text())

    def differences(self, typed: dict[str, Any]) -> list[str]:
        """The fields where ``typed`` (:func:`typed_fields`) differs from this plan, each as
        ``field: stored X, typed Y``; a field typed as None (not known where it was typed) is
        not compared."""
        stored = _flat(self.fields())
        return [
            f"{key}: stored {stored[key]!r}, typed {value!r}"
            for key, value in _flat(typed).items()
            if value is not None and stored.get(key) != value
        ]


def typed_fields(test: StatedTest, metric: str | None, split: str = "dev") -> dict[str, Any]:
    """What a command typed of a sequential stated ``test``, named as in
    :meth:`Preregistration.fields`; ``metric`` None where the caller does not know it."""
    return {
        "task": test.task,
        "arm": test.arm,
        "baseline": test.baseline,
        "seeds": list(test.seeds),
        "looks": list(test.looks),
        "alpha": test.alpha,
        "spending": test.spending,
        "margin": test.margin,
        "statistic": {"metric": metric, "split": split, "select_epoch": test.select_epoch},
        "stated_at": test.stated_at.isoformat(),
    }


def new_registration(test: StatedTest, plan: SequentialPlan, metric: str) -> Preregistration:
    """The pre-registration of a new sequential ``test`` decided by ``plan`` on ``metric``."""
    statistic = Statistic(metric, "dev", test.select_epoch)
    return Preregistration(
        test.task, test.arm, test.baseline, test.seeds, statistic, test.stated_at.isoformat(), plan
    )


def read_registration(path: Path) -> Preregistration:
    """The plan stored at ``path``, its digest checked: a malformed file, an older format or a
    field changed since the plan was stored is refused, naming it."""
    data = load_plan_file(path)
    if "format" not in data:
        raise IsotuneError(
            f"{path} is a sequential plan of format 1 (looks, alpha, spending, margin and "
            "boundaries, without the task, arm, seeds, statistic, rules and digest that lock "
            f"it). Fix: migrate it once: python -m isotune.study.migration {path.parent} "
            "(keeps its six stored keys as they "
            "are, adds the others from the study's record of its command, records the looks "
            "already taken), and commit the result."
        )
    if data["format"] != FORMAT or set(data) != {*PLAN_KEYS, *LOCKED_KEYS, "digest"}:
        raise IsotuneError(
            f"{path} holds {sorted(data)} at format {data['format']!r}, where a plan of format "
            f"{FORMAT} holds {', '.join(sorted({*PLAN_KEYS, *LOCKED_KEYS, 'digest'}))}: not a "
            f"plan this code wrote. {RESTORE}"
        )
    statistic = data["statistic"]
    if not isinstance(statistic, dict) or set(statistic) != set(STATISTIC_KEYS):
        raise IsotuneError(
            f"{path}: statistic {statistic!r} is not {{{', '.join(STATISTIC_KEYS)}}}. {RESTORE}"
        )
    if statistic["select_epoch"] not in SELECT_EPOCHS or not isinstance(data["seeds"], list):
        raise IsotuneError(f"{path}: its statistic or seeds are malformed. {RESTORE}")
    registration = Preregistration(
        task=str(data["task"]),
        arm=str(data["arm"]),
        baseline=str(data["baseline"]),
        seeds=tuple(data["seeds"]),
        statistic=Statistic(**{key: str(statistic[key]) for key in STATISTIC_KEYS}),
        stated_at=str(data["stated_at"]),
        plan=SequentialPlan.from_dict({key: data[key] for key in PLAN_KEYS}, where=str(path)),
    )
    if registration.digest != data["digest"]:
        raise IsotuneError(
            f"{path} was changed after the plan was stored: its fields' sha256 is "
            f"{registration.digest}, its stored digest {data['digest']}. A plan edited after "
            f"its statement is one the data could have chosen. {RESTORE}"
        )
    return registration


def check_typed(registration: Preregistration, typed: dict[str, Any], path: Path) -> None:
    """Refuse a command whose stated test (:func:`typed_fields`) differs from the stored plan."""
    changed = registration.differences(typed)
    if changed:
        raise IsotuneError(
            f"The sequential plan stored in {path} (stated at {registration.stated_at}) and the "
            f"one typed differ: {'; '.join(changed)}. The stored plan decides, and it cannot be "
            "changed once stated. Fix: type the stated test as stored (hydra.sweeper.stated; "
            "docs/study.md), or state a new plan in a study of its own "
            "(hydra.sweeper.study_name=<a new name>)."
        )


def load_plan_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise IsotuneError(
            f"{path} is not YAML ({error}), so its sequential plan cannot be read. {RESTORE}"
        ) from None
    if not isinstance(data, dict):
        raise IsotuneError(f"{path} holds {type(data).__name__}, not a plan. {RESTORE}")
    return data


def _flat(fields: dict[str, Any]) -> dict[str, Any]:
    """``statistic``'s keys as ``statistic.metric`` and so on, beside the others."""
    flat = {key: value for key, value in fields.items() if key != "statistic"}
    for key, value in (fields.get("statistic") or {}).items():
        flat[f"statistic.{key}"] = value
    return flat
