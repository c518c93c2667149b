"""How fine-tuning changed the geometry of an encoder: one checkpoint against its pre-trained self.

Tests the statements T1-T5 (``docs/analysis.md``) of Rajaee & Pilehvar, "How Does
Fine-tuning Affect the Geometry of Embedding Space", Findings of EMNLP 2021) on one fine-tuned
checkpoint. ``analyze.py`` is only the Hydra entry point; everything an analysis does is here, top
to bottom:

1. load the checkpoint and rebuild its pre-trained twin (same task, model and pooling, the encoder
   as downloaded);
2. collect, on a seeded subset of the dev split, every layer's token vectors (a fixed sample of
   non-special tokens, the same for both models) and sentence vectors (the model's pooling);
3. measure isotropy per layer (T1, T3), the local structure of the token space by token type and
   training frequency (T2), and the enhancement experiment (T4, T5);
4. write tables (CSV + Markdown), figures, ``report.md`` and ``analysis.json``, and log them to
   the configured loggers (W&B: tables, images and the report).
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import torch
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import Tensor
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from isotune.analysis.geometry import (
    TOKEN_TYPES,
    LayerVectors,
    collect_layer_vectors,
    frequency_buckets,
    probe_predictions,
    sample_tokens,
    separability,
    token_counts,
)
from isotune.data import Example, TokenizedDataset, check_max_length, load_split
from isotune.encoders import load_tokenizer
from isotune.enhance import (
    all_but_the_top,
    cluster_based,
    cluster_labels,
    cluster_zero_mean,
    zero_mean,
)
from isotune.errors import IsotuneError
from isotune.instantiate import instantiate_all
from isotune.isotropy import measure_all, spectrum
from isotune.metrics import build_metrics, compute_scores, predictions
from isotune.module import GLUEClassifier
from isotune.reporting import markdown_table
from isotune.tasks import TaskSpec

log = logging.getLogger(__name__)

MODELS = ("pretrained", "finetuned")
MODEL_COLOURS = {"pretrained": "tab:blue", "finetuned": "tab:red"}
MEASURES = ("iw", "log_iw", "avg_cosine", "isoscore", "n_dominant", "effective_rank")
MEASURE_TITLES = {
    "iw": "I(W)",
    "log_iw": "log I(W)",
    "avg_cosine": "average cosine",
    "isoscore": "IsoScore",
    "n_dominant": "dominant directions",
    "effective_rank": "effective rank",
}
PROPERTIES = ("token_type", "frequency")
SEPARABILITY = ("purity", "probe_accuracy")
METHODS = ("none", "zero_mean", "cluster_zero_mean", "all_but_the_top", "cluster_based")
SETTINGS = {
    "finetuned_head": "fine-tuned classifier (its own head) on its transformed classifier input",
    "pretrained_probe": "linear probe on the pre-trained sentence vectors",
    "finetuned_probe": "linear probe retrained on the fine-tuned classifier input",
}
FIGURES = {
    "isotropy_by_layer": "Isotropy per layer, pre-trained vs fine-tuned (T1, T3)",
    "spectrum": "Last-layer covariance spectrum (T3)",
    "local_structure": "Local structure of the token space per layer (T2)",
    "enhancement": "Isotropy enhancement: isotropy and task metric (T4, T5)",
}
TABLES = ("isotropy_by_layer", "local_structure", "enhancement")


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

    finetuned = load_checkpoint(cfg.ckpt_path)
    hparams = finetuned.hparams
    task = finetuned.task
    with open_dict(cfg):  # what was analysed, for loggers (and their run names)
        cfg.task, cfg.model, cfg.norm = hparams["task"], hparams["model"], hparams["norm"]
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

    pooling = hparams["model"]["pooling"]
    tables = {
        "isotropy_by_layer": isotropy_by_layer(
            dev_vectors, pooling, cfg.isotropy.dominant_factor, cfg.seed
        )
    }
    lap("isotropy")
    tables["local_structure"] = local_structure(dev_vectors, token_labels, cfg.local, cfg.seed)
    lap("local_structure")
    tables["enhancement"] = enhancement_experiment(
        finetuned,
        dev_vectors,
        train_vectors,
        dev_labels=labels_of(dev_set, task),
        train_labels=labels_of(train_set, task),
        settings=cfg.enhance,
        dominant_factor=cfg.isotropy.dominant_factor,
        seed=cfg.seed,
    )
    lap("enhancement")

    num_layers = dev_vectors["finetuned"].num_layers
    sentence_view = "pooler" if pooling == "pooler" else "sentence"
    verdicts = judge(tables, task, sentence_view, num_layers - 1, cfg.verdict)
    checkpoint_dev = finetuned.history[-1] if finetuned.history else None
    summary = {
        "checkpoint": str(Path(cfg.ckpt_path).resolve()),
        "task": task.name,
        "model": hparams["model"]["name"],
        "pretrained": hparams["model"]["name_or_path"],
        "pooling": pooling,
        "norm": hparams["norm"]["name"],
        "num_layers": num_layers,
        "hidden_size": dev_vectors["finetuned"].pooled.shape[1],
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
        "finetuned_dev": metric_values(tables["enhancement"], "finetuned_head", "none"),
        "verdicts": {verdict.statement: asdict(verdict) for verdict in verdicts},
        "seconds": seconds,
    }
    figures = draw_figures(tables, dev_vectors, sentence_view, task, cfg, output_dir)
    write_tables(tables, task, output_dir)
    lap("outputs")
    seconds["total"] = round(sum(seconds.values()), 2)
    report = output_dir / "report.md"
    report.write_text(report_markdown(summary, tables, verdicts, task, cfg))
    (output_dir / "analysis.json").write_text(json.dumps(summary, indent=2) + "\n")
    log_to_loggers(cfg, summary, tables, figures, report)
    log.info("Analysis written to %s (%.0fs)", output_dir, summary["seconds"]["total"])
    return summary


# -- inputs -------------------------------------------------------------------------------------
def load_checkpoint(path: str | None) -> GLUEClassifier:
    """The fine-tuned model of a ``train.py`` checkpoint, on the CPU."""
    if path is None:
        raise IsotuneError(
            "No checkpoint to analyse. Fix: python analyze.py "
            "ckpt_path=logs/runs/<run>/checkpoints/best.ckpt (or last.ckpt) of a train.py run."
        )
    file = Path(path).expanduser()
    if not file.is_file():
        raise IsotuneError(
            f"ckpt_path={path} is not a file. Fix: point it at checkpoints/best.ckpt or "
            "checkpoints/last.ckpt inside a run folder written by train.py (logs/runs/...)."
        )
    try:
        return GLUEClassifier.load_from_checkpoint(file, map_location="cpu")
    except IsotuneError:
        raise  # e.g. the pre-trained encoder it names is not available
    except (
        OSError,
        RuntimeError,
        EOFError,
        pickle.UnpicklingError,
        KeyError,
        TypeError,
        ValueError,
    ) as error:
        reason = str(error).strip().split(". ")[0][:200]  # torch's messages run on for lines
        raise IsotuneError(
            f"Cannot read {file} as a checkpoint written by train.py "
            f"({type(error).__name__}: {reason}). Is it complete, and from this project?"
        ) from error


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
    return int(OmegaConf.load(run_config).data.max_length)


def subset(examples: Sequence[Example], size: int | None, seed: int, task: TaskSpec) -> list:
    """A seeded random subset of ``size`` examples (all when null or larger), ordered by text
    length so that batches need little padding."""
    chosen = list(examples)
    if size is not None and size < len(chosen):
        generator = torch.Generator().manual_seed(seed)
        chosen = [chosen[i] for i in torch.randperm(len(chosen), generator=generator)[:size]]
    return sorted(chosen, key=lambda example: sum(len(example[f]) for f in task.text_fields))


def labels_of(dataset: TokenizedDataset, task: TaskSpec) -> Tensor:
    labels = [feature["labels"] for feature in dataset.features]
    return torch.tensor(labels, dtype=torch.float32 if task.is_regression else torch.long)


def task_scores(task: TaskSpec, predicted: Tensor, labels: Tensor) -> dict[str, float]:
    """The task's dev metrics of predictions (class ids, or scores for regression)."""
    metrics = build_metrics(task.metrics, task.num_labels)
    metrics.update(predicted, labels)
    return compute_scores(metrics)


# -- measurements -------------------------------------------------------------------------------
def isotropy_by_layer(
    vectors: Mapping[str, LayerVectors], pooling: str, dominant_factor: float, seed: int
) -> pd.DataFrame:
    """Every measure of :func:`~isotune.isotropy.measure_all` per model, view and layer.

    Views: ``tokens`` (the token sample), ``sentence`` (the model's pooling of each layer; for
    ``pooler`` pooling each layer's [CLS] state) and, for ``pooler`` pooling, ``pooler`` (the
    pooler output, last layer only).
    """
    rows = []
    for model, layers in vectors.items():
        views = {"tokens": layers.tokens, "sentence": layers.sentences}
        if pooling == "pooler":
            views["pooler"] = [None] * (layers.num_layers - 1) + [layers.pooled]
        for view, per_layer in views.items():
            for layer, points in enumerate(per_layer):
                if points is None:
                    continue
                measures = measure_all(points, dominant_factor=dominant_factor, seed=seed)
                rows.append(
                    {"model": model, "view": view, "layer": layer, "n": len(points), **measures}
                )
    return pd.DataFrame(rows)


def local_structure(
    vectors: Mapping[str, LayerVectors],
    labels: Mapping[str, Tensor],
    settings: Mapping,
    seed: int,
) -> pd.DataFrame:
    """Separability of each token labelling (type, frequency bucket) per model and layer, on one
    seeded subset of at most ``settings.max_points`` sampled tokens."""
    count = len(next(iter(labels.values())))
    generator = torch.Generator().manual_seed(seed)
    keep = torch.randperm(count, generator=generator)[: settings.max_points].sort().values
    rows = []
    for model, layers in vectors.items():
        for layer, points in enumerate(layers.tokens):
            for name, values in labels.items():
                scores = separability(
                    points[keep], values[keep], settings.n_clusters, settings.folds, seed
                )
                rows.append({"model": model, "layer": layer, "property": name, **scores})
    return pd.DataFrame(rows)


def enhancements(settings: Mapping, seed: int) -> dict[str, Callable[[Tensor], Tensor]]:
    """The methods of :mod:`isotune.enhance` with the configured settings, ``none`` first."""

    def clusters(X: Tensor) -> Tensor:
        return cluster_labels(X, min(settings.n_clusters, len(X)), seed)

    return {
        "none": lambda X: X,
        "zero_mean": zero_mean,
        "cluster_zero_mean": lambda X: cluster_zero_mean(X, clusters(X)),
        "all_but_the_top": lambda X: all_but_the_top(X, settings.abtt_components),
        "cluster_based": lambda X: cluster_based(X, clusters(X), settings.cluster_components),
    }


@torch.no_grad()
def enhancement_experiment(
    finetuned: GLUEClassifier,
    dev_vectors: Mapping[str, LayerVectors],
    train_vectors: Mapping[str, LayerVectors],
    dev_labels: Tensor,
    train_labels: Tensor,
    settings: Mapping,
    dominant_factor: float,
    seed: int,
) -> pd.DataFrame:
    """Isotropy and task metric after each enhancement method, in three settings.

    ``finetuned_head``: the methods transform the fine-tuned classifier input of the dev set, and
    the fine-tuned head (eval mode) classifies the result. ``pretrained_probe`` /
    ``finetuned_probe``: a linear probe is trained on the (transformed) vectors of the training
    subset and scored on those of the dev set; the methods are unsupervised and fitted on both
    splits together, so both get the same transformation. Isotropy is measured on the dev vectors.
    """
    task = finetuned.task
    methods = enhancements(settings, seed)
    rows = []

    def row(setting: str, method: str, points: Tensor, predicted: Tensor) -> None:
        measures = measure_all(points, dominant_factor=dominant_factor, seed=seed)
        scores = task_scores(task, predicted, dev_labels)
        rows.append(
            {
                "setting": setting,
                "method": method,
                **{name: measures[name] for name in MEASURES},
                **scores,
            }
        )

    inputs = dev_vectors["finetuned"].classifier_input
    for method, transform in methods.items():
        points = transform(inputs)
        logits = finetuned.head(finetuned.dropout(points.to(finetuned.device))).cpu()
        row("finetuned_head", method, points, predictions(logits))
    views = {"pretrained": "pooled", "finetuned": "classifier_input"}
    for model, view in views.items():
        train, dev = getattr(train_vectors[model], view), getattr(dev_vectors[model], view)
        for method, transform in methods.items():
            both = transform(torch.cat([train, dev]))
            train_points, dev_points = both[: len(train)], both[len(train) :]
            predicted = probe_predictions(
                train_points, train_labels, dev_points, task.is_regression, seed
            )
            row(f"{model}_probe", method, dev_points, predicted)
    return pd.DataFrame(rows)


def metric_values(table: pd.DataFrame, setting: str, method: str) -> dict[str, float]:
    """The task metrics of one row of the enhancement table."""
    found = table.set_index(["setting", "method"]).loc[(setting, method)]
    return {name: float(value) for name, value in found.drop(list(MEASURES)).items()}


# -- verdicts -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """What this analysis says about one statement of the paper."""

    statement: str
    claim: str
    outcome: str  # supported | mixed | not supported
    evidence: str


def judge(
    tables: Mapping[str, pd.DataFrame],
    task: TaskSpec,
    sentence_view: str,
    last_layer: int,
    thresholds: Mapping,
) -> list[Verdict]:
    """T1-T5 against the numbers, at the last layer and on the sentence vector the head uses.

    Rules: T1 holds unless I(W) rose for both tokens and sentences; T2 when the purity or probe
    accuracy of a token labelling moved by at least ``thresholds.local_change``; T3 when the number
    of dominant directions grew (both levels: supported, one: mixed); T4 / T5 per method: I(W)
    rose and the metric fell by at most / more than ``thresholds.metric_tolerance`` (every method:
    supported, some: mixed).
    """
    layers = tables["isotropy_by_layer"]
    last = layers[layers.layer == last_layer].set_index(["model", "view"])
    views = ("tokens", sentence_view)

    def compare(measure: str, view: str) -> tuple[float, float]:
        return last.loc[("pretrained", view), measure], last.loc[("finetuned", view), measure]

    iw = {view: compare("log_iw", view) for view in views}
    rose = [fine > pre for pre, fine in iw.values()]
    t1 = Verdict(
        "T1",
        "fine-tuning does not necessarily make the space more isotropic",
        "not supported" if all(rose) else "supported",
        "; ".join(f"{view}: log I(W) {pre:.4g} → {fine:.4g}" for view, (pre, fine) in iw.items())
        + (" (rose at both levels)" if all(rose) else " (did not rise everywhere)"),
    )

    local = tables["local_structure"]
    local = local[local.layer == last_layer].set_index(["model", "property"])
    changes, evidence = [], []
    for name in PROPERTIES:
        for score in SEPARABILITY:
            pre, fine = (local.loc[(model, name), score] for model in MODELS)
            changes.append(abs(fine - pre))
            evidence.append(f"{name} {score} {pre:.3f} → {fine:.3f}")
    t2 = Verdict(
        "T2",
        "the local structure (token type, frequency) changes massively",
        "supported" if max(changes, default=0.0) >= thresholds.local_change else "not supported",
        "; ".join(evidence) + f" (threshold: a change of {thresholds.local_change})",
    )

    dominant = {view: compare("n_dominant", view) for view in views}
    grew = [fine > pre for pre, fine in dominant.values()]
    t3 = Verdict(
        "T3",
        "the number of dominant directions grows after fine-tuning",
        _outcome(grew),
        "; ".join(f"{view}: {pre:.0f} → {fine:.0f}" for view, (pre, fine) in dominant.items()),
    )

    enhanced = tables["enhancement"].set_index(["setting", "method"])
    metric, tolerance = task.primary_metric, thresholds.metric_tolerance

    def methods_verdict(setting: str, metric_ok: Callable[[float], bool]) -> tuple[str, str]:
        base = enhanced.loc[(setting, "none")]
        held, evidence = [], []
        for method in METHODS[1:]:
            after = enhanced.loc[(setting, method)]
            change = after[metric] - base[metric]
            held.append(after.log_iw > base.log_iw and metric_ok(change))
            evidence.append(
                f"{method}: log I(W) {base.log_iw:.4g} → {after.log_iw:.4g}, "
                f"{metric} {base[metric]:.3f} → {after[metric]:.3f}"
            )
        return _outcome(held), "; ".join(evidence)

    t4 = Verdict(
        "T4",
        "on pre-trained vectors, enhancement raises isotropy and does not hurt a probe",
        *methods_verdict("pretrained_probe", lambda change: change >= -tolerance),
    )
    t5 = Verdict(
        "T5",
        "on fine-tuned vectors, enhancement raises isotropy but hurts the task",
        *methods_verdict("finetuned_head", lambda change: change < -tolerance),
    )
    return [t1, t2, t3, t4, t5]


def _outcome(held: Sequence[bool]) -> str:
    if all(held):
        return "supported"
    return "mixed" if any(held) else "not supported"


# -- outputs ------------------------------------------------------------------------------------
def draw_figures(
    tables: Mapping[str, pd.DataFrame],
    vectors: Mapping[str, LayerVectors],
    sentence_view: str,
    task: TaskSpec,
    cfg: DictConfig,
    output_dir: Path,
) -> dict[str, Path]:
    """Every figure of the report as ``<output_dir>/<name>.png``."""
    figures = {
        "isotropy_by_layer": isotropy_figure(tables["isotropy_by_layer"]),
        "spectrum": spectrum_figure(vectors, sentence_view, cfg.isotropy.dominant_factor),
        "local_structure": local_structure_figure(tables["local_structure"]),
        "enhancement": enhancement_figure(tables["enhancement"], task.primary_metric),
    }
    paths = {}
    for name, figure in figures.items():
        paths[name] = output_dir / f"{name}.png"
        figure.savefig(paths[name], dpi=80)
        plt.close(figure)
    return paths


def isotropy_figure(table: pd.DataFrame) -> plt.Figure:
    """Line plots over layers: one row per level (tokens, sentences), one column per measure."""
    measures = [name for name in MEASURES if name != "iw"]
    figure, axes = plt.subplots(2, len(measures), figsize=(4 * len(measures), 7), squeeze=False)
    for row, view in enumerate(("tokens", "sentence")):
        for axis, measure in zip(axes[row], measures, strict=True):
            for model in MODELS:
                lines = table[(table.model == model) & (table.view == view)]
                axis.plot(
                    lines.layer, lines[measure], "o-", color=MODEL_COLOURS[model], label=model
                )
                pooler = table[(table.model == model) & (table.view == "pooler")]
                if len(pooler):
                    axis.plot(
                        pooler.layer,
                        pooler[measure],
                        "*",
                        markersize=12,
                        color=MODEL_COLOURS[model],
                        label=f"{model} pooler output",
                    )
            axis.set(title=f"{view}: {MEASURE_TITLES[measure]}", xlabel="layer (0 = embeddings)")
    axes[0][0].legend()
    axes[1][0].legend()
    figure.tight_layout()
    return figure


def spectrum_figure(
    vectors: Mapping[str, LayerVectors], sentence_view: str, factor: float
) -> plt.Figure:
    """Explained-variance ratios of the last layer's principal components, both models; the
    dashed line is the dominance threshold (factor x the mean eigenvalue)."""
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for axis, view in zip(axes, ("tokens", sentence_view), strict=True):
        for model in MODELS:
            layers = vectors[model]
            points = {
                "tokens": layers.tokens[-1],
                "sentence": layers.sentences[-1],
                "pooler": layers.pooled,
            }[view]
            ratios = spectrum(points, factor).explained_variance_ratio
            dimensions = len(ratios)
            ratios = ratios[: len(points) - 1]  # the rest is zero: N points span N - 1 directions
            ranks = torch.arange(1, len(ratios) + 1)
            axis.loglog(ranks, ratios, color=MODEL_COLOURS[model], label=model)
            axis.axhline(factor / dimensions, color="grey", linestyle="--", linewidth=1)
        axis.set(
            title=f"last layer, {view}: explained variance",
            xlabel="principal component",
            ylabel="variance ratio",
        )
        axis.legend()
    figure.tight_layout()
    return figure


def local_structure_figure(table: pd.DataFrame) -> plt.Figure:
    """Purity and probe accuracy per layer for each token labelling; dashed: the majority share."""
    figure, axes = plt.subplots(len(SEPARABILITY), len(PROPERTIES), figsize=(11, 7), squeeze=False)
    for column, name in enumerate(PROPERTIES):
        for row, score in enumerate(SEPARABILITY):
            axis = axes[row][column]
            for model in MODELS:
                lines = table[(table.model == model) & (table.property == name)]
                axis.plot(lines.layer, lines[score], "o-", color=MODEL_COLOURS[model], label=model)
            chance = table[table.property == name].majority
            axis.axhline(chance.iloc[0], color="grey", linestyle="--", label="majority share")
            axis.set(title=f"{name}: {score}", xlabel="layer (0 = embeddings)")
    axes[0][0].legend()
    figure.tight_layout()
    return figure


def enhancement_figure(table: pd.DataFrame, metric: str) -> plt.Figure:
    """Bars per method: log I(W), IsoScore and the task metric, in each setting."""
    rows = ("log_iw", "isoscore", metric)
    figure, axes = plt.subplots(
        len(rows), len(SETTINGS), figsize=(5 * len(SETTINGS), 9), squeeze=False
    )
    for column, setting in enumerate(SETTINGS):
        bars = table[table.setting == setting]
        for row, measure in enumerate(rows):
            axis = axes[row][column]
            axis.bar(range(len(bars)), bars[measure], color="tab:purple")
            axis.set_xticks(range(len(bars)), bars.method, rotation=30, ha="right")
            axis.set(title=f"{setting}: {MEASURE_TITLES.get(measure, measure)}")
    figure.tight_layout()
    return figure


def write_tables(tables: Mapping[str, pd.DataFrame], task: TaskSpec, output_dir: Path) -> None:
    """Each table as ``<name>.csv`` (every column) and ``<name>.md`` (the main ones)."""
    for name, table in tables.items():
        table.to_csv(output_dir / f"{name}.csv", index=False)
        (output_dir / f"{name}.md").write_text(table_markdown(name, table, task) + "\n")


def table_markdown(name: str, table: pd.DataFrame, task: TaskSpec) -> str:
    keys = {
        "isotropy_by_layer": ["model", "view", "layer", "n", *MEASURES],
        "local_structure": ["model", "layer", "property", *SEPARABILITY, "majority", "n_classes"],
        "enhancement": ["setting", "method", *MEASURES, *task.metrics],
    }[name]
    rows = [[_cell(value) for value in row] for row in table[keys].itertuples(index=False)]
    return markdown_table(keys, rows)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def report_markdown(
    summary: Mapping[str, Any],
    tables: Mapping[str, pd.DataFrame],
    verdicts: Sequence[Verdict],
    task: TaskSpec,
    cfg: DictConfig,
) -> str:
    """``report.md``: what was analysed, the verdict on T1-T5 with its numbers, figures, tables."""
    recorded = summary["checkpoint_dev"]
    recomputed = summary["finetuned_dev"][task.primary_metric]
    metric = task.primary_metric
    recorded_text = (
        f"{recorded[metric]:.4f} at epoch {recorded['epoch']}" if recorded else "none recorded"
    )
    types = ", ".join(f"{name} {count}" for name, count in summary["token_types"].items())
    lines = [
        f"# Fine-tuning and the geometry of the embedding space: {task.name}, "
        f"{summary['model']} ({summary['norm']})",
        "",
        f"- Checkpoint: `{summary['checkpoint']}`; pre-trained encoder: `{summary['pretrained']}` "
        f"({summary['num_layers'] - 1} layers + embeddings, hidden size {summary['hidden_size']}, "
        f"pooling `{summary['pooling']}`).",
        f"- Dev: {summary['dev_examples']} of {summary['dev_examples_available']} examples "
        f"(seed {cfg.seed}, max length {summary['max_length']}); {summary['tokens']} sampled "
        f"tokens ({types}); linear probes trained on {summary['train_examples']} training "
        f"examples; frequencies counted on {summary['frequency_examples']} training examples.",
        f"- Dev {metric} of the fine-tuned model here: {recomputed:.4f}; recorded in the "
        f"checkpoint: {recorded_text} (equal when all of dev is used and validation was not "
        "limited).",
        f"- Took {summary['seconds']['total']:.0f} s.",
        "",
        "## Statements (Rajaee & Pilehvar 2021)",
        "",
        markdown_table(
            ["", "claim", "here", "numbers"],
            [[v.statement, v.claim, f"**{v.outcome}**", v.evidence] for v in verdicts],
        ),
        "",
        f"Last layer (layer {summary['num_layers'] - 1}); the sentence vector is the one the "
        f"head uses (`{'pooler' if summary['pooling'] == 'pooler' else 'sentence'}` view). "
        "Rules: T1 holds unless I(W) rose at both levels; T2 when a purity or probe accuracy "
        f"moved by at least {cfg.verdict.local_change}; T3 when the dominant directions grew "
        "(at both levels: supported, at one: mixed); T4 / T5 per method when I(W) rose and the "
        f"metric fell by at most / more than {cfg.verdict.metric_tolerance} (all methods: "
        "supported, some: mixed). One run on a dev subset: read the numbers, not only the word.",
        "",
        f"## {FIGURES['isotropy_by_layer']}",
        "",
        "![isotropy by layer](isotropy_by_layer.png)",
        "",
        "![spectrum](spectrum.png)",
        "",
        "`tokens`: the sampled non-special tokens. `sentence`: the model's pooling applied to each "
        "layer (`pooler` pooling: each layer's [CLS] state, the pooler's input; the `pooler` row "
        "is the pooler output of the last layer). I(W) uses the vectors as they are (not "
        f"centred); dominant direction: variance > {cfg.isotropy.dominant_factor} × the mean "
        "eigenvalue (dashed line in the spectrum). With `cls` or `pooler` pooling, layer 0 of "
        "`sentence` is the [CLS] embedding, the same for every example: its variance-based "
        "measures are undefined (nan).",
        "",
        table_markdown("isotropy_by_layer", tables["isotropy_by_layer"], task),
        "",
        f"## {FIGURES['local_structure']}",
        "",
        "![local structure](local_structure.png)",
        "",
        f"Token type: {', '.join(TOKEN_TYPES)} (sub-word: a token that does not start its word). "
        f"Frequency: {cfg.local.frequency_buckets} quantile buckets of the token's count in the "
        f"training text. Purity of {cfg.local.n_clusters} k-means clusters and "
        f"{cfg.local.folds}-fold logistic-regression accuracy on at most "
        f"{cfg.local.max_points} tokens; `majority` is the chance level.",
        "",
        table_markdown("local_structure", tables["local_structure"], task),
        "",
        f"## {FIGURES['enhancement']}",
        "",
        "![enhancement](enhancement.png)",
        "",
        *[f"- `{name}`: {text}" for name, text in SETTINGS.items()],
        "",
        f"All-but-the-top removes {cfg.enhance.abtt_components} components; the clustered "
        f"methods use {cfg.enhance.n_clusters} k-means clusters, cluster-based removes "
        f"{cfg.enhance.cluster_components} components per cluster.",
        "",
        table_markdown("enhancement", tables["enhancement"], task),
        "",
    ]
    return "\n".join(lines)


def log_to_loggers(
    cfg: DictConfig,
    summary: Mapping[str, Any],
    tables: Mapping[str, pd.DataFrame],
    figures: Mapping[str, Path],
    report: Path,
) -> None:
    """Log per-layer measures (step = layer), the enhancement results and, to W&B, the tables,
    figures, report and verdicts; then close the loggers."""
    loggers = instantiate_all(cfg.get("logger"))
    if not loggers:
        return
    layers, local = tables["isotropy_by_layer"], tables["local_structure"]
    per_layer: dict[int, dict[str, float]] = {}
    for row in layers.itertuples(index=False):
        values = per_layer.setdefault(row.layer, {})
        values.update({f"{row.model}/{row.view}/{m}": getattr(row, m) for m in MEASURES})
    for row in local.itertuples(index=False):
        values = per_layer.setdefault(row.layer, {})
        values.update(
            {f"local/{row.model}/{row.property}/{s}": getattr(row, s) for s in SEPARABILITY}
        )
    last_layer = max(per_layer)
    numeric = tables["enhancement"].select_dtypes("number").columns
    enhancement = {
        f"enhance/{row['setting']}/{row['method']}/{column}": row[column]
        for row in tables["enhancement"].to_dict("records")
        for column in numeric
    }
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
        for layer, values in sorted(per_layer.items()):
            logger.log_metrics(values, step=layer)
        logger.log_metrics(enhancement, step=last_layer)
        if isinstance(logger, WandbLogger):
            for name in TABLES:
                logger.log_table(key=f"table/{name}", dataframe=tables[name])
            for name, path in figures.items():
                logger.log_image(key=f"figure/{name}", images=[str(path)], caption=[FIGURES[name]])
            run = logger.experiment
            run.save(str(report), base_path=str(report.parent), policy="now")
            run.summary.update(
                {f"verdict/{name}": v["outcome"] for name, v in summary["verdicts"].items()}
            )
            run.finish()
        else:
            logger.finalize("success")
