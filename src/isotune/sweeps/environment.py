"""``python -m isotune.env [FOLDER ...]``: this machine's provenance, as a run records it; given
folders, how their runs' code and packages differ from it, and the commands that would install
the versions they recorded: the reader's side of :mod:`isotune.record.provenance`. The model and
data are the run's, not the machine's: :mod:`isotune.sweeps.mixed` compares them among runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from isotune.errors import IsotuneError
from isotune.record.provenance import (
    OWN_PACKAGE,
    PACKAGES,
    UNKNOWN,
    code_identity,
    device_identity,
    identity,
    package_versions,
)
from isotune.record.results import RESULTS_FILE
from isotune.sweeps.runs import load_runs
from isotune.tracking.reporting import counted

log = logging.getLogger(__name__)


def machine_provenance() -> dict[str, Any]:
    """This machine's code, packages and device (every GPU torch sees, else the CPU)."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "code": code_identity(),
        "packages": package_versions(),
        "device": device_identity(gpus),
    }


def compare(machine: dict[str, Any], recorded: Sequence[dict[str, Any] | None]) -> str:
    """How the recorded provenances' code and packages differ from ``machine``'s, each value
    with its count of runs, and the pip commands for each recorded set of versions."""
    theirs = [identity(p) for p in recorded]
    lines = [f"{counted(len(recorded), 'run')}, {sum(not t for t in theirs)} without provenance."]
    differ = differences_from(machine, recorded)
    lines += ["Differences from this machine:", *differ] if differ else ["Same code and packages."]
    installs = Counter(_pip_command(p["packages"]) for p in recorded if p and p.get("packages"))
    if installs:
        lines += ["", "Install the recorded versions (in a fresh venv, after README's set-up):"]
        lines += [f"  {command}  # {counted(n, 'run')}" for command, n in installs.most_common()]
    commits = Counter(
        (t["code.commit"], t.get("code.changes")) for t in theirs if t.get("code.commit")
    )
    for (commit, changes), n in commits.most_common():
        made_on = f"  git checkout {commit}  # {counted(n, 'run')}"
        if changes:  # a dirty tree: the commit alone does not rebuild it
            made_on += (
                f", made with uncommitted changes (hash {changes}) that are not in this commit: "
                "the checkout gives the code without them"
            )
        lines.append(made_on)
    return "\n".join(lines)


def differences_from(
    machine: dict[str, Any], recorded: Sequence[dict[str, Any] | None]
) -> list[str]:
    """A line per code or package field where a recorded provenance differs from ``machine``'s,
    with each value's count of runs (none recorded: ``unknown``)."""
    ours = identity(machine)
    theirs = [identity(p) for p in recorded]
    differ = []
    for name in (name for name in ours if name.startswith(("code.", "packages."))):
        values = Counter(str(t.get(name, UNKNOWN)) for t in theirs)
        if set(values) != {str(ours[name])}:
            counts = ", ".join(
                f"{value} ({counted(n, 'run')})" for value, n in values.most_common()
            )
            differ.append(f"  {name}: this machine {ours[name]}; the runs {counts}")
    return differ


def check_continued_in_one_environment(folder: Path, allowed_by: str, allowed: bool) -> None:
    """Refuse to add runs to ``folder`` (a study or search typed again) from other code or
    packages than its runs so far: a ``git pull`` between two sittings would mix environments in
    one comparison, silently. With ``allowed`` (the setting ``allowed_by`` names), say so."""
    # A run stopped before it recorded its provenance (while its model loaded) has trained in no
    # environment yet: it starts again in this one. A completed run without one is of unknown code.
    runs = [run for run in load_runs(folder) if run.completed or run.result.get("provenance")]
    if not runs:  # a study's first sitting
        return
    differ = differences_from(machine_provenance(), [run.result.get("provenance") for run in runs])
    if not differ:
        return
    said = (
        f"The {counted(len(runs), 'run')} already in {folder} were made with other code or "
        "packages than this process would make the rest with:\n" + "\n".join(differ)
    )
    if allowed:
        log.warning(
            f"{said}\n{allowed_by}=true: continuing with both; python -m isotune.aggregate "
            "--strict will refuse this folder's runs."
        )
        return
    raise IsotuneError(
        f"{said}\nNothing has run. Fix: continue from the code and packages that made them "
        f"(python -m isotune.env {folder} prints the git checkout and pip commands); or start "
        f"afresh in another folder; or type {allowed_by}=true to mix them knowingly (python -m "
        "isotune.aggregate --strict then refuses the folder)."
    )


def _pip_command(packages: dict[str, str | None]) -> str:
    pinned = [name for name in PACKAGES if name != OWN_PACKAGE]  # its code: the git checkout line
    pins = [f"{name}=={packages[name]}" for name in pinned if packages.get(name)]
    return "pip install " + " ".join(pins)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m isotune.env",
        description="This machine's provenance (code, packages, device) as a run records it; "
        f"given folders, how the runs ({RESULTS_FILE}) below them differ from this machine and "
        "the pip commands for their recorded versions.",
    )
    parser.add_argument("folders", nargs="*", type=Path, help="run or sweep output folders")
    args = parser.parse_args(argv)
    missing = [str(folder) for folder in args.folders if not folder.is_dir()]
    if missing:
        print(
            f"error: {', '.join(missing)}: not a folder; pass run or sweep folders.",
            file=sys.stderr,
        )
        return 2
    machine = machine_provenance()
    if not args.folders:
        print(json.dumps(machine, indent=2))
        return 0
    runs = [run for folder in args.folders for run in load_runs(folder)]
    if not runs:
        folders = ", ".join(map(str, args.folders))
        print(
            f"error: no {RESULTS_FILE} below {folders}; pass run or sweep folders.", file=sys.stderr
        )
        return 2
    print(compare(machine, [run.result.get("provenance") for run in runs]))
    return 0
