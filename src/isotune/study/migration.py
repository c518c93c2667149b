"""Lock a sequential plan stored before plans were locked (format 1), once:
``python -m isotune.study.migration <study folder>`` (docs/study.md#a-plan-no-one-can-bend): its
six keys kept byte for byte, every other field taken from the study's own record (none computed),
the looks its runs reached recorded as at the migration.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from isotune.atomic_files import write_text
from isotune.errors import IsotuneError
from isotune.study.preregistration import (
    PLAN_FILE,
    Preregistration,
    Statistic,
    load_plan_file,
    typed_fields,
)
from isotune.study.results import read_study
from isotune.study.sequential import INTERVAL, SequentialPlan
from isotune.study.stated_looks import take_looks


def migrate(folder: Path) -> Preregistration:
    """Lock the format-1 plan of the study in ``folder``; the locked plan."""
    path = folder / PLAN_FILE
    data = load_plan_file(path)
    if "format" in data:
        raise IsotuneError(f"{path} is of format {data['format']} already: nothing to migrate.")
    old = SequentialPlan.from_dict({**data, "rules": [INTERVAL]}, where=str(path))
    study = read_study(folder)
    test = study.stated if study is not None else None
    if test is None or not test.sequential:
        raise IsotuneError(
            f"{folder} holds no study record (multirun.yaml) stating a sequential test, from "
            "which the plan's other fields are taken. Fix: migrate the folder the study ran in."
        )
    metrics = {
        run.metric
        for o in study.outcomes
        if o.task == test.task
        for run in o.held_out
        if run.seed in test.seeds and run.metric
    }
    if len(metrics) != 1:
        raise IsotuneError(
            f"{folder}: the stated runs record the metrics {sorted(metrics)}, where a plan "
            "scores one. Fix: migrate once the first look's runs exist."
        )
    typed = typed_fields(test, metrics.pop())
    differ = [
        f"{key}: stored {value!r}, recorded {typed[key]!r}"
        for key, value in old.to_dict().items()
        if key in typed and typed[key] != value
    ]
    if differ:
        raise IsotuneError(
            f"{path} and the study's record of its command (multirun.yaml) differ: "
            f"{'; '.join(differ)}. Fix: migrate the folder whose record ran its stated runs."
        )
    statistic = Statistic(**typed["statistic"])
    registration = Preregistration(
        test.task, test.arm, test.baseline, test.seeds, statistic, typed["stated_at"], old
    )
    if not registration.text().startswith(path.read_text(encoding="utf-8")):
        raise AssertionError(f"{path}: the six stored keys would change in the migration")
    write_text(path, registration.text())  # the one write over a plan: format 1 to 2
    when = datetime.now(UTC).isoformat(timespec="seconds")
    take_looks(
        folder,
        registration,
        test,
        study.outcomes,
        recorded=f"at the plan's migration ({when}): taken before looks were frozen, then "
        "recomputed from the runs as they stood",
    )
    return registration


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m isotune.study.migration <study folder>")
    locked = migrate(Path(sys.argv[1]))
    print(f"{Path(sys.argv[1]) / PLAN_FILE}: locked at format 2, {locked.digest}")
