"""Load a Hugging Face encoder and its tokenizer, from the Hub, a folder or an installed package.

``pkg://<package>/<folder>`` names a model folder inside an installed package; a ``.gguf`` file
loads from the folder converted from it once (:mod:`isotune.model.gguf_cache`); anything else goes
to ``from_pretrained`` unchanged. A missing or incomplete folder, or a weights file cut short, is
reported as such instead of with transformers' guesses; a Hub that does not answer is not
retried. An encoder-decoder checkpoint (T5) loads as its encoder alone, as sentence-T5 uses it,
so every caller sees an encoder like any other; one whose encoder cannot load alone is refused
before any weight loads.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from huggingface_hub import constants as hub_constants
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForTextEncoding,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES

from isotune.errors import IsotuneError
from isotune.model.gguf_cache import GGUF_INSTALL, converted_folder
from isotune.tracking.network import reachable

log = logging.getLogger(__name__)

PACKAGE_SCHEME = "pkg://"
GGUF_SUFFIX = ".gguf"
# huggingface_hub reads these once, at import; a test or a notebook may set them later.
HUB_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
TRUE = ("1", "ON", "YES", "TRUE")  # as huggingface_hub reads a boolean variable
T = TypeVar("T")


def resolve_model_path(name_or_path: str) -> str:
    """A path or hub name that ``from_pretrained`` understands; a GGUF file (``.gguf``) becomes
    the model folder converted from it (:mod:`isotune.model.gguf_cache`)."""
    if name_or_path.startswith(PACKAGE_SCHEME):
        resolved = _package_path(name_or_path)
    else:
        resolved = os.path.expanduser(name_or_path)
    if resolved.endswith(GGUF_SUFFIX):
        return str(converted_folder(resolved))
    return resolved


def _package_path(name_or_path: str) -> str:
    """The file or folder that ``pkg://<package>/<path>`` names, found without importing the
    package: a package that ships weights may import what isotune does not install (the packaged
    SmolLM2 imports ``llm``)."""
    package, _, path = name_or_path.removeprefix(PACKAGE_SCHEME).partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        install = (
            GGUF_INSTALL
            if path.endswith(GGUF_SUFFIX)
            else f"pip install {package.replace('_', '-')} (README's set-up command installs it)"
        )
        raise IsotuneError(
            f"Model {name_or_path!r} lives in the Python package {package!r}, which is not "
            f"installed. Fix: {install}."
        )
    return str(Path(spec.submodule_search_locations[0]) / path)


# What each loader needs in a model folder, as glob patterns. The tokenizer is checked before
# loading: from a folder with only config.json, transformers builds one with a 5-token vocabulary.
FOLDER_PARTS = {
    "config.json": ("config.json",),
    "weights": ("*.safetensors", "*.bin"),
    "tokenizer files": ("tokenizer.json", "vocab.txt", "vocab.json", "*.model"),
}
NEEDED_PARTS = {"tokenizer": ("tokenizer files",), "model": ("config.json", "weights")}
MODEL_FOLDER_FIX = (
    "A model folder holds config.json, the weights (model.safetensors or pytorch_model.bin) and "
    "the tokenizer files (tokenizer.json, or vocab.txt, or vocab.json and merges.txt), as "
    "save_pretrained() or `hf download NAME --local-dir DIR` writes them. Fix: point "
    "model.name_or_path at such a folder, give a Hugging Face Hub name (bert-base-cased, "
    "org/name), or use model=minilm (the packaged offline encoder)."
)


def _is_local_path(name: str) -> bool:
    """A name that cannot be a Hub id (``name`` or ``org/name``), so it must be a local path."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name


def _check_folder(folder: Path, what: str) -> None:
    """Name what ``folder`` lacks for loading ``what``, instead of transformers' guesses."""
    present = {
        part
        for part, patterns in FOLDER_PARTS.items()
        if any(next(folder.glob(pattern), None) for pattern in patterns)
    }
    missing = [part for part in NEEDED_PARTS[what] if part not in present]
    if missing:
        lacks = "holds no model files" if not present else f"has no {' and no '.join(missing)}"
        raise IsotuneError(
            f"The model folder {folder} {lacks}, so it has no {what} to load. {MODEL_FOLDER_FIX}"
        )
    damaged = _damaged_weights(folder) if what == "model" else []
    if damaged:
        files = " and ".join(file.name for file in damaged)
        raise IsotuneError(
            f"The model folder {folder} has a cut short or damaged weights file, {files}: its "
            "size is not what its header says, as an interrupted download or copy leaves it, so "
            "the folder has no model to load. Fix: delete the file and download it again "
            f"(`hf download NAME {damaged[0].name} --local-dir {folder}`) or copy it again, "
            "whole; or use model=minilm (the packaged offline encoder)."
        )


def _damaged_weights(folder: Path) -> list[Path]:
    """The safetensors files in ``folder`` that cannot be opened: cut short or overwritten.
    Their header lists every tensor's bytes, so opening one finds a short file at once (without
    reading the weights), where transformers would end in a SafetensorError without its name."""
    damaged = []
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(file, framework="pt"):
                pass
        except (SafetensorError, OSError):
            damaged.append(file)
    return damaged


def _hub_offline() -> str | None:
    """Why the Hub is not asked, or None: HF_HUB_OFFLINE, or a Hub that does not answer within
    seconds (huggingface_hub would retry it for most of a minute, printing every retry)."""
    environment = (os.environ.get(name, "").upper() for name in HUB_OFFLINE_VARIABLES)
    if hub_constants.HF_HUB_OFFLINE or any(value in TRUE for value in environment):
        return "HF_HUB_OFFLINE is set"
    if not reachable(hub_constants.ENDPOINT):  # HF_ENDPOINT, as huggingface_hub read it
        return f"the Hugging Face Hub ({hub_constants.ENDPOINT}) could not be reached"
    return None


def _from_pretrained(load: Callable[..., T], name_or_path: str, what: str) -> T:
    """Call a ``from_pretrained`` loader; turn 'not found / no network' into one clear message. A
    Hub name is looked up in the local cache only when the Hub is off or out of reach, so a
    cached model loads offline and a missing one fails at once instead of after the retries."""
    resolved = resolve_model_path(name_or_path)
    folder = Path(resolved)
    if folder.is_dir():
        _check_folder(folder, what)
    elif folder.exists() or _is_local_path(resolved):
        raise IsotuneError(
            f"model.name_or_path={name_or_path}: the folder {resolved} "
            f"{'is a file, not a folder' if folder.exists() else 'does not exist'}. "
            f"{MODEL_FOLDER_FIX}"
        )
    offline = None if folder.is_dir() else _hub_offline()
    try:
        return load(resolved, local_files_only=True) if offline else load(resolved)
    except (OSError, ValueError) as error:
        if folder.is_dir():
            raise IsotuneError(
                f"The folder {resolved} does not hold a loadable Hugging Face {what}: {error} "
                f"{MODEL_FOLDER_FIX}"
            ) from error
        why = (
            f"it cannot be downloaded now: {offline}"
            if offline
            else f"it could not be downloaded from {hub_constants.ENDPOINT} (a misspelt name, or "
            "a gated or private model without `hf auth login`?)"
        )
        raise IsotuneError(
            f"Model {name_or_path!r} is not available: it is not a local folder, not in the "
            f"Hugging Face cache, and {why}. Fix: run once with network access to cache it, or "
            f"download it elsewhere (for example with `hf download {name_or_path} --local-dir "
            "DIR`) and pass model.name_or_path=DIR, or use the packaged offline encoder with "
            "model=minilm."
        ) from error


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The fast tokenizer that belongs to the model ``name_or_path``. One without a pad token (a
    decoder's: GPT-2, Pythia, Llama) pads with its end-of-sequence token, as Hugging Face's
    examples do; the attention mask, not the token, tells padding from text."""
    tokenizer = _from_pretrained(AutoTokenizer.from_pretrained, name_or_path, "tokenizer")
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.pad_token is None:
        raise IsotuneError(_no_padding_message(name_or_path))
    return tokenizer


def _no_padding_message(name_or_path: str) -> str:
    """The refusal of a tokenizer with neither a pad nor an end-of-text token, before training
    (else the first padded batch ends in a traceback), with a fix that runs as written: any
    token the tokenizer has serves as padding, since the attention mask marks it."""
    local = Path(name_or_path).is_dir()
    folder = name_or_path if local else "DIR"
    give_pad = (
        f'python -c "from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained('
        f"'{folder}'); t.pad_token = t.unk_token or t.bos_token or t.convert_ids_to_tokens(0); "
        f"t.save_pretrained('{folder}')\""
    )
    fix = (
        f"give the tokenizer a pad token in its folder: {give_pad}"
        if local
        else f"download the model into a folder and give its tokenizer a pad token there: hf "
        f"download {name_or_path} --local-dir DIR, then {give_pad}; then pass "
        "model.name_or_path=DIR"
    )
    return (
        f"The tokenizer of model.name_or_path={name_or_path} has no pad token and no "
        "end-of-text token to pad with, so sentences of different lengths cannot share a "
        f"batch. Fix: {fix} (any token it has will do: the attention mask, not the token, tells "
        "padding from text)."
    )


def encoder_class(config: PretrainedConfig, name_or_path: str) -> type:
    """The Auto class that loads the encoder of ``config``: ``AutoModel``, or for an
    encoder-decoder the class of its encoder alone (``AutoModelForTextEncoding``: T5's
    ``T5EncoderModel``); an encoder-decoder without one (BART) is refused, naming why."""
    if not getattr(config, "is_encoder_decoder", False):
        return AutoModel
    if config.model_type in MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES:
        return AutoModelForTextEncoding
    alone = sorted(
        model_type
        for model_type, name in MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES.items()
        if name.endswith("EncoderModel")
    )
    raise IsotuneError(
        f"model.name_or_path={name_or_path} is an encoder-decoder model ({config.model_type!r}) "
        "whose encoder transformers cannot load alone; isotune fine-tunes an encoder, and runs "
        f"the encoder of an encoder-decoder only for the families {alone} (their "
        "*EncoderModel class, as sentence-T5 does). Fix: choose an encoder (model=minilm, "
        "model=bert, ...) or one of those families' checkpoints."
    )


def parameter_count(name_or_path: str) -> int:
    """The encoder's number of parameters, from its config alone: built on the meta device, so
    no weights are read or allocated (what a sweep's expected size is computed from)."""
    config = _from_pretrained(AutoConfig.from_pretrained, name_or_path, "model")
    with torch.device("meta"):
        model = encoder_class(config, name_or_path).from_config(config)
    return sum(parameter.numel() for parameter in model.parameters())


def load_encoder(name_or_path: str) -> PreTrainedModel:
    """The pretrained encoder (``AutoModel``; an encoder-decoder's encoder alone:
    :func:`encoder_class`), warning of weights that were newly initialised (RoBERTa's untrained
    pooler under ``pooling=pooler``) instead of training them silently."""

    def load(path: str, **options):
        config = AutoConfig.from_pretrained(path, **options)
        return encoder_class(config, name_or_path).from_pretrained(
            path,
            config=config,
            # float32 whatever the checkpoint's dtype (decoders are saved in bf16, and
            # transformers loads a checkpoint's own dtype): mixed precision casts per operation
            dtype=torch.float32,
            output_loading_info=True,
            # transformers 5.24 looks for a PEFT adapter on the Hub even with local_files_only
            adapter_kwargs=options.copy(),
            **options,
        )

    model, info = _from_pretrained(load, name_or_path, "model")
    if info["missing_keys"]:
        log.warning(
            "Newly initialised (not in the checkpoint of %s): %s",
            name_or_path,
            ", ".join(sorted(info["missing_keys"])),
        )
    return model


def wordpiece_tokenizer(words: list[str]) -> PreTrainedTokenizerBase:
    """A lower-casing BERT WordPiece tokenizer whose vocabulary is BERT's specials + ``words``:
    a real fast tokenizer without a download, for tests and for the GPU check on a bare machine."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {token: i for i, token in enumerate([*specials, *words])}
    wordpiece = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return BertTokenizerFast(tokenizer_object=wordpiece)
