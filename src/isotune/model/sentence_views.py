"""The two views of a sentence vector, and the one pass that collects them.

A :class:`~isotune.model.classifier.GLUEClassifier` pools the encoder's output into a sentence
vector and normalises it before dropout and the head. Both sides are measured, under one pair of
names: ``pre_norm`` (the pooled vector) and ``post_norm`` (the norm's output: the classifier's
input). The geometry analysis (``docs/analysis.md``) collects them with :func:`collect_views`; the
isotropy callback (every epoch, ``docs/isotropy.md``) keeps them from validation's forward pass
with hooks on the norm's input and output. Both are the same vectors
(``tests/test_isotropy_callback.py`` checks it bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers.modeling_outputs import BaseModelOutput

from isotune.model.adaptation import eval_mode
from isotune.model.classifier import GLUEClassifier, first_token
from isotune.tracking.metric_keys import POST_NORM, PRE_NORM


@dataclass(frozen=True)
class SentenceViews:
    """One batch's sentence vectors on both sides of the norm (on the module's device, in its
    precision), and every layer's token states when they were asked for."""

    pre_norm: Tensor  # (n, d)
    post_norm: Tensor  # (n, d)
    hidden_states: tuple[Tensor, ...]  # (n, length, d) per layer, 0 = embeddings; () if not asked


def sentence_views(
    module: GLUEClassifier, batch: Mapping[str, Tensor], hidden_states: bool = False
) -> SentenceViews:
    """The views of one batch that is already on the module's device, in the module's mode."""
    output = module.encode(batch, output_hidden_states=hidden_states)
    pre_norm = module.pool(output, batch["attention_mask"])
    layers = tuple(output.hidden_states) if hidden_states else ()
    return SentenceViews(pre_norm, module.norm(pre_norm), layers)


def layer_sentence_vectors(
    module: GLUEClassifier, hidden: Tensor, attention_mask: Tensor
) -> Tensor:
    """The model's pooling applied to one layer's hidden states. ``pooler`` pooling has no
    per-layer equivalent (its dense layer was trained on the last layer only), so it gives each
    layer's [CLS] state, the pooler's input."""
    if module.pooling == "pooler":
        return first_token(hidden, attention_mask)
    return module.pool(BaseModelOutput(last_hidden_state=hidden), attention_mask)


# extra(batch on the device, its views, index of its first example) -> more named vectors
Extra = Callable[[Mapping[str, Tensor], SentenceViews, int], Mapping[str, Tensor]]


@torch.no_grad()
def collect_views(
    module: GLUEClassifier,
    batches: Iterable[Mapping[str, Tensor]],
    hidden_states: bool = False,
    extra: Extra | None = None,
) -> dict[str, Tensor]:
    """``pre_norm`` and ``post_norm`` of every example of ``batches``, in order, as float32 on the
    CPU, plus whatever ``extra`` takes from each batch (e.g. token vectors, from
    ``views.hidden_states`` when ``hidden_states``), concatenated by name the same way. The pass
    runs in eval mode and gives every submodule back its own mode (a frozen encoder stays in eval
    mode while the head trains)."""
    parts: dict[str, list[Tensor]] = {}
    start = 0
    with eval_mode(module):
        for batch in batches:
            batch = {key: value.to(module.device) for key, value in batch.items()}
            views = sentence_views(module, batch, hidden_states)
            named = {PRE_NORM: views.pre_norm, POST_NORM: views.post_norm}
            if extra is not None:
                named.update(extra(batch, views, start))
            for name, vectors in named.items():
                parts.setdefault(name, []).append(vectors.float().cpu())
            start += len(views.pre_norm)
    return {name: torch.cat(chunks) for name, chunks in parts.items()}
