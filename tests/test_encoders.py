"""Model loading faults point at the real cause: a missing folder, missing files, or the Hub;
a Hub that cannot be reached costs seconds, not a minute of retries."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants

from isotune.errors import IsotuneError
from isotune.model.encoders import load_encoder, load_tokenizer
from tests.helpers.network import closed_port_url

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
FOLDER_HELP = (
    "A model folder holds config.json, the weights (model.safetensors or pytorch_model.bin) and "
    "the tokenizer files (tokenizer.json, or vocab.txt, or vocab.json and merges.txt)"
)


def copy_of(tiny_bert: Path, folder: Path, *, skip: tuple[str, ...] = ()) -> Path:
    """``tiny_bert``'s files in ``folder``, without those named in ``skip``."""
    folder.mkdir()
    for file in tiny_bert.iterdir():
        if file.name not in skip:
            shutil.copy(file, folder / file.name)
    return folder


@pytest.mark.parametrize("load", [load_tokenizer, load_encoder])
def test_empty_folder_holds_no_model_files(tmp_path, load):
    with pytest.raises(IsotuneError) as raised:
        load(str(tmp_path))
    message = str(raised.value)
    assert message.startswith(f"The model folder {tmp_path} holds no model files")
    assert FOLDER_HELP in message and "sentencepiece" not in message


@pytest.mark.parametrize(
    "name", ["/no/such/model", "./no-such-model", "../no-such-model", "~/no-such-model", "a/b/c"]
)
def test_a_path_that_does_not_exist_is_named_as_such(name):
    with pytest.raises(IsotuneError) as raised:
        load_tokenizer(name)
    message = str(raised.value)
    assert message.startswith(f"model.name_or_path={name}: the folder ")
    assert " does not exist. " in message and FOLDER_HELP in message
    assert f"hf download {name}" not in message


@pytest.mark.parametrize("name", ["no-such-model", "no-such-org/no-such-model"])
def test_hub_names_keep_the_offline_message(name):
    with pytest.raises(IsotuneError) as raised:
        load_tokenizer(name)
    message = str(raised.value)
    assert message.startswith(f"Model {name!r} is not available: it is not a local folder")
    assert "it cannot be downloaded now: HF_HUB_OFFLINE is set." in message
    assert f"`hf download {name} --local-dir DIR`" in message


@pytest.fixture
def unreachable_hub(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE unset, HF_ENDPOINT a closed local port, an empty cache. huggingface_hub
    reads these at import, so its constants are set too, as they would be had the environment
    said so before Python started (conftest.py sets HF_HUB_OFFLINE=1 for the other tests)."""
    url = closed_port_url()
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "ENDPOINT", url)
    monkeypatch.setattr(
        hub_constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        url + "/{repo_id}/resolve/{revision}/{filename}",
    )
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    return url


def assert_no_retries(caplog, capfd, url: str) -> None:
    printed = capfd.readouterr()
    for said in (caplog.text, printed.out, printed.err):
        assert "retry" not in said.lower() and url not in said


@pytest.mark.parametrize("load", [load_tokenizer, load_encoder])
@pytest.mark.parametrize("name", ["bert-base-cased", "no-such-org/no-such-model"])
def test_an_unreachable_hub_fails_at_once_without_retries(
    unreachable_hub, load, name, caplog, capfd
):
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(IsotuneError) as raised:
        load(name)
    assert time.monotonic() - start < 30  # a sanity bound: retrying took 50 s, this takes ~0
    assert str(raised.value).startswith(
        f"Model {name!r} is not available: it is not a local folder, not in the Hugging Face "
        f"cache, and it cannot be downloaded now: the Hugging Face Hub ({unreachable_hub}) "
        "could not be reached. Fix: "
    )
    assert_no_retries(caplog, capfd, unreachable_hub)


def test_a_cached_model_loads_while_the_hub_is_unreachable(
    unreachable_hub, tiny_bert, caplog, capfd
):
    # The layout huggingface_hub's cache uses: a snapshot per revision, refs/main names it.
    repo = Path(hub_constants.HF_HUB_CACHE) / "models--some-org--tiny-bert"
    (repo / "snapshots").mkdir(parents=True)
    copy_of(tiny_bert, repo / "snapshots" / "0123abc")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG):
        tokenizer = load_tokenizer("some-org/tiny-bert")
        encoder = load_encoder("some-org/tiny-bert")
    assert time.monotonic() - start < 30
    assert tokenizer.get_vocab() == load_tokenizer(str(tiny_bert)).get_vocab()
    assert encoder.config.hidden_size == 32
    assert_no_retries(caplog, capfd, unreachable_hub)


def test_a_file_is_not_a_model_folder(tiny_bert):
    with pytest.raises(IsotuneError, match=r"the folder .*config.json is a file, not a folder\."):
        load_encoder(str(tiny_bert / "config.json"))


def test_folder_without_tokenizer_files_is_not_given_an_empty_vocabulary(tmp_path, tiny_bert):
    # From config.json alone, transformers would build a BERT tokenizer with 5 tokens.
    folder = copy_of(tiny_bert, tmp_path / "model", skip=TOKENIZER_FILES)
    with pytest.raises(IsotuneError) as raised:
        load_tokenizer(str(folder))
    assert str(raised.value).startswith(
        f"The model folder {folder} has no tokenizer files, so it has no tokenizer to load."
    )
    assert load_encoder(str(folder)).config.hidden_size == 32  # the model itself is complete


def test_tokenizer_only_folder_has_no_config_or_weights(tmp_path, tiny_bert):
    folder = copy_of(tiny_bert, tmp_path / "tokenizer", skip=("config.json", "model.safetensors"))
    assert load_tokenizer(str(folder)).get_vocab() == load_tokenizer(str(tiny_bert)).get_vocab()
    with pytest.raises(IsotuneError) as raised:
        load_encoder(str(folder))
    assert str(raised.value).startswith(
        f"The model folder {folder} has no config.json and no weights, so it has no model to load."
    )


def test_broken_file_in_a_complete_folder_keeps_the_loader_error(tmp_path, tiny_bert):
    folder = copy_of(tiny_bert, tmp_path / "model")
    (folder / "config.json").write_text("{ not json")
    with pytest.raises(IsotuneError) as raised:
        load_encoder(str(folder))
    message = str(raised.value)
    assert message.startswith(f"The folder {folder} does not hold a loadable Hugging Face model: ")
    assert "config.json" in message and FOLDER_HELP in message


@pytest.mark.parametrize(
    "kept", [0, 5, 100, -1], ids=["empty", "in-length", "in-header", "last-byte"]
)
def test_a_weights_file_cut_short_is_named_with_the_fix(tmp_path, tiny_bert, kept):
    """An interrupted download or copy leaves model.safetensors shorter than its header says:
    transformers ended in `SafetensorError: incomplete metadata`, naming no file."""
    folder = copy_of(tiny_bert, tmp_path / "model")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:kept])
    with pytest.raises(IsotuneError) as raised:
        load_encoder(str(folder))
    assert str(raised.value) == (
        f"The model folder {folder} has a cut short or damaged weights file, model.safetensors: "
        "its size is not what its header says, as an interrupted download or copy leaves it, so "
        "the folder has no model to load. Fix: delete the file and download it again (`hf "
        f"download NAME model.safetensors --local-dir {folder}`) or copy it again, whole; or use "
        "model=minilm (the packaged offline encoder)."
    )
    assert load_tokenizer(str(folder)).get_vocab()  # the tokenizer needs no weights
