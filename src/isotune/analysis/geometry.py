"""An encoder's embedding space layer by layer, and what its local structure encodes.

The pieces of Rajaee & Pilehvar's (Findings of EMNLP 2021) comparison of a pre-trained encoder
with its fine-tuned self: a seeded, typed token sample (:func:`sample_tokens`); every layer's
token and sentence vectors and the sentence vector around the norm in one no-grad pass
(:func:`collect_layer_vectors`, the views the isotropy callback measures); token frequency
(:func:`token_counts`, :func:`frequency_buckets`); and how well clusters and a linear probe
recover a labelling (:func:`separability`, :func:`probe_predictions`). How the analysis uses
them: ``docs/analysis.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import StratifiedKFold, cross_val_score
from threadpoolctl import threadpool_limits
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from isotune.isotropy.enhance import cluster_labels
from isotune.model.classifier import GLUEClassifier
from isotune.model.sentence_views import SentenceViews, collect_views, layer_sentence_vectors
from isotune.tracking.metric_keys import POST_NORM, PRE_NORM

TOKEN_TYPES = ("punctuation", "stop_word", "sub_word", "other")
PROBE_MAX_ITER = 2000  # lbfgs iterations: raw (unscaled) embeddings converge more slowly


def token_type(word: str, continues_word: bool) -> int:
    """Index in TOKEN_TYPES of a token: ``sub_word`` if it continues a word (WordPiece ``##``
    pieces, BPE pieces that do not start a word), else by its word: ``punctuation`` (no letter or
    digit), ``stop_word`` (scikit-learn's English list, case-insensitive) or ``other``."""
    if continues_word:
        return TOKEN_TYPES.index("sub_word")
    if not any(character.isalnum() for character in word):
        return TOKEN_TYPES.index("punctuation")
    if word.lower() in ENGLISH_STOP_WORDS:
        return TOKEN_TYPES.index("stop_word")
    return TOKEN_TYPES.index("other")


@dataclass(frozen=True)
class TokenSample:
    """Token positions (sorted by example, then position) and what they hold."""

    example: Tensor  # (n,) index of the example
    position: Tensor  # (n,) position in the example's input_ids
    token_id: Tensor  # (n,)
    token_type: Tensor  # (n,) index into TOKEN_TYPES

    def __len__(self) -> int:
        return len(self.example)


def sample_tokens(
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Mapping],
    text_fields: Sequence[str],
    max_length: int,
    max_tokens: int,
    seed: int = 0,
) -> TokenSample:
    """A seeded sample of at most ``max_tokens`` non-special tokens of ``examples``, tokenized
    exactly as :class:`~isotune.data.TokenizedDataset` does, so the positions index its
    ``input_ids``; the fast tokenizer's word ids tell special tokens and sub-words apart, for any
    tokenizer family."""
    texts = [[example[name] for example in examples] for name in text_fields]
    encoding = tokenizer(*texts, truncation=True, max_length=max_length)
    rows = []
    for index, token_ids in enumerate(encoding["input_ids"]):
        previous = None
        sequences = encoding.sequence_ids(index)
        for position, word in enumerate(encoding.word_ids(index)):
            if word is None:  # special token
                previous = None
                continue
            sequence = sequences[position]
            continues = previous == (sequence, word)
            span = encoding.word_to_chars(index, word, sequence_index=sequence)
            text = texts[sequence][index][span.start : span.end]
            rows.append((index, position, token_ids[position], token_type(text, continues)))
            previous = (sequence, word)
    table = torch.tensor(rows, dtype=torch.long).reshape(-1, 4)
    if len(table) > max_tokens:
        generator = torch.Generator().manual_seed(seed)
        table = table[torch.randperm(len(table), generator=generator)[:max_tokens].sort().values]
    return TokenSample(*table.T.contiguous())


@dataclass(frozen=True)
class LayerVectors:
    """One model's vectors of a set of examples (layer 0 = the embeddings)."""

    tokens: list[Tensor]  # per layer: the sampled tokens' vectors (empty without a sample)
    sentences: list[Tensor]  # per layer: the model's pooling of it (pooler: that layer's [CLS])
    pre_norm: Tensor  # the model's sentence vector before the norm (pooler: the pooler output)
    post_norm: Tensor  # the same after the norm: what the head sees

    @property
    def num_layers(self) -> int:
        return len(self.sentences)


def collect_layer_vectors(
    module: GLUEClassifier, batches: Iterable[Mapping[str, Tensor]], sample: TokenSample | None
) -> LayerVectors:
    """Every layer's token and sentence vectors for consecutive batches of examples, which
    ``batches`` must yield in order, as ``sample`` indexes them; in eval mode, returned as float32
    on the CPU."""

    def per_layer(
        batch: Mapping[str, Tensor], views: SentenceViews, start: int
    ) -> dict[str, Tensor]:
        mask = batch["attention_mask"]
        vectors = {}
        if sample is not None:
            low, high = torch.searchsorted(sample.example, torch.tensor([start, start + len(mask)]))
            rows = (sample.example[low:high] - start).to(module.device)
            columns = sample.position[low:high].to(module.device)
        for layer, hidden in enumerate(views.hidden_states):
            vectors[f"layer{layer}_sentence"] = layer_sentence_vectors(module, hidden, mask)
            if sample is not None:
                vectors[f"layer{layer}_tokens"] = hidden[rows, columns]
        return vectors

    collected = collect_views(module, batches, hidden_states=True, extra=per_layer)
    layers = range(sum(name.endswith("_sentence") for name in collected))
    token_views = [f"layer{layer}_tokens" for layer in layers] if sample is not None else []
    return LayerVectors(
        tokens=[collected[name] for name in token_views],
        sentences=[collected[f"layer{layer}_sentence"] for layer in layers],
        pre_norm=collected[PRE_NORM],
        post_norm=collected[POST_NORM],
    )


def token_counts(token_ids: Iterable[Sequence[int]], vocab_size: int) -> Tensor:
    """How often each token id occurs in some tokenized text (e.g. the training split)."""
    flat = [torch.as_tensor(ids, dtype=torch.long) for ids in token_ids]
    return torch.bincount(torch.cat(flat), minlength=vocab_size)


def frequency_buckets(counts: Tensor, n_buckets: int) -> Tensor:
    """Bucket of each token by its frequency ``counts``: 0 = rarest, at most ``n_buckets - 1``. The
    edges are quantiles of ``counts`` itself, so the buckets hold about equally many tokens (a
    chance level of 1 / n_buckets); a count equal to an edge goes below it, and equal counts share a
    bucket, so ties can leave fewer buckets."""
    values = counts.double()
    levels = torch.linspace(0, 1, n_buckets + 1, dtype=torch.float64)[1:-1]
    edges = torch.quantile(values, levels).unique()
    return torch.bucketize(values, edges)


def _linear_probe(regression: bool, seed: int) -> BaseEstimator:
    """Ridge regression for a score, else logistic regression. Features are used as they are (no
    standardisation), so the probe sees the geometry that the measures describe."""
    if regression:
        return Ridge(alpha=1.0)
    return LogisticRegression(max_iter=PROBE_MAX_ITER, random_state=seed)


def probe_predictions(
    train_X: Tensor, train_y: Tensor, test_X: Tensor, regression: bool, seed: int = 0
) -> Tensor:
    """Predictions on ``test_X`` of a linear probe fitted on (``train_X``, ``train_y``): class ids,
    or scores when ``regression``."""
    probe = _linear_probe(regression, seed)
    with threadpool_limits(1, user_api="blas"):  # small problems: extra BLAS threads only spin
        probe.fit(train_X.double().numpy(), train_y.numpy())
        predicted = probe.predict(test_X.double().numpy())
    return torch.as_tensor(predicted, dtype=torch.float32 if regression else torch.long)


def cluster_purity(X: Tensor, labels: Tensor, n_clusters: int, seed: int = 0) -> float:
    """Share of points whose label is the most common one of their k-means cluster."""
    clusters = cluster_labels(X, min(n_clusters, len(X)), seed)
    n_labels = int(labels.max()) + 1
    table = torch.zeros(int(clusters.max()) + 1, n_labels, dtype=torch.long)
    table.index_put_((clusters.cpu(), labels.cpu()), torch.ones_like(labels.cpu()), accumulate=True)
    return table.amax(dim=1).sum().item() / len(labels)


def probe_accuracy(X: Tensor, labels: Tensor, folds: int = 3, seed: int = 0) -> float:
    """Cross-validated accuracy of a logistic-regression probe predicting ``labels`` from ``X``;
    labels with fewer than ``folds`` points cannot be stratified and are left out (NaN when fewer
    than two remain)."""
    values, sizes = labels.unique(return_counts=True)
    frequent = values[sizes >= folds]
    if len(frequent) < 2:
        return float("nan")
    kept = torch.isin(labels, frequent)
    splits = StratifiedKFold(folds, shuffle=True, random_state=seed)
    with threadpool_limits(1, user_api="blas"):
        scores = cross_val_score(
            _linear_probe(regression=False, seed=seed),
            X[kept].double().numpy(),
            labels[kept].numpy(),
            cv=splits,
        )
    return float(np.mean(scores))


def separability(
    X: Tensor, labels: Tensor, n_clusters: int, folds: int = 3, seed: int = 0
) -> dict[str, float]:
    """How strongly ``labels`` structure the space ``X``: k-means cluster purity, cross-validated
    probe accuracy, and the share of the most common label (the chance level of both)."""
    return {
        "purity": cluster_purity(X, labels, n_clusters, seed),
        "probe_accuracy": probe_accuracy(X, labels, folds, seed),
        "majority": labels.bincount().max().item() / len(labels),
        "n_classes": float(len(labels.unique())),
    }
