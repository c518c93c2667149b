"""Shared fixtures: tiny random BERT and RoBERTa models with tiny tokenizers (of every family:
tests/helpers/encoders.py), GLUE-format TSVs.

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

from tests.helpers.encoders import FILLER, NEGATIVE, POSITIVE, save_tiny_encoder, sentence

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait for the network in tests
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"


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


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer BERT (hidden 32) and a WordPiece tokenizer, saved to disk."""
    return save_tiny_encoder("bert", tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer RoBERTa and a byte-level BPE tokenizer fitted to fixtures."""
    return save_tiny_encoder("roberta", tmp_path_factory.mktemp("tiny-roberta"))


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
    """A fast tiny-BERT run on the fixtures: CPU, two epochs, no progress bar or figures, and
    its last.ckpt kept whole (checkpoint.keep=full: tests compare a completed run's last epoch;
    what the default keeps is tested in test_keep.py)."""
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
        "checkpoint.keep=full",
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
