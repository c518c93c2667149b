"""Whether the runs of a table came from one environment: the same code, packages, model weights
and data (:func:`isotune.record.provenance.identity`), or a mix that could move its numbers as
much as the configurations it compares.

A ``git pull``, a package upgrade, a data file replaced: each changes numbers without changing a
configuration. The model's identity is compared among runs of one model name, the data's among
runs of one task (a sweep over them differs there by design). A run older than the record is
``unknown`` in every field, never equal to a known value; a run without a commit, or from a tree
with uncommitted changes, has unknown code (no commit rebuilds it), which ``--strict`` refuses by
name unless ``--allow-unknown-code``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from isotune.record.provenance import UNKNOWN, identity
from isotune.sweeps.runs import Run
from isotune.tracking.reporting import counted

NAMED = 10  # run folders named in --strict's refusal, then how many more


@dataclass(frozen=True)
class Environments:
    """Each compared field of a table's runs and how many runs have each of its values."""

    runs: int
    fields: dict[str, Counter]
    unknown_code: tuple[str, ...] = field(default=())  # folders of runs whose commit is unknown
    uncommitted: tuple[str, ...] = field(default=())  # folders of runs of a tree with changes

    @classmethod
    def of(cls, runs: Sequence[Run]) -> Environments:
        own = [_fields(run) for run in runs]
        scopes = [_scope(run) for run in runs]
        names = dict.fromkeys(name for fields in own for name in fields)
        values: dict[str, Counter] = {}
        for name in names:
            scope = _scope_of(name)
            values[name] = Counter(
                fields.get(name, UNKNOWN)
                for fields, run_scope in zip(own, scopes, strict=True)
                if scope is None or scope in run_scope
            )
        unknown = tuple(
            str(run.path.parent)
            for run, fields in zip(runs, own, strict=True)
            if fields.get("code.commit") in (None, UNKNOWN)
        )
        uncommitted = tuple(str(run.path.parent) for run in runs if _uncommitted(run))
        return cls(len(runs), values, unknown, uncommitted)

    @property
    def mixed(self) -> dict[str, Counter]:
        """The fields with more than one value (``unknown`` counting as one)."""
        return {name: values for name, values in self.fields.items() if len(values) > 1}

    @property
    def known(self) -> bool:
        """Every run records its provenance."""
        return bool(self.fields) and all(UNKNOWN not in v for v in self.fields.values())

    def check_strict(self, allow_unknown_code: bool = False) -> str | None:
        """Why ``--strict`` refuses these runs, or None: mixed, of unknown provenance, or of
        unknown or uncommitted code (unless ``allow_unknown_code``)."""
        reasons = []
        if self.runs and not self.known and not self.mixed:
            reasons.append(
                "no run records its provenance (they predate it), so their sameness is unknown"
            )
        if self.mixed:
            reasons.append(f"they differ in {describe(self.mixed)}")
        if self.unknown_code and not allow_unknown_code:
            reasons.append(
                f"the code of {counted(len(self.unknown_code), 'run')} is unknown (no commit: not "
                "run from a git checkout, or recorded before provenance was), so two of them are "
                f"not known to be the same code: {_named(self.unknown_code)} "
                "(--allow-unknown-code accepts them)"
            )
        if self.uncommitted and not allow_unknown_code:
            reasons.append(
                f"{counted(len(self.uncommitted), 'run')} ran code with uncommitted changes "
                "(code.changes in their provenance), which no commit rebuilds: "
                f"{_named(self.uncommitted)} (commit the changes and rerun them, or "
                "--allow-unknown-code accepts them knowingly)"
            )
        return "; ".join(reasons) or None

    def markdown(self) -> str:
        """The report's paragraph: which fields differ, each value with its count of runs; or
        the one environment they share."""
        if not self.runs:
            return "No counted run."
        if not self.fields:
            return (
                f"None of the {self.runs} counted runs records its provenance (they predate it): "
                "whether they came from one code, package set, model and data is unknown."
            )
        if self.mixed:
            return (
                f"**Mixed runs.** The {self.runs} counted runs do not all come from one "
                f"environment: they differ in {describe(self.mixed)}. A difference in these "
                "tables may come from that, not from the configurations; `python -m isotune.env "
                "<folder>` compares a folder's runs with this machine, and `--strict` refuses "
                "such tables."
            )
        shared = ", ".join(
            f"{name} {_shown(next(iter(values)))}"
            for name, values in self.fields.items()
            if name.startswith(("code.", "packages."))
        )
        uncommitted = (
            f" {len(self.uncommitted)} of them ran code with uncommitted changes, "
            "which no commit rebuilds (`--strict` refuses them)."
            if self.uncommitted
            else ""
        )
        return f"All {self.runs} counted runs come from one environment: {shared}.{uncommitted}"


def describe(mixed: dict[str, Counter]) -> str:
    """``code.commit (2 runs 1a2b3c4d5e6f, 1 run unknown); packages.torch (...)``."""
    return "; ".join(
        f"{name} ("
        + ", ".join(f"{counted(n, 'run')} {_shown(value)}" for value, n in values.most_common())
        + ")"
        for name, values in mixed.items()
    )


def _named(folders: Sequence[str]) -> str:
    """The first :data:`NAMED` run folders, then how many more."""
    more = len(folders) - NAMED
    return ", ".join(folders[:NAMED]) + (f" and {more} more" if more > 0 else "")


def _uncommitted(run: Run) -> bool:
    """The run's code had uncommitted changes: a hash of them, or a tree recorded dirty whose
    changes were not hashed or that changed after the run imported isotune."""
    code = (run.result.get("provenance") or {}).get("code") or {}
    return bool(code.get("changes") or code.get("dirty"))


def _shown(value: object) -> str:
    """A value as the report shows it: a 40-digit hash shortened, None as ``none``."""
    if value is None:
        return "none"
    text = str(value)
    return text[:12] if len(text) >= 40 and all(c in "0123456789abcdef" for c in text) else text


def _fields(run: Run) -> dict[str, object]:
    """The run's identity fields, the model's and the data's named by model and task."""
    fields = identity(run.result.get("provenance"))
    named: dict[str, object] = {}
    for name, value in fields.items():
        if name == "model":
            name = f"model {run.result.get('model_name_or_path')}"
        elif name.startswith("data."):
            name = f"{name} of {run.result.get('task')}"
        named[name] = value
    return named


def _scope(run: Run) -> set[str]:
    """The model and task a run belongs to: it counts in their fields only."""
    return {f"model {run.result.get('model_name_or_path')}", f"of {run.result.get('task')}"}


def _scope_of(name: str) -> str | None:
    """The scope of a field (:func:`_scope`), None for code and packages: every run."""
    if name.startswith("model "):
        return name
    if name.startswith("data."):
        return name[name.index(" of ") + 1 :]
    return None
