"""Directions that fine-tuning made dominant: in the vectors, and in the weight matrices.

Shuttleworth et al. ("LoRA vs Full Fine-tuning: An Illusion of Equivalence", 2024) find that
LoRA, unlike full fine-tuning, gives weight matrices new high-ranking singular vectors, which they
call intruder dimensions. Two measures follow them, with the same ``k`` and ``threshold``:

- :func:`new_dominant_directions`, the representation-space analogue: the top ``k`` principal
  directions (right singular vectors of the centred ``n x d`` vectors) of the fine-tuned model,
  each compared with the top ``k`` of the pre-trained model on the same inputs; a direction is
  new when ``max_i |cos(v_j, u_i)| < threshold`` (absolute: a singular vector's sign is
  arbitrary). It counts directions that became dominant, not only directions never seen: one that
  was the pre-trained 50th counts as new when it is now among the top ``k``;
- :func:`intruder_dimensions`, their measure on the weight matrices: the top ``k`` left singular
  vectors (output directions) of each fine-tuned linear layer (a LoRA layer as
  ``W + (alpha / r) B A``), each compared with every left singular vector of the pre-trained
  matrix. Which layers (``matrices``): ``adapted``, the released ``find_intruder_dimensions.py``'s
  set, the modules LoRA adapts (a LoRA checkpoint's own targets; for full fine-tuning the
  family's default targets, so that full and LoRA compare on the same matrices); or
  ``all``, every linear layer of the transformer blocks.

:func:`changed_directions` applies both to an analysis's pre-trained and fine-tuned models: new
directions of the last layer's token and sentence vectors, intruders of every block's matrices.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn
from transformers.pytorch_utils import Conv1D

from isotune.analysis.experiments import Inputs
from isotune.errors import IsotuneError
from isotune.model.adaptation import lora_targets
from isotune.model.classifier import GLUEClassifier

VIEWS = ("tokens", "sentence")  # the last layer's vectors of LayerVectors: .tokens, .sentences
MATRICES = ("adapted", "all")  # the weight matrices intruder dimensions are counted in


def _max_abs_cosines(directions: Tensor, reference: Tensor) -> Tensor:
    """For each row of ``directions``, its largest |cosine| to any row of ``reference`` (both
    orthonormal sets, so the cosine is the dot product)."""
    return (directions @ reference.T).abs().amax(dim=1)


def _principal_directions(X: Tensor) -> tuple[Tensor, Tensor]:
    """Principal directions of the rows of ``X`` (as rows, largest variance first) and the share
    of the total variance along each."""
    centred = X.double() - X.double().mean(dim=0)
    _, singular, directions = torch.linalg.svd(centred, full_matrices=False)
    variance = singular.square()
    return directions, variance / variance.sum()


def new_dominant_directions(
    pretrained: Tensor, finetuned: Tensor, k: int, threshold: float
) -> pd.DataFrame:
    """One row per top-``k`` principal direction of ``finetuned`` (``n x d``; the same ``n``
    inputs as ``pretrained``): ``rank`` (1 = largest variance), ``variance_ratio``,
    ``max_abs_cos`` to the pre-trained top ``k``, and ``new`` (``max_abs_cos < threshold``)."""
    finetuned_directions, ratios = _principal_directions(finetuned)
    pretrained_directions, _ = _principal_directions(pretrained)
    top = min(k, len(ratios))
    similarity = _max_abs_cosines(finetuned_directions[:top], pretrained_directions[:k])
    return pd.DataFrame(
        {
            "rank": range(1, top + 1),
            "variance_ratio": ratios[:top].tolist(),
            "max_abs_cos": similarity.tolist(),
            "new": (similarity < threshold).tolist(),
        }
    )


def linear_weights(encoder: nn.Module, names: Collection[str] | None = None) -> dict[str, Tensor]:
    """The weight matrix of each linear layer of the transformer blocks (not the pooler), as it
    acts (out x in; GPT-2's ``Conv1D`` stores in x out): a peft LoRA layer's base weight plus its
    active adapters' update; only ``names`` when given."""
    weights: dict[str, Tensor] = {}
    for name, module in encoder.named_modules():
        if name.startswith("pooler") or any(name.startswith(f"{done}.") for done in weights):
            continue  # the pooler, or inside a LoRA layer already taken whole
        if names is not None and name not in names:
            continue
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            delta = sum(module.get_delta_weight(adapter) for adapter in module.active_adapters)
            weight = module.base_layer.weight.detach() + delta.detach()
            weights[name] = weight.T if isinstance(module.base_layer, Conv1D) else weight
        elif isinstance(module, nn.Linear):
            weights[name] = module.weight.detach()
        elif isinstance(module, Conv1D):
            weights[name] = module.weight.detach().T
    return weights


def intruder_dimensions(
    pretrained: Mapping[str, Tensor], finetuned: Mapping[str, Tensor], k: int, threshold: float
) -> pd.DataFrame:
    """One row per weight matrix (:func:`linear_weights` of both encoders): ``intruders``, how
    many of the fine-tuned matrix's top ``k`` left singular vectors have ``max |cos| <
    threshold`` to every left singular vector of the pre-trained matrix, and the smallest such
    ``min_max_abs_cos``."""
    rows = []
    for name, weight in finetuned.items():
        before = torch.linalg.svd(pretrained[name].double(), full_matrices=False).U
        after = torch.linalg.svd(weight.double(), full_matrices=False).U[:, :k]
        similarity = _max_abs_cosines(after.T, before.T)
        rows.append(
            {
                "matrix": name,
                "intruders": int((similarity < threshold).sum()),
                "min_max_abs_cos": float(similarity.min()),
            }
        )
    return pd.DataFrame(rows, columns=["matrix", "intruders", "min_max_abs_cos"])


def adapted_matrices(model: GLUEClassifier) -> list[str]:
    """The linear layers LoRA adapts in ``model``'s encoder: its own ``adapt.target_modules`` with
    ``adapt=lora``, otherwise the family's default targets (:func:`lora_targets`)."""
    adapt = dict(model.hparams.get("adapt") or {})
    targets = adapt.get("target_modules") if adapt.get("name") == "lora" else None
    return lora_targets(model.encoder, targets)


def intruder_matrices(model: GLUEClassifier, matrices: str) -> list[str] | None:
    """The names of the weight matrices of ``directions.matrices`` in ``model``: those LoRA adapts
    (``adapted``), or None for every linear layer (``all``). Asked before the analysis collects
    anything, so that a family without default targets stops it at once."""
    if matrices not in MATRICES:
        raise IsotuneError(
            f"directions.matrices={matrices!r}: must be one of {list(MATRICES)} (adapted: the "
            "modules LoRA adapts, as the released code counts; all: every linear layer)."
        )
    return adapted_matrices(model) if matrices == "adapted" else None


def changed_directions(
    inputs: Inputs, settings: Mapping, names: Collection[str] | None
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """The ``new_directions`` table (per view of the last layer) and the ``intruder_dimensions``
    table of the ``pretrained`` and ``finetuned`` models (over the weight matrices ``names`` of
    ``directions.matrices``, :func:`intruder_matrices`), and their counts for analysis.json."""
    models, k, threshold = inputs.models, settings.k, settings.threshold
    last = {
        model: {
            "tokens": layers.tokens[-1] if layers.tokens else None,
            "sentence": layers.sentences[-1],
        }
        for model, layers in inputs.dev_vectors.items()
    }
    new = pd.concat(
        [
            new_dominant_directions(
                last["pretrained"][view], last["finetuned"][view], k, threshold
            ).assign(view=view)
            for view in VIEWS
            if last["finetuned"][view] is not None
        ],
        ignore_index=True,
    )
    intruders = intruder_dimensions(
        linear_weights(models["pretrained"].encoder, names),
        linear_weights(models["finetuned"].encoder, names),
        k,
        threshold,
    )
    counts = {
        "new_directions": {
            view: {
                "new": int(rows["new"].sum()),
                "variance_ratio": float(rows.loc[rows["new"], "variance_ratio"].sum()),
            }
            for view, rows in new.groupby("view", sort=False)
        },
        "intruder_dimensions": {
            "total": int(intruders["intruders"].sum()),
            "matrices": len(intruders),
            "matrices_with_intruders": int((intruders["intruders"] > 0).sum()),
            "set": settings.matrices,
        },
    }
    return {"new_directions": new, "intruder_dimensions": intruders}, counts
