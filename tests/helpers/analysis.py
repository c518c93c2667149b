"""Settings that make an analysis of a tiny model take seconds: few tokens, points and clusters;
a checkpoint's model as analyze.py loads it."""

from __future__ import annotations

from pathlib import Path

from isotune.model.classifier import GLUEClassifier, model_from_checkpoint
from isotune.record.kept_checkpoint import read_kept_checkpoint

SMALL = [
    "tokens.max_tokens=300",
    "local.max_points=200",
    "local.n_clusters=4",
    "enhance.n_clusters=3",
    "enhance.abtt_components=2",
    "enhance.cluster_components=1",
]


def analyzed_model(ckpt_path: str | Path) -> GLUEClassifier:
    """The fine-tuned model of ``ckpt_path`` as analyze.py loads it: read by the kept-model
    loader, built by the model wing."""
    kept = read_kept_checkpoint(ckpt_path, "analyze.py")
    return model_from_checkpoint(kept.checkpoint, kept.file)
