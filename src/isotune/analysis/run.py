"""How fine-tuning changed the geometry of an encoder: one checkpoint against its pre-trained self.

Tests the statements T1-T5 of Rajaee & Pilehvar, "How Does Fine-tuning Affect the Geometry of
Embedding Space" (Findings of EMNLP 2021), and O1, O2 on outlier dimensions, on one fine-tuned
checkpoint; what is compared and how each verdict is decided: ``docs/analysis.md``.
``analyze.py`` is only the Hydra entry point; :func:`analyze` is one analysis, top to bottom:
load the checkpoint and its pre-trained twin, collect vectors on a seeded dev subset
(:mod:`.geometry`), measure and judge (:mod:`.experiments`, :mod:`.outlier_dimensions`,
:mod:`.directions`, :mod:`.verdicts`), then write and log the outputs (:mod:`.figures`,
:mod:`.report`).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, open_dict
from torch import Tensor
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from isotune.analysis.config_checks import check_analyze_config
from isotune.analysis.directions import changed_directions, intruder_matrices
from isotune.analysis.experiments import (
    Inputs,
    enhancement_experiment,
    isotropy_by_layer,
    local_structure,
    metric_values,
    sentence_view,
)
from isotune.analysis.figures import draw_figures
from isotune.analysis.geometry import (
    TOKEN_TYPES,
    collect_layer_vectors,
    frequency_buckets,
    sample_tokens,
    token_counts,
)
from isotune.analysis.outlier_dimensions import outlier_experiment
from isotune.analysis.report import log_to_loggers, report_markdown, write_tables
from isotune.analysis.verdicts import judge, judge_outliers
from isotune.atomic_files import write_text
from isotune.data import Example, TokenizedDataset, check_max_length, load_split
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.model.classifier import GLUEClassifier, model_from_checkpoint
from isotune.model.encoders import load_tokenizer
from isotune.record.kept_checkpoint import read_kept_checkpoint

log = logging.getLogger(__name__)


def analyze(cfg: DictConfig) -> dict[str, Any]:
    """Run the whole analysis as ``cfg`` (``conf/analyze.yaml``) says; return ``analysis.json``."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        seconds[stage] = round(time.perf_counter() - clock, 2)
        clock = time.perf_counter()

    check_analyze_config(cfg)  # before the two models load: a bad value fails in seconds
    kept = read_kept_checkpoint(cfg.ckpt_path, "analyze.py")
    finetuned = model_from_checkpoint(kept.checkpoint, kept.file)
    matrices = intruder_matrices(finetuned, cfg.directions.matrices)
    hparams = finetuned.hparams
    task = finetuned.task
    with open_dict(cfg):  # what was analysed, for loggers (and their run names): as data
        cfg.task, cfg.model, cfg.norm = (literal(hparams[key]) for key in ("task", "model", "norm"))
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(cfg.seed)  # the twin's fresh head, and a pooler its checkpoint lacks
    models = {"pretrained": GLUEClassifier(**hparams), "finetuned": finetuned}
    for module in models.values():
        module.to(device).eval()
    tokenizer = load_tokenizer(hparams["model"]["name_or_path"])
    max_length = run_max_length(cfg.data.max_length, Path(cfg.ckpt_path))
    check_max_length(max_length, task, tokenizer)
    glue_dir = cfg.paths.glue_dir
    dev_split = load_split(task, task.primary_split, glue_dir)
    train_split = load_split(task, "train", glue_dir)
    dev = subset(dev_split, cfg.data.dev_examples, cfg.seed, task)
    probe_train = subset(train_split, cfg.data.train_examples, cfg.seed, task)
    counted = subset(train_split, cfg.data.frequency_examples, cfg.seed, task)
    lap("load")

    sample = sample_tokens(
        tokenizer, dev, task.text_fields, max_length, cfg.tokens.max_tokens, cfg.seed
    )
    counted_ids = TokenizedDataset(counted, task, tokenizer, max_length).features
    counts = token_counts((f["input_ids"] for f in counted_ids), len(tokenizer))
    token_labels = {
        "token_type": sample.token_type,
        "frequency": frequency_buckets(counts[sample.token_id], cfg.local.frequency_buckets),
    }
    dev_set = TokenizedDataset(dev, task, tokenizer, max_length)
    train_set = TokenizedDataset(probe_train, task, tokenizer, max_length)
    collate = DataCollatorWithPadding(tokenizer)

    def batches(dataset: TokenizedDataset) -> DataLoader:
        return DataLoader(dataset, batch_size=cfg.data.eval_batch_size, collate_fn=collate)

    dev_vectors = {
        name: collect_layer_vectors(module, batches(dev_set), sample)
        for name, module in models.items()
    }
    train_vectors = {
        name: collect_layer_vectors(module, batches(train_set), None)
        for name, module in models.items()
    }
    lap("collect")

    pooling = finetuned.pooling  # model.pooling=null: the family's own, as the model resolved it
    tables = {
        "isotropy_by_layer": isotropy_by_layer(
            dev_vectors, pooling, cfg.isotropy.dominant_factor, cfg.seed
        )
    }
    lap("isotropy")
    dev_labels, train_labels = labels_of(dev_set, task), labels_of(train_set, task)
    inputs = Inputs(models, dev_vectors, train_vectors, dev_labels, train_labels, cfg.seed)
    directions, direction_counts = changed_directions(inputs, cfg.directions, matrices)
    lap("directions")
    tables["local_structure"] = local_structure(dev_vectors, token_labels, cfg.local, cfg.seed)
    lap("local_structure")
    tables["enhancement"] = enhancement_experiment(
        inputs, cfg.enhance, cfg.isotropy.dominant_factor
    )
    lap("enhancement")
    finetuned_dev = metric_values(tables["enhancement"], "finetuned_head", "none")
    full_score = finetuned_dev[task.primary_metric]
    tables["outlier_dimensions"], outliers = outlier_experiment(inputs, full_score, cfg.outliers)
    lap("outlier_dimensions")

    num_layers = dev_vectors["finetuned"].num_layers
    view = sentence_view(pooling)
    verdicts = judge(tables, task, view, num_layers - 1, cfg.verdict)
    verdicts += judge_outliers(outliers, cfg.verdict)
    checkpoint_dev = finetuned.history[-1] if finetuned.history else None
    summary = {
        "checkpoint": str(Path(cfg.ckpt_path).resolve()),
        "task": task.name,
        "model": hparams["model"]["name"],
        "pretrained": hparams["model"]["name_or_path"],
        "pooling": pooling,
        "sentence_view": view,
        "norm": hparams["norm"]["name"],
        "adapt": finetuned.adaptation,
        "num_layers": num_layers,
        "hidden_size": dev_vectors["finetuned"].pre_norm.shape[1],
        "max_length": max_length,
        "dev_examples": len(dev),
        "dev_examples_available": len(dev_split),
        "train_examples": len(probe_train),
        "frequency_examples": len(counted),
        "tokens": len(sample),
        "token_types": {
            name: int((sample.token_type == index).sum()) for index, name in enumerate(TOKEN_TYPES)
        },
        "checkpoint_dev": checkpoint_dev,
        "finetuned_dev": finetuned_dev,
        **direction_counts,
        "outlier_dimensions": outliers,
        "verdicts": {verdict.statement: asdict(verdict) for verdict in verdicts},
        "seconds": seconds,
    }
    figures = draw_figures(tables, dev_vectors, view, task, cfg, outliers, output_dir)
    write_tables(tables, task, output_dir)
    for name, table in directions.items():
        write_text(output_dir / f"{name}.csv", table.to_csv(index=False))
    lap("outputs")
    seconds["total"] = round(sum(seconds.values()), 2)
    report = write_text(
        output_dir / "report.md", report_markdown(summary, tables, directions, verdicts, task, cfg)
    )
    write_text(output_dir / "analysis.json", json.dumps(summary, indent=2) + "\n")
    log_to_loggers(cfg, summary, tables, figures, report)
    log.info("Analysis written to %s (%.0fs)", output_dir, summary["seconds"]["total"])
    return summary


def literal(values: Any) -> Any:
    """``values`` (read from a checkpoint) with every ``${`` escaped, so that merged into the
    Hydra config a saved ``${oc.env:WANDB_API_KEY}`` stays that string: saved settings are data,
    never resolved (OmegaConf reads ``\\${`` as a plain ``${``; backslashes before it double)."""
    if isinstance(values, Mapping):
        return {key: literal(value) for key, value in values.items()}
    if isinstance(values, list | tuple):
        return [literal(value) for value in values]
    if isinstance(values, str):
        return re.sub(r"(\\*)\$\{", lambda found: found[1] * 2 + "\\${", values)
    return values


def run_max_length(configured: int | None, ckpt_path: Path) -> int:
    """``data.max_length`` if set, else the fine-tuning run's (``<run>/.hydra/config.yaml``, with
    ``<run>/checkpoints/<name>.ckpt``), so the dev set is tokenized as in training."""
    if configured is not None:
        return configured
    run_config = ckpt_path.expanduser().resolve().parent.parent / ".hydra" / "config.yaml"
    if not run_config.is_file():
        raise IsotuneError(
            f"No run config at {run_config} to take data.max_length from (the checkpoint is "
            "outside its run folder). Fix: set data.max_length=<the fine-tuning run's value>."
        )
    try:  # read as data: a saved ${...} is not resolved
        saved = yaml.safe_load(run_config.read_text())["data"]["max_length"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as error:
        saved = f"unreadable ({type(error).__name__})"
    if not isinstance(saved, int) or isinstance(saved, bool) or saved < 1:
        raise IsotuneError(
            f"{run_config} gives data.max_length={saved!r}, not a positive integer. Fix: set "
            "data.max_length=<the fine-tuning run's value>."
        )
    return saved


def subset(examples: Sequence[Example], size: int | None, seed: int, task: TaskSpec) -> list:
    """A seeded random subset of ``size`` examples (all when null or larger), ordered by text
    length so that batches need little padding."""
    chosen = list(examples)
    if size is not None and size < len(chosen):
        generator = torch.Generator().manual_seed(seed)
        chosen = [chosen[i] for i in torch.randperm(len(chosen), generator=generator)[:size]]
    return sorted(chosen, key=lambda example: sum(len(example[f]) for f in task.text_fields))


def labels_of(dataset: TokenizedDataset, task: TaskSpec) -> Tensor:
    """The dataset's labels as a tensor: class ids, or float scores for regression."""
    labels = [feature["labels"] for feature in dataset.features]
    return torch.tensor(labels, dtype=torch.float32 if task.is_regression else torch.long)
