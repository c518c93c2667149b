"""Layer-wise vectors, token types and frequency buckets, and separability, on tiny models and
analytic cases."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf
from transformers import BertTokenizerFast, DataCollatorWithPadding

from isotune.analysis.geometry import (
    TOKEN_TYPES,
    collect_layer_vectors,
    frequency_buckets,
    probe_accuracy,
    probe_predictions,
    sample_tokens,
    separability,
    token_counts,
    token_type,
)
from isotune.data import TokenizedDataset
from isotune.data.tasks import TaskSpec
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import load_tokenizer, wordpiece_tokenizer
from tests.conftest import CONF_DIR

PUNCTUATION, STOP_WORD, SUB_WORD, OTHER = range(len(TOKEN_TYPES))
EXAMPLES = [
    {"sentence1": "The cats sat.", "sentence2": "a dog ran home", "label": 0, "idx": 0},
    {"sentence1": "It was a very good day!", "sentence2": "Cats, dogs.", "label": 1, "idx": 1},
    {"sentence1": "cat", "sentence2": "the mat", "label": 0, "idx": 2},
]


def rte() -> TaskSpec:
    return TaskSpec.from_config(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "task/rte.yaml")))


def plural_splitting_tokenizer() -> BertTokenizerFast:
    """WordPiece with a ``##s`` piece, so plurals are split into a word and a sub-word."""
    words = ["the", "a", "cat", "dog", "##s", "sat", "ran", "home", "mat", "it", "was", "very"]
    return wordpiece_tokenizer([*words, "good", "day", ".", ",", "!"])


def typed_tokens(tokenizer, examples=EXAMPLES, max_tokens=1000) -> list[tuple[str, str]]:
    sample = sample_tokens(tokenizer, examples, ("sentence1", "sentence2"), 128, max_tokens)
    tokens = tokenizer.convert_ids_to_tokens(sample.token_id.tolist())
    kinds = [TOKEN_TYPES[kind] for kind in sample.token_type.tolist()]
    return list(zip(tokens, kinds, strict=True))


def test_token_type_of_words_and_pieces():
    assert token_type("##s", continues_word=True) == SUB_WORD
    assert token_type("ing", continues_word=True) == SUB_WORD
    assert token_type(".", continues_word=False) == PUNCTUATION
    assert token_type("--", continues_word=False) == PUNCTUATION
    assert token_type("The", continues_word=False) == STOP_WORD
    assert token_type("cat", continues_word=False) == OTHER
    assert token_type("2021", continues_word=False) == OTHER


def test_wordpiece_sample_types_every_non_special_token():
    tokenizer = plural_splitting_tokenizer()
    typed = typed_tokens(tokenizer)
    assert typed[:6] == [
        ("the", "stop_word"),
        ("cat", "other"),
        ("##s", "sub_word"),
        ("sat", "other"),
        (".", "punctuation"),
        ("a", "stop_word"),
    ]
    assert ("!", "punctuation") in typed and (",", "punctuation") in typed
    assert not any(token.startswith("[") for token, _ in typed)  # no special token


def test_sample_positions_index_the_tokenized_dataset():
    tokenizer = plural_splitting_tokenizer()
    dataset = TokenizedDataset(EXAMPLES, rte(), tokenizer, max_length=128)
    sample = sample_tokens(tokenizer, EXAMPLES, ("sentence1", "sentence2"), 128, max_tokens=7)
    assert len(sample) == 7
    order = sample.example * 1000 + sample.position
    assert torch.equal(order, order.sort().values)  # sorted by example, then position
    for example, position, token in zip(
        sample.example, sample.position, sample.token_id, strict=True
    ):
        assert dataset.features[example]["input_ids"][position] == token
    again = sample_tokens(tokenizer, EXAMPLES, ("sentence1", "sentence2"), 128, max_tokens=7)
    assert torch.equal(again.position, sample.position)
    assert torch.equal(again.example, sample.example)


def test_bpe_pieces_that_do_not_start_a_word_are_sub_words(tiny_roberta):
    tokenizer = load_tokenizer(str(tiny_roberta))
    examples = [{"sentence1": "The zebra sat.", "sentence2": "the cat", "label": 0, "idx": 0}]
    the, zebra = tokenizer.tokenize("The"), tokenizer.tokenize(" zebra")
    assert len(the) > 1 and len(zebra) > 1  # not in the fixture's vocabulary: split into pieces
    # A piece is typed by its whole word: "T" of "The" is a stop word, "he" a sub-word.
    assert typed_tokens(tokenizer, examples) == [
        (the[0], "stop_word"),
        *[(piece, "sub_word") for piece in the[1:]],
        (zebra[0], "other"),
        *[(piece, "sub_word") for piece in zebra[1:]],
        ("Ġsat", "other"),
        (".", "punctuation"),
        ("the", "stop_word"),  # starts the second sentence: no space marker, still a word start
        ("Ġcat", "other"),
    ]


def tiny_classifier(tiny_bert, pooling: str) -> GLUEClassifier:
    task = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "task/rte.yaml"))
    model = {"name": "tiny", "name_or_path": str(tiny_bert), "pooling": pooling, "dropout": None}
    optim = {"lr": 1e-3, "weight_decay": 0.0, "adam_eps": 1e-6, "betas": [0.9, 0.999]}
    return GLUEClassifier(task=task, model=model, norm={"name": "batchnorm"}, optim=optim)


@pytest.mark.parametrize("pooling", ["mean", "cls", "pooler"])
def test_collected_vectors_are_the_encoders_per_layer_and_pooled(tiny_bert, pooling):
    tokenizer = load_tokenizer(str(tiny_bert))
    module = tiny_classifier(tiny_bert, pooling).eval()
    fields = ("sentence1", "sentence2")
    examples = [*EXAMPLES, {**EXAMPLES[0], "sentence2": "a dog ran home to the mat"}]
    dataset = TokenizedDataset(examples, rte(), tokenizer, max_length=128)
    sample = sample_tokens(tokenizer, examples, fields, 128, max_tokens=20)
    batches = torch.utils.data.DataLoader(
        dataset, batch_size=2, collate_fn=DataCollatorWithPadding(tokenizer)
    )
    vectors = collect_layer_vectors(module, batches, sample)
    assert vectors.num_layers == 3 and len(vectors.tokens) == 3  # embeddings + 2 layers
    with torch.no_grad():
        for index, feature in enumerate(dataset.features):  # one unpadded example at a time
            inputs = {key: torch.tensor([feature[key]]) for key in ("input_ids", "token_type_ids")}
            inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
            output = module.encode(inputs, output_hidden_states=True)
            pooled = module.pool(output, inputs["attention_mask"])[0]
            torch.testing.assert_close(vectors.pre_norm[index], pooled, atol=1e-5, rtol=1e-4)
            normed = module.norm(pooled[None])[0]
            torch.testing.assert_close(vectors.post_norm[index], normed)
            for layer, hidden in enumerate(output.hidden_states):
                expected = hidden[0].mean(dim=0) if pooling == "mean" else hidden[0, 0]
                torch.testing.assert_close(
                    vectors.sentences[layer][index], expected, atol=1e-5, rtol=1e-4
                )
                chosen = sample.example == index
                torch.testing.assert_close(
                    vectors.tokens[layer][chosen],
                    hidden[0, sample.position[chosen]],
                    atol=1e-5,
                    rtol=1e-4,
                )
    if pooling != "pooler":
        assert torch.equal(vectors.sentences[-1], vectors.pre_norm)


def test_token_counts_and_frequency_buckets():
    counts = token_counts([[1, 2, 2], [2, 3], []], vocab_size=5)
    assert counts.tolist() == [0, 1, 3, 1, 0]
    spread = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8])
    assert frequency_buckets(spread, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    tied = torch.tensor([5, 5, 5, 5, 5, 5, 1, 100])
    # Every quartile edge is 5: one edge, two buckets; a count equal to an edge stays below it.
    assert frequency_buckets(tied, 4).tolist() == [0, 0, 0, 0, 0, 0, 0, 1]
    assert frequency_buckets(torch.tensor([3, 3, 3]), 4).tolist() == [0, 0, 0]


def blobs(n: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    """Three well-separated Gaussian blobs in 6 dimensions, labelled by blob."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(n) % 3
    centres = torch.eye(6)[:3] * 20.0
    return centres[labels] + torch.randn(n, 6, generator=generator), labels


def test_separability_of_blobs_by_their_labels_and_by_a_constant():
    X, labels = blobs()
    scores = separability(X, labels, n_clusters=3, folds=3)
    assert scores == {"purity": 1.0, "probe_accuracy": 1.0, "majority": 1 / 3, "n_classes": 3.0}
    constant = separability(X, torch.zeros_like(labels), n_clusters=3)
    assert constant["purity"] == 1.0 and constant["majority"] == 1.0
    assert math.isnan(constant["probe_accuracy"])


def test_probe_leaves_out_labels_too_rare_to_stratify():
    X, labels = blobs()
    labels = labels.clone()
    labels[0] = 7  # one point of its own label: left out, not an error
    assert probe_accuracy(X, labels, folds=3) == 1.0


def test_probe_predictions_for_classes_and_scores():
    X, labels = blobs()
    predicted = probe_predictions(X[::2], labels[::2], X[1::2], regression=False)
    assert predicted.dtype == torch.long and torch.equal(predicted, labels[1::2])
    X = torch.randn(400, 6, generator=torch.Generator().manual_seed(0))
    y = X @ torch.arange(6.0)
    scores = probe_predictions(X[::2], y[::2], X[1::2], regression=True)
    assert scores.dtype == torch.float32
    assert torch.corrcoef(torch.stack([scores, y[1::2]]))[0, 1] > 0.999
