"""Shared fixtures: tiny random BERT and RoBERTa models with tiny tokenizers, GLUE-format TSVs.

Everything is built here from configs, so the suite needs no download.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from isotune.encoders import wordpiece_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait for the network in tests
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"

POSITIVE = ["good", "great", "fine", "nice", "happy", "bright"]
NEGATIVE = ["bad", "awful", "poor", "sad", "dark", "grim"]
FILLER = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "home", "it", "was", "very", "day"]
WORDS = POSITIVE + NEGATIVE + FILLER


def sentence(rng: random.Random, polar: list[str]) -> str:
    words = [*rng.choices(FILLER, k=rng.randint(3, 12)), rng.choice(polar)]
    rng.shuffle(words)
    return " ".join(words) + " ."


def write_glue_dir(root: Path, n_train: int = 64, n_dev: int = 24) -> Path:
    """RTE, MRPC, STS-B and CoLA in the official GLUE layout, with a learnable signal."""
    rng = random.Random(0)

    def rows(n: int):
        for i in range(n):
            positive = i % 2 == 0
            yield (
                i,
                positive,
                sentence(rng, FILLER),
                sentence(rng, POSITIVE if positive else NEGATIVE),
            )

    def write(path: Path, lines: list[str], bom: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")

    for split, n in (("train", n_train), ("dev", n_dev)):
        data = list(rows(n))
        write(
            root / "RTE" / f"{split}.tsv",
            ["index\tsentence1\tsentence2\tlabel"]
            + [f"{i}\t{a}\t{b}\t{'entailment' if p else 'not_entailment'}" for i, p, a, b in data],
        )
        write(
            root / "MRPC" / f"{split}.tsv",
            ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
            + [f"{int(p)}\t{i}\t{i + 1000}\t{a}\t{b}" for i, p, a, b in data],
            bom=True,
        )
        write(
            root / "STS-B" / f"{split}.tsv",
            [
                "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
            ]
            + [
                f"{i}\tg\tf\ty\t{i}\ts\ts\t{a}\t{b}\t{4.5 if p else 0.5:.3f}" for i, p, a, b in data
            ],
        )
        write(
            root / "CoLA" / f"{split}.tsv",
            [f"src\t{int(p)}\t\t{b}" for i, p, a, b in data],
        )
    for task, header, fmt in (
        ("RTE", "index\tsentence1\tsentence2", "{i}\t{a}\t{b}"),
        ("MRPC", "index\t#1 ID\t#2 ID\t#1 String\t#2 String", "{i}\t1\t2\t{a}\t{b}"),
        (
            "STS-B",
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2",
            "{i}\tg\tf\ty\t{i}\ts\ts\t{a}\t{b}",
        ),
        ("CoLA", "index\tsentence", "{i}\t{b}"),
    ):
        write(
            root / task / "test.tsv",
            [header] + [fmt.format(i=i, a=a, b=b) for i, _, a, b in rows(10)],
        )
    return root


@pytest.fixture(scope="session")
def glue_dir(tmp_path_factory) -> Path:
    return write_glue_dir(tmp_path_factory.mktemp("glue"))


def _texts() -> list[str]:
    rng = random.Random(1)
    return [sentence(rng, POSITIVE + NEGATIVE) for _ in range(200)]


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer BERT (hidden 32) and a WordPiece tokenizer, saved to disk."""
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = wordpiece_tokenizer([*WORDS, "."])
    tokenizer.save_pretrained(folder)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer RoBERTa and a byte-level BPE tokenizer fitted to fixtures."""
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-roberta")
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_texts(), vocab_size=400, min_frequency=1, special_tokens=specials)
    bpe.post_processor = processors.RobertaProcessing(
        ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>"))
    )
    RobertaTokenizerFast(tokenizer_object=bpe._tokenizer).save_pretrained(folder)
    config = RobertaConfig(
        vocab_size=bpe.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    RobertaModel(config).save_pretrained(folder)
    return folder


@pytest.fixture
def gpu_visible(monkeypatch):
    """Torch sees a CUDA GPU: the GPU presets' values pass the config check on any machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def compose_config(name: str, overrides: list[str], output_dir: Path | None = None) -> DictConfig:
    """The composed ``conf/<name>.yaml`` as ``python <name>.py <overrides>`` would see it."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.job.name = name  # as `python <name>.py` names its job
    if output_dir is not None:
        with open_dict(cfg):
            cfg.paths.output_dir = str(output_dir)
            cfg.paths.log_dir = str(output_dir)
            cfg.hydra.runtime.output_dir = str(output_dir)
            cfg.hydra.job.num = 0
    HydraConfig().set_config(cfg)
    return cfg


def compose_train_config(overrides: list[str], output_dir: Path | None = None) -> DictConfig:
    return compose_config("train", overrides, output_dir)


def tiny_run_overrides(tiny_bert: Path, glue_dir: Path) -> list[str]:
    """A fast tiny-BERT run on the fixtures: CPU, two epochs, no progress bar or figures."""
    return [
        f"model.name_or_path={tiny_bert}",
        "model.pooling=cls",
        f"paths.glue_dir={glue_dir}",
        "trainer=cpu",
        "trainer.max_epochs=2",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "data.batch_size=8",
        "data.eval_batch_size=16",
        "optim.lr=1e-3",
        "callbacks.isotropy.figures=false",
        "seed=1",
    ]


@pytest.fixture
def train_config(tmp_path, tiny_bert, glue_dir):
    """Compose a fast tiny-BERT run writing into ``tmp_path``; extra overrides as arguments."""

    def make(*overrides: str, output_dir: Path | None = None) -> DictConfig:
        return compose_train_config(
            tiny_run_overrides(tiny_bert, glue_dir) + list(overrides), output_dir or tmp_path
        )

    return make
