"""Tiny random encoders of every family in ``isotune.model.families``, saved as model folders.

Each has 2 layers of width 32 (ModernBERT 3, so that one of its layers attends globally and two
through a sliding window narrower than the fixtures' sentences), and a tokenizer fitted to the
fixtures' words: byte-level BPE for RoBERTa and XLM-RoBERTa (no token types, as theirs), BERT's
WordPiece for the rest (it gives token_type_ids, which only BERT, ALBERT and ELECTRA read).
The decoder language models (GPT-2, GPT-NeoX, OPT, Llama, Qwen2/3, Gemma, Gemma-3) get GPT-2's
kind of tokenizer: byte-level BPE with one end-of-text token and no pad token, sentence pairs
joined as they come; Llama's pads on the left.
Beside them, a tiny T5 (an encoder-decoder the family table does not know), with a Unigram
tokenizer as T5's, and a tiny BART (an encoder-decoder whose encoder transformers cannot load
alone). No download.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tokenizers import ByteLevelBPETokenizer, processors
from transformers import (
    AutoConfig,
    AutoModel,
    GPT2TokenizerFast,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    RobertaTokenizerFast,
    T5Config,
    T5Model,
    T5Tokenizer,
)

from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import wordpiece_tokenizer

POSITIVE = ["good", "great", "fine", "nice", "happy", "bright"]
NEGATIVE = ["bad", "awful", "poor", "sad", "dark", "grim"]
FILLER = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "home", "it", "was", "very", "day"]
WORDS = POSITIVE + NEGATIVE + FILLER
WORDPIECE_IDS = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}  # [PAD] [CLS] [SEP]
BPE_IDS = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}  # <pad> <s> </s>
BERT_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}
# model_type -> the options of its tiny config (beyond vocab_size and the special token ids)
TINY_CONFIGS: dict[str, dict] = {
    "bert": {**BERT_SIZES, "max_position_embeddings": 128},
    "roberta": {**BERT_SIZES, "max_position_embeddings": 130},
    "xlm-roberta": {**BERT_SIZES, "max_position_embeddings": 130, "type_vocab_size": 1},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
    "albert": {**BERT_SIZES, "embedding_size": 16},
    "electra": {**BERT_SIZES, "embedding_size": 16},
    "deberta-v2": {**BERT_SIZES, "relative_attention": True, "position_buckets": 16},
    "modernbert": {
        **BERT_SIZES,
        "num_hidden_layers": 3,
        "local_attention": 8,
        "cls_token_id": 2,
        "sep_token_id": 3,
        "classifier_pooling": "mean",
    },
    "mpnet": BERT_SIZES,
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_inner": 64, "n_positions": 128},
    "gpt_neox": {**BERT_SIZES, "max_position_embeddings": 128},
    "opt": {
        "hidden_size": 32,
        "word_embed_proj_dim": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "ffn_dim": 64,
        "max_position_embeddings": 128,
    },
    **{
        model_type: {**BERT_SIZES, "num_key_value_heads": 1, "head_dim": 16}
        for model_type in ("llama", "qwen2", "qwen3", "gemma")
    },
    "gemma3_text": {
        **BERT_SIZES,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "sliding_window": 8,  # narrower than the fixtures' sentences, as ModernBERT's
        "layer_types": ["sliding_attention", "full_attention"],
    },
}
BPE_FAMILIES = ("roberta", "xlm-roberta")
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # as conftest's, which imports this
DECODER_FAMILIES = ("gpt2", "gpt_neox", "opt", "llama", "qwen2", "qwen3", "gemma", "gemma3_text")
END_OF_TEXT = "<|endoftext|>"
DECODER_IDS = {"bos_token_id": 0, "eos_token_id": 0}  # <|endoftext|>; no pad token
LEFT_PADDING = ("llama",)  # as Llama's Hugging Face tokenizers pad


def sentence(rng: random.Random, polar: list[str]) -> str:
    words = [*rng.choices(FILLER, k=rng.randint(3, 12)), rng.choice(polar)]
    rng.shuffle(words)
    return " ".join(words) + " ."


def _texts() -> list[str]:
    rng = random.Random(1)
    return [sentence(rng, POSITIVE + NEGATIVE) for _ in range(200)]


def bpe_tokenizer() -> RobertaTokenizerFast:
    """A byte-level BPE tokenizer with RoBERTa's specials, fitted to the fixtures' sentences."""
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_texts(), vocab_size=400, min_frequency=1, special_tokens=specials)
    bpe.post_processor = processors.RobertaProcessing(
        ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>"))
    )
    return RobertaTokenizerFast(tokenizer_object=bpe._tokenizer)


def decoder_tokenizer(padding_side: str = "right") -> GPT2TokenizerFast:
    """GPT-2's kind of tokenizer fitted to the fixtures' sentences: byte-level BPE, one
    end-of-text token (beginning, end and unknown), no pad token, pairs joined as they come."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_texts(), vocab_size=400, min_frequency=1, special_tokens=[END_OF_TEXT])
    return GPT2TokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        unk_token=END_OF_TEXT,
        padding_side=padding_side,
    )


def family_tokenizer(model_type: str) -> PreTrainedTokenizerBase:
    """The tiny tokenizer of a family's kind (module doc)."""
    if model_type in DECODER_FAMILIES:
        return decoder_tokenizer("left" if model_type in LEFT_PADDING else "right")
    if model_type in BPE_FAMILIES:
        return bpe_tokenizer()
    return wordpiece_tokenizer([*WORDS, "."])


def tiny_config(model_type: str, vocab_size: int = 100, **options) -> PretrainedConfig:
    """The tiny config of a family, for a tokenizer of ``vocab_size`` tokens, with ``options``
    over its :data:`TINY_CONFIGS` (a shape of one real model of the family)."""
    if model_type in DECODER_FAMILIES:
        ids = DECODER_IDS
    else:
        ids = BPE_IDS if model_type in BPE_FAMILIES else WORDPIECE_IDS
    return AutoConfig.for_model(
        model_type, vocab_size=vocab_size, **ids, **{**TINY_CONFIGS[model_type], **options}
    )


def save_seeded(build: Callable[[], PreTrainedModel], folder: Path) -> None:
    """Save the model ``build`` initialises under seed 0, apart from the global generator: its
    weights are the same whichever tests ran before, so a test that passes alone passes in CI's
    order too."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = build()
    model.save_pretrained(folder)


def save_tiny_encoder(model_type: str, folder: Path, **options) -> Path:
    """A randomly initialised (seeded) tiny encoder of ``model_type`` and its tokenizer, in
    ``folder``; ``options`` over its tiny config (:func:`tiny_config`)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = family_tokenizer(model_type)
    tokenizer.save_pretrained(folder)
    config = tiny_config(model_type, len(tokenizer), **options)
    save_seeded(lambda: AutoModel.from_config(config), folder)
    return folder


def save_tiny_t5(folder: Path) -> Path:
    """A randomly initialised tiny T5 (encoder and decoder, as a T5 checkpoint holds them) and a
    T5 tokenizer over the fixtures' words (Unigram with SentencePiece's word marks, ``</s>``
    after each segment, no token types), in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    specials = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    words = [(f"\u2581{word}", -5.0) for word in WORDS] + [("\u2581.", -5.0), (".", -6.0)]
    tokenizer = T5Tokenizer(vocab=[*specials, *words], extra_ids=0)
    tokenizer.save_pretrained(folder)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=2,
        num_heads=2,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    save_seeded(lambda: T5Model(config), folder)
    return folder


def save_tiny_bart(folder: Path) -> Path:
    """A randomly initialised tiny BART (one encoder and one decoder layer) and a byte-level BPE
    tokenizer, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = bpe_tokenizer()
    tokenizer.save_pretrained(folder)
    sizes = {
        f"{part}_{size}": value
        for part in ("encoder", "decoder")
        for size, value in (("layers", 1), ("attention_heads", 2), ("ffn_dim", 64))
    }
    config = AutoConfig.for_model("bart", vocab_size=len(tokenizer), d_model=32, **sizes, **BPE_IDS)
    save_seeded(lambda: AutoModel.from_config(config), folder)
    return folder


def classifier(
    folder: Path, pooling: str | None = "cls", dropout=None, adapt=None, norm="none", reg=None
) -> GLUEClassifier:
    """A classifier of RTE on the model in ``folder`` (``pooling`` None: the family's own)."""
    task = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "task" / "rte.yaml"))
    return GLUEClassifier(
        task=task,
        model={"name": "tiny", "name_or_path": str(folder), "pooling": pooling, "dropout": dropout},
        norm=OmegaConf.to_container(OmegaConf.load(CONF_DIR / "norm" / f"{norm}.yaml")),
        optim={},
        reg=reg,
        adapt=adapt,
    )
