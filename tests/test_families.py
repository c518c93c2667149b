"""Every encoder family of ``isotune.model.families`` trains, resumes and is analysed, with its own
dropout, token types, pooling and LoRA targets; a family the table does not know gets one message;
an encoder-decoder (T5) runs its encoder alone, one whose encoder cannot load alone is refused.

Tiny random models of each family (tests/helpers/encoders.py), no download.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from huggingface_hub import constants as hub_constants
from omegaconf import OmegaConf
from transformers import AutoConfig, AutoModel
from transformers.pytorch_utils import Conv1D

from isotune.analysis.run import analyze
from isotune.errors import IsotuneError
from isotune.model.encoders import load_encoder, load_tokenizer, wordpiece_tokenizer
from isotune.model.families import (
    FAMILIES,
    default_dropout,
    family_of,
    head_pooling,
    hidden_size,
    hidden_state_widths,
    lora_target_modules,
    num_layers,
    takes_token_types,
)
from isotune.model.sentence_views import sentence_views
from isotune.norms.registry import NORMS
from isotune.tracking.metric_keys import profile_key
from isotune.training.run import train
from tests.conftest import CONF_DIR, compose_config, compose_train_config, tiny_run_overrides
from tests.helpers.analysis import SMALL
from tests.helpers.cli import run_script
from tests.helpers.encoders import (
    TINY_CONFIGS,
    WORDS,
    classifier,
    save_tiny_bart,
    save_tiny_encoder,
    save_tiny_t5,
    tiny_config,
)
from tests.helpers.resume import KILL_AFTER_ONE, kill_and_resume, load

# What each tiny config says, restated by hand from the Hugging Face classifiers: (layers,
# dropout before the classifier, token types read, what the classifier pools, LoRA's targets).
EXPECTED = {
    "bert": (2, 0.1, True, "pooler", ("query", "value")),
    "roberta": (2, 0.1, True, "cls", ("query", "value")),  # the tiny one has type_vocab_size 2
    "xlm-roberta": (2, 0.1, False, "cls", ("query", "value")),  # type_vocab_size 1
    "distilbert": (2, 0.2, False, "cls", ("q_lin", "v_lin")),  # seq_classif_dropout
    "albert": (2, 0.1, True, "pooler", ("query", "value")),  # classifier_dropout_prob, not 0.0
    "electra": (2, 0.1, True, "cls", ("query", "value")),
    "deberta-v2": (2, 0.1, False, "cls", ("query_proj", "value_proj")),  # type_vocab_size 0
    "modernbert": (3, 0.0, False, "mean", ("Wqkv",)),  # classifier_dropout, classifier_pooling
    "mpnet": (2, 0.1, False, "cls", ("q", "v")),
    # Decoders: no dropout before the score layer, the last real token, peft's targets
    "gpt2": (2, 0.0, False, "last", ("c_attn",)),  # a Conv1D: query, key and value
    "gpt_neox": (2, 0.0, False, "last", ("query_key_value",)),
    **{
        model_type: (2, 0.0, False, "last", ("q_proj", "v_proj"))
        for model_type in ("opt", "llama", "qwen2", "qwen3", "gemma", "gemma3_text")
    },
}
LINEAR = (torch.nn.Linear, Conv1D)  # GPT-2's linear layers are Conv1D
# The presets of families other than BERT and RoBERTa: (Hub id, family, its classifier's pooling)
PRESETS = {
    "distilbert": ("distilbert-base-uncased", "distilbert", "cls"),
    "albert": ("albert-base-v2", "albert", "pooler"),
    "electra": ("google/electra-base-discriminator", "electra", "cls"),
    "deberta_v3": ("microsoft/deberta-v3-base", "deberta-v2", "cls"),
    "modernbert": ("answerdotai/ModernBERT-base", "modernbert", "mean"),  # its classifier_pooling
    "gpt2": ("openai-community/gpt2", "gpt2", "last"),
    "pythia_160m": ("EleutherAI/pythia-160m", "gpt_neox", "last"),
    "qwen": ("Qwen/Qwen2.5-0.5B", "qwen2", "last"),
}


def test_the_table_and_the_tiny_models_cover_the_same_families():
    assert set(FAMILIES) == set(TINY_CONFIGS) == set(EXPECTED)


@pytest.mark.parametrize("model_type", list(EXPECTED))
def test_each_familys_facts_are_read_from_its_own_config(model_type):
    config = tiny_config(model_type)
    layers, dropout, token_types, pooling, targets = EXPECTED[model_type]
    assert (hidden_size(config), num_layers(config)) == (32, layers)
    assert default_dropout(config) == pytest.approx(dropout)
    assert takes_token_types(config) is token_types
    assert head_pooling(family_of(config, "its pooling"), config) == pooling
    assert lora_target_modules(config) == targets


@pytest.mark.parametrize("model_type", list(EXPECTED))
def test_each_familys_facts_hold_for_its_model(model_type):
    """The targets are linear layers of every block, a trained pooler is a pooler layer, token
    types reach an embedding only where the table says so, and hidden_states are the embeddings
    and every layer, all of the hidden size, padded as the input."""
    config = tiny_config(model_type)
    model = AutoModel.from_config(config).eval()
    family = FAMILIES[model_type]
    linear = [name for name, module in model.named_modules() if isinstance(module, LINEAR)]
    for target in lora_target_modules(config):
        assert any(name.endswith(f".{target}") for name in linear), target
    if family.trained_pooler:
        assert getattr(model, "pooler", None) is not None
    ids = torch.tensor([[2, 5, 6, 7, 3, 0], [2, 8, 9, 10, 11, 3]])
    mask = (ids != 0).long()
    output = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert len(output.hidden_states) == num_layers(config) + 1
    assert all(h.shape == (2, 6, hidden_size(config)) for h in output.hidden_states)
    assert torch.equal(output.hidden_states[-1], output.last_hidden_state)
    if takes_token_types(config):
        segments = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.ones_like(ids))
        assert not torch.allclose(segments.last_hidden_state, output.last_hidden_state)
    else:  # no embedding tells segment 1 from segment 0
        embeddings = [m for name, m in model.named_modules() if "token_type" in name]
        assert all(embedding.num_embeddings <= 1 for embedding in embeddings)


# OPT-350m's shape: its layers 1024 wide, its last hidden state 512 after project_out (and its
# embeddings 1024 after project_in), layer norm after each block.
OPT_350M = {"word_embed_proj_dim": 16, "do_layer_norm_before": False}
OPT_350M_REG = {"name": "istar", "weight": -1.0, "layers": [0, 1], "shrinkage_points": 64}


@pytest.fixture(scope="module")
def opt_350m(tmp_path_factory) -> Path:
    return save_tiny_encoder("opt", tmp_path_factory.mktemp("opt-350m"), **OPT_350M)


def test_opt_350m_widths_are_each_hidden_states_own(opt_350m):
    """The sentence vector, its norm and the head are word_embed_proj_dim wide; the other hidden
    states hidden_size wide, and so I-STAR's X and Sigma_S on them (its shrinkage target was the
    sentence's width: a run on layers [0, 1] crashed at its first step)."""
    model = classifier(opt_350m, None, norm="isobn", reg=OPT_350M_REG)
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    mask = torch.ones_like(ids)
    states = model.encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    widths = hidden_state_widths(model.encoder.config)
    assert widths == tuple(h.shape[-1] for h in states.hidden_states) == (32, 32, 16)
    assert model.norm.num_features == model.head.in_features == hidden_size(model.encoder.config)
    regularization = model.regularization
    regularization.refresh_shrinkage(
        [regularization.points(states.hidden_states, None, mask)], epoch=0
    )
    assert regularization.shrinkage.covariance.shape == (32, 32)
    assert regularization(states.hidden_states, None, mask).isfinite()
    with pytest.raises(IsotuneError, match=r"\(32 wide: \[1\]; 16 wide: \[2\]\)") as refused:
        classifier(opt_350m, None, reg={**OPT_350M_REG, "layers": "all"})
    assert "Fix: reg.layers=last, or layers of one width, e.g. 'reg.layers=[1]'" in str(
        refused.value
    )


@pytest.mark.slow
def test_opt_350m_trains_with_isobn_and_is_profiled_at_each_layers_width(
    opt_350m, glue_dir, tmp_path
):
    """norm=isobn, I-STAR on the wide layers, the callback's tokens of the embeddings (wide) and
    the last layer (narrow) and every layer's profile; then the analysis of the checkpoint."""
    overrides = [
        *tiny_run_overrides(opt_350m, glue_dir),
        "model.pooling=last",
        "norm=isobn",
        "reg=istar",
        "reg.layers=[0,1]",
        "reg.shrinkage_examples=16",
        "callbacks.isotropy.token_layers=[0,-1]",
        "callbacks.isotropy.probe_size=16",
        "callbacks.isotropy.layer_profiles=true",
        "debug=limit",
        "trainer.max_epochs=1",
        "logger=none",
    ]
    train(compose_train_config(overrides, tmp_path / "run"))
    result = json.loads((tmp_path / "run" / "results.json").read_text())
    assert result["status"] == "completed"
    final = result["isotropy"]["final"]
    assert {"iso/layer0_tokens/isoscore", "iso/layer-1_tokens/isoscore"} <= final.keys()
    for layer, width in enumerate((32, 32, 16)):  # each layer's massive dimension is its own
        assert profile_key("sentence", layer, "isoscore") in final
        assert 0 <= final[profile_key("tokens", layer, "massive_dim")] < width
    summary = analyze(
        compose_config(
            "analyze",
            [
                f"ckpt_path={tmp_path}/run/checkpoints/last.ckpt",
                f"paths.glue_dir={glue_dir}",
                "data.max_length=128",
                "directions.k=4",
                *SMALL,
            ],
            tmp_path / "analysis",
        )
    )
    assert summary["hidden_size"] == 16 and summary["num_layers"] == 3


def test_the_table_names_lora_targets_only_where_peft_has_none():
    """peft's default table is read, not copied; a family it gains is read from it then."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT

    for model_type, family in FAMILIES.items():
        assert (family.lora_targets is None) == (model_type in PEFT), model_type


def test_bert_takes_its_classifier_dropout_over_the_hidden_dropout():
    assert default_dropout(AutoConfig.for_model("bert", classifier_dropout=0.3)) == 0.3
    assert default_dropout(AutoConfig.for_model("bert")) == 0.1


def test_an_unknown_family_gets_one_message_naming_the_settings_to_give():
    config = SimpleNamespace(model_type="ernie")
    for ask in (default_dropout, lora_target_modules):
        with pytest.raises(IsotuneError) as raised:
            ask(config)
        message = str(raised.value)
        assert message.startswith("isotune does not know the encoder family 'ernie'")
        for setting in ("model.dropout=", "adapt.target_modules=", "directions.matrices=all"):
            assert setting in message


@pytest.fixture(scope="module")
def tiny_ernie(tmp_path_factory) -> Path:
    """A model transformers loads but the family table does not know (ERNIE, BERT-like)."""
    folder = tmp_path_factory.mktemp("tiny-ernie")
    tokenizer = wordpiece_tokenizer([*WORDS, "."])
    tokenizer.save_pretrained(folder)
    config = AutoConfig.for_model("ernie", vocab_size=len(tokenizer), **TINY_CONFIGS["bert"])
    AutoModel.from_config(config).save_pretrained(folder)
    return folder


def test_an_unknown_family_trains_once_its_settings_are_given(tiny_ernie):
    with pytest.raises(IsotuneError, match=r"family 'ernie'.*the dropout before the head"):
        classifier(tiny_ernie)
    lora = {"name": "lora", "r": 2, "alpha": 4, "dropout": 0.0, "target_modules": None}
    with pytest.raises(IsotuneError, match=r"LoRA adapts by default.*'attention.self.query'"):
        classifier(tiny_ernie, dropout=0.1, adapt=lora)
    model = classifier(tiny_ernie, dropout=0.1, adapt={**lora, "target_modules": ["query"]})
    assert "token_type_ids" in model.encoder_inputs  # what its tokenizer gives
    batch = dict(load_tokenizer(str(tiny_ernie))(["a cat"], ["a dog"], return_tensors="pt"))
    assert model(batch).shape == (1, 2)


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory) -> Path:
    return save_tiny_t5(tmp_path_factory.mktemp("tiny-t5"))


def test_an_encoder_decoder_runs_its_encoder_alone_once_its_settings_are_given(tiny_t5):
    """T5, a family the table does not know: the unknown-family message, then with its fix the
    encoder alone (no decoder weight, nothing asked of a decoder) gives the sentence vector, every
    layer's tokens and I-STAR's penalty over them."""
    with pytest.raises(IsotuneError, match=r"family 't5'.*the dropout before the head"):
        classifier(tiny_t5, pooling="mean")
    istar = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "reg" / "istar.yaml"))
    reg = {**istar, "zeta": 0.0, "seed": 0}  # the batch covariance alone: no shrinkage pass
    model = classifier(tiny_t5, pooling="mean", dropout=0.1, reg=reg)
    assert not [name for name, _ in model.encoder.named_parameters() if "decoder" in name]
    tokenizer = load_tokenizer(str(tiny_t5))
    pairs = (["the cat sat .", "a dog ran home ."], ["good", "bad"])
    batch = dict(tokenizer(*pairs, padding=True, return_tensors="pt"))
    assert set(batch) == {"input_ids", "attention_mask"}  # T5's tokenizer: no token types
    views = sentence_views(model, batch, hidden_states=True)
    assert len(views.hidden_states) == num_layers(model.encoder.config) + 1 == 3
    assert views.hidden_states[-1].shape == (*batch["input_ids"].shape, 32)
    loss, parts = model.training_loss({**batch, "labels": torch.tensor([0, 1])})
    assert torch.isfinite(loss) and "reg_isoscore_star" in parts


def test_an_encoder_decoder_whose_encoder_cannot_load_alone_is_refused_naming_why(tmp_path):
    folder = save_tiny_bart(tmp_path / "tiny-bart")
    with pytest.raises(IsotuneError) as refused:
        load_encoder(str(folder))
    message = str(refused.value)
    assert message.startswith(
        f"model.name_or_path={folder} is an encoder-decoder model ('bart') whose encoder "
        "transformers cannot load alone"
    )
    assert "['mt5', 't5', 't5gemma', 'umt5']" in message and "Fix: choose an encoder" in message


@pytest.mark.slow
def test_a_t5_folder_trains_on_its_encoder_after_the_unknown_family_fix_and_is_analysed(
    tiny_t5, glue_dir, tmp_path
):
    """As a user types it: the unknown family's message, then its fix (and I-STAR over every
    layer's tokens, the isotropy of the embeddings' and last layer's tokens from epoch 0); then
    analyze.py with the analysis' own setting for an unknown family."""
    run = tmp_path / "run"
    tiny = [
        f"model.name_or_path={tiny_t5}",
        f"paths.glue_dir={glue_dir}",
        "debug=limit",
        "trainer.enable_progress_bar=false",
        "callbacks.isotropy.figures=false",
        f"hydra.run.dir={run}",
    ]
    unknown = run_script("train.py", *tiny)
    output = unknown.stdout + unknown.stderr
    assert unknown.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert output.count("isotune does not know the encoder family 't5'") == 1
    fixed = [
        *tiny,
        "model.dropout=0.1",
        "model.pooling=mean",
        "reg=istar",
        "reg.shrinkage_examples=16",
        "callbacks.isotropy.token_layers=[0,-1]",
    ]
    trained = run_script("train.py", *fixed)
    assert trained.returncode == 0, (trained.stdout + trained.stderr)[-3000:]
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "completed" and results["reg"] == "istar"
    for epoch in ("0", "1", "2"):
        measured = results["isotropy"]["per_epoch"][epoch]
        for view in ("pre_norm", "layer0_tokens", "layer-1_tokens"):
            assert math.isfinite(measured[f"iso/{view}/iw"]), (epoch, view)
    analysis = tmp_path / "analysis"
    analysed = run_script(
        "analyze.py",
        f"ckpt_path={run}/checkpoints/best.ckpt",
        f"paths.glue_dir={glue_dir}",
        "directions.matrices=all",
        f"hydra.run.dir={analysis}",
    )
    assert analysed.returncode == 0, (analysed.stdout + analysed.stderr)[-3000:]
    summary = json.loads((analysis / "analysis.json").read_text())
    assert summary["num_layers"] == 3
    by_layer = pd.read_csv(analysis / "isotropy_by_layer.csv")
    assert sorted(by_layer["layer"].unique()) == [0, 1, 2]


def test_pooler_pooling_of_a_family_without_a_pooler_names_its_classifiers_pooling(tmp_path):
    folder = save_tiny_encoder("distilbert", tmp_path / "distilbert")
    with pytest.raises(IsotuneError, match=r"no pooler layer \(DistilBERT's own classifier reads "):
        classifier(folder, pooling="pooler")


def test_token_layers_the_encoder_lacks_stop_the_run_at_once(train_config):
    with pytest.raises(IsotuneError, match=r"token_layers=\[0, 3\] names hidden states \[3\]"):
        train(train_config("callbacks.isotropy.token_layers=[0,3]"))


def test_a_lora_checkpoint_of_the_old_query_key_value_default_is_one_clear_error(tiny_bert):
    lora = {"name": "lora", "r": 2, "alpha": 4, "dropout": 0.0}
    old = classifier(tiny_bert, adapt={**lora, "target_modules": ["query", "key", "value"]})
    now = classifier(tiny_bert, adapt={**lora, "target_modules": None})
    with pytest.raises(IsotuneError, match=r"LoRA adapters on modules .* \(2, e\.g\. encoder\."):
        now.on_load_checkpoint({"state_dict": old.state_dict()})


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_family_preset_pools_as_its_classifier_and_is_one_line_offline(
    preset, monkeypatch, tmp_path
):
    hub_id, model_type, pooling = PRESETS[preset]
    model = OmegaConf.load(CONF_DIR / "model" / f"{preset}.yaml")
    assert (model.name, model.name_or_path, model.pooling) == (preset, hub_id, pooling)
    assert FAMILIES[model_type].head_pooling in (pooling, "classifier_pooling")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))  # nothing cached
    with pytest.raises(IsotuneError) as raised:
        load_tokenizer(model.name_or_path)
    assert str(raised.value).startswith(f"Model {hub_id!r} is not available: it is not a local")
    assert "\n" not in str(raised.value)


# -- every family end to end ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def family_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: save_tiny_encoder(name, root / name) for name in EXPECTED}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(EXPECTED))
def test_each_family_trains_resumes_and_is_analysed(model_type, family_folders, glue_dir, tmp_path):
    """norm=isobn, reg=istar over every layer, adapt=lora with the family's default targets, the
    isotropy of the embeddings' and last layer's tokens; killed after 1 of 2 epochs and resumed,
    then analysed (layer-wise isotropy, outlier and intruder dimensions)."""
    folder = family_folders[model_type]
    pooling = EXPECTED[model_type][3]
    run = [
        f"model.pooling={pooling}",
        "norm=isobn",
        "reg=istar",
        "reg.shrinkage_examples=16",
        "adapt=lora",
        "callbacks.isotropy.token_layers=[0,-1]",
        "callbacks.isotropy.probe_size=16",
        "debug=limit",  # two epochs of four steps
        "logger=none",
    ]

    def config(*overrides: str, output_dir: Path):
        base = tiny_run_overrides(folder, glue_dir)
        return compose_train_config([*base, *overrides], output_dir)

    full, resumed, full_dir, _, resumed_dir = kill_and_resume(
        config, tmp_path, *run, kill=KILL_AFTER_ONE
    )
    assert full["status"] == resumed["status"] == "completed"
    assert resumed["history"] == full["history"]
    assert resumed["isotropy"]["per_epoch"] == full["isotropy"]["per_epoch"]
    expected = load(full_dir / "checkpoints" / "last.ckpt")["state_dict"]
    actual = load(resumed_dir / "checkpoints" / "last.ckpt")["state_dict"]
    assert actual.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(actual[name], tensor), name

    summary = analyze(
        compose_config(
            "analyze",
            [
                f"ckpt_path={full_dir}/checkpoints/last.ckpt",
                f"paths.glue_dir={glue_dir}",
                "data.max_length=128",
                "directions.k=4",
                *SMALL,
            ],
            tmp_path / "analysis",
        )
    )
    layers = EXPECTED[model_type][0]
    assert summary["adapt"] == "lora" and summary["num_layers"] == layers + 1
    by_layer = pd.read_csv(tmp_path / "analysis" / "isotropy_by_layer.csv")
    assert sorted(by_layer["layer"].unique()) == list(range(layers + 1))
    assert "outlier_dimensions" in summary
    intruders = pd.read_csv(tmp_path / "analysis" / "intruder_dimensions.csv")
    targets = EXPECTED[model_type][4]
    assert intruders["matrix"].str.endswith(tuple(f".{t}" for t in targets)).all()
    shared = model_type == "albert"  # one layer group: its modules serve every layer
    assert len(intruders) == len(targets) * (1 if shared else layers)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(EXPECTED))
def test_every_norm_trains_on_each_family(model_type, family_folders):
    """One training step of each norm on the family's sentence vector (its pooling), in train
    mode with the tokenizer's batch of 16 sentence pairs, then an eval-mode pass."""
    folder = family_folders[model_type]
    tokenizer = load_tokenizer(str(folder))
    words = [*WORDS] * 2
    batch = dict(
        tokenizer(
            [" ".join(words[i : i + 5]) for i in range(16)],
            [" ".join(words[i + 3 : i + 6]) for i in range(16)],
            padding=True,
            return_tensors="pt",
        )
    )
    labels = torch.arange(16) % 2
    for norm in NORMS:
        model = classifier(folder, EXPECTED[model_type][3], norm=norm)
        model.loss(model(batch), labels).backward()
        assert model.head.weight.grad.abs().sum() > 0, norm
        assert all(p.grad is None or p.grad.isfinite().all() for p in model.parameters()), norm
        assert model.eval()(batch).isfinite().all(), norm


@pytest.mark.slow
def test_a_full_fine_tuning_checkpoint_is_analysed_on_the_familys_default_targets(
    family_folders, glue_dir, tmp_path
):
    model_type = "deberta-v2"  # the issue's: its defaults were BERT's and RoBERTa's only
    folder = family_folders[model_type]
    overrides = [*tiny_run_overrides(folder, glue_dir), "debug=limit", "trainer.max_epochs=1"]
    train(compose_train_config([*overrides, "callbacks.isotropy=null", "logger=none"], tmp_path))
    summary = analyze(
        compose_config(
            "analyze",
            [
                f"ckpt_path={tmp_path}/checkpoints/last.ckpt",
                f"paths.glue_dir={glue_dir}",
                "data.max_length=128",
                *SMALL,
            ],
            tmp_path / "analysis",
        )
    )
    assert summary["adapt"] == "full" and summary["intruder_dimensions"]["set"] == "adapted"
    layers, *_, targets = EXPECTED[model_type]
    assert summary["intruder_dimensions"]["matrices"] == len(targets) * layers
