"""Where a run came from, as plain data: the code (git commit, uncommitted changes), the packages
that decide its numbers, the device, the model's weights and the data files it read; and which of
them differ between two such records.

A table that mixes runs of different code, packages, weights or data is the commonest silent
error of a study made over weeks; with this record in every run, :mod:`isotune.sweeps.mixed` can
tell a clean comparison from a mixed one. Every value is checkable by hand (``git rev-parse
HEAD``, ``pip show``, ``sha256sum``). Nothing is cached: a file is hashed, streamed, each time it
is recorded, except an untracked file over :data:`UNTRACKED_HASH_CAP` (by size and mtime, as the
record says) and an untracked link (by its target, never followed). Imports neither torch nor
the training stack at the top: the offline tools read records without them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from isotune.file_digest import file_sha256

# The packages whose versions decide a run's numbers (pip's names).
OWN_PACKAGE = "isotune"  # this project's own version; its code is the commit
PACKAGES = (
    OWN_PACKAGE,
    "torch",
    "lightning",
    "transformers",
    "tokenizers",
    "peft",
    "hydra-core",
    "omegaconf",
    "numpy",
    "torchmetrics",
    "optuna",  # the search's sampler and pruner
    "scipy",  # the paired statistics
    "scikit-learn",
    "datasets",  # GLUE from the Hub
)
GIT_TIMEOUT_S = 10  # a git that hangs (a network filesystem) must not hold a run's start
UNKNOWN = "unknown"  # the value of every field of a record without provenance
SHORT = 12  # hex digits of the hash of uncommitted changes
UNTRACKED_HASH_CAP = 64 << 20  # an untracked file larger enters by size and mtime, not hashed


def package_root() -> Path:
    """The folder of the isotune package that runs: its git checkout is the code of the run."""
    return Path(__file__).resolve().parents[1]


def code_identity(folder: Path | None = None) -> dict[str, Any]:
    """The commit of the git checkout that holds ``folder`` (default: the running isotune
    package), whether its tree has uncommitted changes (untracked files included, ignored ones
    not) and a short hash of them; every value None and a ``note`` saying why outside a checkout
    (an installed wheel, no git on the machine)."""
    folder = folder or package_root()
    try:
        root = Path(_git(folder, "rev-parse", "--show-toplevel"))
        _git(root, "ls-files", "--error-unmatch", str(folder))  # the package is tracked there
        commit = _git(root, "rev-parse", "HEAD")
        status = _git(root, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all")
    except (OSError, subprocess.SubprocessError) as error:
        why = getattr(error, "stderr", None) or str(error)
        return {
            "commit": None,
            "dirty": None,
            "changes": None,
            "note": f"not run from a git checkout ({str(why).strip().splitlines()[0]})",
        }
    identity = {"commit": commit, "dirty": bool(status), "changes": None, "root": str(root)}
    if status:
        try:
            identity["changes"], notes = _changes_hash(root)
        except (OSError, subprocess.SubprocessError) as error:  # the commit stays known
            identity["changes"], notes = None, [f"changes not hashed: {error}"]
        if notes:
            identity["changes_note"] = "; ".join(notes)
    return identity


def code_as_imported(imported: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """The code a process runs is what it imported when it started (``imported``, taken then),
    whatever the checkout holds ``now``: a ``git pull`` or an edit mid-sweep (the basic launcher,
    reused ``gpus`` workers) changes the tree, not the modules in memory, though a module
    imported later comes from the new tree. So the record is the imported identity, and a tree
    changed since is ``dirty: true`` with ``dirty_why`` naming both."""
    same = all(imported.get(key) == now.get(key) for key in ("commit", "changes"))
    if same or imported.get("commit") is None:
        return dict(now) if same else dict(imported)
    return {
        **imported,
        "dirty": True,
        "dirty_why": (
            f"the checkout changed after this process imported isotune: commit "
            f"{imported.get('commit')} -> {now.get('commit')}, changes {imported.get('changes')} "
            f"-> {now.get('changes')} (a git pull or an edit mid-sweep); the run executes the "
            "code imported, and any module it imports later from the changed tree"
        ),
    }


def _git(folder: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", "-C", str(folder), *arguments],
        capture_output=True,
        text=True,
        check=True,
        timeout=GIT_TIMEOUT_S,
    ).stdout.strip()


def _changes_hash(root: Path) -> tuple[str, list[str]]:
    """A short hash of the tree's uncommitted changes: the diff against HEAD and every untracked
    file's name and contents, so two trees with the same edits get the same hash; and what
    entered otherwise than by its contents (links, files over the cap, unreadable ones)."""
    digest = hashlib.sha256(
        subprocess.run(
            ["git", "-C", str(root), "diff", "HEAD", "--binary"],
            capture_output=True,
            check=True,
            timeout=GIT_TIMEOUT_S,
        ).stdout
    )
    untracked = _git(root, "ls-files", "--others", "--exclude-standard")
    notes: dict[str, list[str]] = {}
    for name in sorted(filter(None, untracked.splitlines())):
        content, how = _untracked_content(root / name)
        digest.update(name.encode() + b"\0" + content.encode())
        if how:
            notes.setdefault(how, []).append(name)
    return digest.hexdigest()[:SHORT], [
        f"{how}: {', '.join(names)}" for how, names in notes.items()
    ]


def _untracked_content(path: Path) -> tuple[str, str | None]:
    """What an untracked file adds to the changes' hash, and how it entered when not by its
    sha256: a link by its target (a link to a data folder, or a dangling one, is not code to
    hash), a file over :data:`UNTRACKED_HASH_CAP` by its size and mtime."""
    try:
        if path.is_symlink():
            return f"link -> {os.readlink(path)}", "links, by their target"
        size = path.stat().st_size
        if size > UNTRACKED_HASH_CAP:
            mib = UNTRACKED_HASH_CAP >> 20
            return (
                f"size {size} mtime {path.stat().st_mtime_ns}",
                f"over {mib} MiB, by size and mtime",
            )
        return file_sha256(path), None
    except OSError as error:
        return f"unreadable: {error.strerror}", "unreadable"


def package_versions() -> dict[str, str | None]:
    """Python's version and each of :data:`PACKAGES`' (None where it is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_identity(gpus: int = 0, precision: str | None = None) -> dict[str, Any]:
    """The CPU's model and torch's thread count, or with ``gpus`` the GPU's name, how many, and
    the CUDA and cuDNN versions; and the ``precision`` the trainer used."""
    import torch

    if gpus:
        device = {
            "gpu": torch.cuda.get_device_name(0),
            "gpus": gpus,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        }
    else:
        device = {"cpu": _cpu_model(), "threads": torch.get_num_threads()}
    return {**device, "precision": precision}


def _cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def files_identity(folder: Path, patterns: Iterable[str]) -> dict[str, Any]:
    """The sha256 of each file of ``folder`` matching ``patterns``, and one over them all (their
    names and hashes), which identifies the folder's contents wherever it lies."""
    files = sorted({path for pattern in patterns for path in Path(folder).glob(pattern)})
    hashes = {path.name: file_sha256(path) for path in files if path.is_file()}
    whole = hashlib.sha256("".join(f"{name}\0{h}\n" for name, h in hashes.items()).encode())
    return {"folder": str(folder), "sha256": whole.hexdigest(), "files": hashes}


def identity(provenance: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fields that make two runs comparable, flat (``code.commit``, ``packages.torch``,
    ``model``, ``data.train``, ...): the code, the packages, the model's hash or Hub revision and
    each data split's. Not the device, nor where files lie. An empty dict for no provenance."""
    if not provenance:
        return {}
    code, model = provenance.get("code") or {}, provenance.get("model") or {}
    fields = {"code.commit": code.get("commit"), "code.changes": code.get("changes")}
    fields |= {f"packages.{name}": v for name, v in (provenance.get("packages") or {}).items()}
    if model:
        fields["model"] = model.get("sha256") or model.get("revision")
    for split, data in (provenance.get("data") or {}).items():
        fields[f"data.{split}"] = data.get("sha256") or data.get("revision")
    return fields


def differences(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> dict[str, list[Any]]:
    """``{field: [before, after]}`` for each field of :func:`identity` that differs; a side with
    no provenance has every field :data:`UNKNOWN`, never equal to a known one."""
    old, new = identity(before), identity(after)
    return {
        field: [old.get(field, UNKNOWN), new.get(field, UNKNOWN)]
        for field in dict.fromkeys([*old, *new])
        if old.get(field, UNKNOWN) != new.get(field, UNKNOWN)
    }


def describe_differences(changed: Mapping[str, Iterable[Any]]) -> str:
    """``code.commit (1a2b... -> 3c4d...), packages.torch (2.12.0 -> 2.13.0)``."""
    return ", ".join(
        f"{field} ({' -> '.join(map(str, values))})" for field, values in changed.items()
    )
