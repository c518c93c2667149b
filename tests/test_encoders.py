"""Model loading faults point at the real cause: a missing folder, missing files, or the Hub."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from isotune.encoders import load_encoder, load_tokenizer
from isotune.errors import IsotuneError

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
    assert f"`hf download {name} --local-dir DIR`" in message


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
