"""What differs between model families, in one table keyed by ``config.model_type``.

Each fact follows the family's own Hugging Face classifier, so that the ``null`` settings and the
``conf/model`` presets fine-tune as it does (docs/training.md#model-families). A family missing
from :data:`FAMILIES` trains when the settings standing in for its facts are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from isotune.errors import IsotuneError

__all__ = [
    "FAMILIES",
    "Family",
    "default_dropout",
    "family_of",
    "head_pooling",
    "hidden_size",
    "hidden_state_indices",
    "hidden_state_widths",
    "lora_target_modules",
    "num_layers",
    "takes_token_types",
]

# The dropout before the classifier of BERT's head, and of the heads copied from it: its own
# classifier_dropout when set, else the encoder's hidden dropout.
BERT_DROPOUT = ("classifier_dropout", "hidden_dropout_prob")


# Decoder language models' classifiers (GPT2ForSequenceClassification and the generic one of
# Llama, Qwen, Gemma) put no dropout before their score layer, and read the last real token.
NO_DROPOUT: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    """One model family, as its Hugging Face sequence-classification model uses it."""

    name: str  # as papers write it
    dropout: tuple[str, ...]  # config attributes of the dropout before its classifier: first set
    # (NO_DROPOUT: its classifier has none, 0.0)
    token_types: bool  # token_type_ids have an embedding (segment A/B), given type_vocab_size > 1
    trained_pooler: bool  # the base model's pooler was trained in pre-training (NSP, SOP)
    head_pooling: str  # what its classifier reads: pooler | cls | mean | last | classifier_pooling
    lora_targets: tuple[str, ...] | None = None  # its attention query/value; None: peft's table
    hidden_size: str = "hidden_size"  # config attribute of the last hidden state's width
    num_layers: str = "num_hidden_layers"  # config attribute of the transformer layers' count
    layer_width: str | None = None  # config attribute of the other hidden states' width, where
    # it may differ from the last's (None: the same attribute as hidden_size)


# Positional fields: name, dropout, token_types, trained_pooler, head_pooling, lora_targets (given
# where peft's table lacks the family: DistilBERT, ALBERT, ModernBERT, MPNet).
FAMILIES: dict[str, Family] = {
    "bert": Family("BERT", BERT_DROPOUT, True, True, "pooler"),
    "roberta": Family("RoBERTa", BERT_DROPOUT, True, False, "cls"),
    "xlm-roberta": Family("XLM-RoBERTa", BERT_DROPOUT, True, False, "cls"),
    "distilbert": Family(
        "DistilBERT",
        ("seq_classif_dropout",),
        False,
        False,
        "cls",
        ("q_lin", "v_lin"),
        hidden_size="dim",
        num_layers="n_layers",
    ),
    # Its layers share their weights: each target is one module per layer group.
    "albert": Family(
        "ALBERT", ("classifier_dropout_prob",), True, True, "pooler", ("query", "value")
    ),
    "electra": Family("ELECTRA", BERT_DROPOUT, True, False, "cls"),
    # DeBERTa-v3 checkpoints are model_type deberta-v2 with type_vocab_size 0.
    "deberta-v2": Family(
        "DeBERTa-v2/v3", ("cls_dropout", "hidden_dropout_prob"), True, False, "cls"
    ),
    # Its head pools as config.classifier_pooling says; Wqkv projects query, key and value at once.
    "modernbert": Family(
        "ModernBERT", ("classifier_dropout",), False, False, "classifier_pooling", ("Wqkv",)
    ),
    "mpnet": Family("MPNet", ("hidden_dropout_prob",), False, False, "cls", ("q", "v")),
    # Decoder language models: no token types, no pooler, the last real token, no dropout before
    # the head; LoRA's targets from peft's table (GPT-2's c_attn is a Conv1D, query, key and value
    # in one matrix; GPT-NeoX's query_key_value likewise).
    "gpt2": Family("GPT-2", NO_DROPOUT, False, False, "last"),
    "gpt_neox": Family("GPT-NeoX (Pythia)", NO_DROPOUT, False, False, "last"),
    # Its classifier reads the last hidden state after project_out, word_embed_proj_dim wide
    # (OPT-350m: 512; the other sizes: the hidden size); the embeddings (after project_in) and
    # the other layers are hidden_size wide (OPT-350m: 1024).
    "opt": Family(
        "OPT",
        NO_DROPOUT,
        False,
        False,
        "last",
        hidden_size="word_embed_proj_dim",
        layer_width="hidden_size",
    ),
    **{
        model_type: Family(name, NO_DROPOUT, False, False, "last")
        for model_type, name in (
            ("llama", "Llama"),  # SmolLM2, TinyLlama
            ("qwen2", "Qwen2"),
            ("qwen3", "Qwen3"),
            ("gemma", "Gemma"),
            ("gemma3_text", "Gemma-3"),
        )
    },
}

SETTINGS_FIX = (
    "Fix: give what the table would: model.dropout=<p> (the dropout before the head, e.g. 0.1); "
    "model.pooling=cls, mean or last (what the sentence vector reads); with adapt=lora, "
    "'adapt.target_modules=[...]' (its attention projections{layers}); for "
    "analyze.py on a checkpoint without LoRA, directions.matrices=all. Or add the family to "
    "FAMILIES in src/isotune/model/families.py (docs/extending.md)."
)


def family_of(config: Any, fact: str, linear_layers: Sequence[str] = ()) -> Family:
    """The family of an encoder ``config``, or one error naming the settings that stand in for
    its ``fact`` (what was asked, for the message; ``linear_layers``: the encoder's, to choose
    LoRA targets from)."""
    model_type = getattr(config, "model_type", None)
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    layers = f", out of its linear layers {list(linear_layers)}" if linear_layers else ""
    raise IsotuneError(
        f"isotune does not know the encoder family {model_type!r} (config.model_type), so it "
        f"cannot tell {fact}; it knows {sorted(FAMILIES)}. {SETTINGS_FIX.format(layers=layers)}"
    )


def _attribute(config: Any, name: str, what: str) -> Any:
    value = getattr(config, name, None)
    if value is None:
        raise IsotuneError(
            f"The encoder config ({getattr(config, 'model_type', None)!r}) has no {name}, so "
            f"isotune cannot tell its {what}. Is model.name_or_path a Hugging Face encoder?"
        )
    return value


def hidden_size(config: Any) -> int:
    """The width of the encoder's hidden states (and so of its sentence vector)."""
    known = FAMILIES.get(getattr(config, "model_type", None))
    return int(_attribute(config, known.hidden_size if known else "hidden_size", "hidden size"))


def hidden_state_widths(config: Any) -> tuple[int, ...]:
    """The width of each of the encoder's ``hidden_states`` (0 = the embeddings, the last =
    :func:`hidden_size`): OPT-350m's are 1024 but the last, 512 after its ``project_out``."""
    known = FAMILIES.get(getattr(config, "model_type", None))
    last = hidden_size(config)
    inner = last
    if known is not None and known.layer_width is not None:
        inner = int(_attribute(config, known.layer_width, "layers' width"))
    return (inner,) * num_layers(config) + (last,)


def num_layers(config: Any) -> int:
    """The encoder's transformer layers; its ``hidden_states`` are these plus the embeddings."""
    known = FAMILIES.get(getattr(config, "model_type", None))
    name = known.num_layers if known else "num_hidden_layers"
    return int(_attribute(config, name, "number of layers"))


def default_dropout(config: Any) -> float:
    """The dropout the family's Hugging Face classifier applies to its input: the first of its
    config attributes that is set (``model.dropout=null`` takes it); 0.0 for a decoder's, which
    has none."""
    family = family_of(config, "the dropout before the head")
    if family.dropout == NO_DROPOUT:
        return 0.0
    for name in family.dropout:
        value = getattr(config, name, None)
        if value is not None:
            return float(value)
    raise IsotuneError(
        f"The {family.name} config sets none of {list(family.dropout)}, the dropout before its "
        "classifier. Fix: set model.dropout=<p>, e.g. 0.1."
    )


def head_pooling(family: Family, config: Any) -> str:
    """What the family's Hugging Face classifier reads: ``pooler``, ``cls``, ``mean`` or ``last``
    (ModernBERT: its config's ``classifier_pooling``)."""
    if family.head_pooling == "classifier_pooling":
        return getattr(config, "classifier_pooling", "cls")
    return family.head_pooling


def takes_token_types(config: Any) -> bool | None:
    """Whether ``token_type_ids`` reach an embedding that tells them apart: a family with token
    type embeddings and ``type_vocab_size`` > 1 (RoBERTa's 1 and DeBERTa-v3's 0 read only zeros,
    the models' own default). None for a family the table does not know: pass what the tokenizer
    gives."""
    known = FAMILIES.get(getattr(config, "model_type", None))
    if known is None:
        return None
    return known.token_types and getattr(config, "type_vocab_size", 0) > 1


def lora_target_modules(config: Any, linear_layers: Sequence[str] = ()) -> tuple[str, ...]:
    """LoRA's default targets: the family's attention query and value projections, as the
    released LoRA code adapts them; peft's own table (``TRANSFORMERS_MODELS_TO_LORA_TARGET_
    MODULES_MAPPING``) where it has the family, this table's entry otherwise."""
    family = family_of(config, "which modules LoRA adapts by default", linear_layers)
    if family.lora_targets is not None:
        return family.lora_targets
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    return tuple(TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING[config.model_type])


def hidden_state_indices(
    indices: Sequence[int], layer_count: int, key: str, also: str = ""
) -> tuple[int, ...]:
    """``indices`` into an encoder's ``hidden_states`` (0 = the embeddings, ``layer_count`` = the
    last layer, negative from the end), as non-negative ones; one that the encoder does not have
    is an error about the setting ``key`` (``also``: the other values it takes)."""
    bad = [i for i in indices if not -(layer_count + 1) <= i <= layer_count]
    if bad:
        raise IsotuneError(
            f"{key}={list(indices)} names hidden states {bad} the model does not have: it "
            f"has {layer_count + 1} (0 = the embeddings, {layer_count} = the last layer, negative "
            f"indices count from the end). Use indices in [-{layer_count + 1}, {layer_count}]"
            f"{also}."
        )
    return tuple(i % (layer_count + 1) for i in indices)
