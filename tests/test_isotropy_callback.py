"""The isotropy callback: fixed probe set, vectors from validation, epoch 0 + every epoch, logged,
figures, results.json."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.precision import Precision
from transformers import AutoModel

from isotune.analysis.geometry import collect_layer_vectors
from isotune.callbacks.isotropy import IsotropyMonitor
from isotune.data import GLUEDataModule
from isotune.isotropy import (
    PROFILE_MEASURES,
    isobn_stats,
    isoscore_star,
    layer_profile,
    massive_activations,
    measure_all,
    measure_cloud,
    measure_outliers,
    overlap,
    spectrum,
)
from isotune.isotropy.figures import (
    correlation_matrix,
    layer_profile_figure,
    save_geometry_figure,
)
from isotune.isotropy.point_cloud import PointCloud
from isotune.model.encoders import load_tokenizer
from isotune.model.sentence_views import collect_views, sentence_views
from isotune.tracking.metric_keys import (
    POST_NORM,
    PRE_NORM,
    SENTENCE_VIEWS,
    profile_key,
    profile_table_key,
)
from isotune.training.run import train
from tests.conftest import compose_train_config, tiny_run_overrides
from tests.helpers.classifiers import tiny_model_and_data
from tests.helpers.stops import run_one_epoch

TOKEN_VIEWS = ("layer0_tokens", "layer-1_tokens")


@pytest.fixture(scope="module")
def isobn_run(tmp_path_factory, tiny_bert, glue_dir):
    """One tiny-BERT IsoBN run with token-level layers, layer profiles and figures on."""
    folder = tmp_path_factory.mktemp("iso-run")
    cfg = compose_train_config(
        [
            *tiny_run_overrides(tiny_bert, glue_dir),
            "norm=isobn",
            "callbacks.isotropy.figures=true",
            "callbacks.isotropy.probe_size=20",
            "callbacks.isotropy.token_layers=[0,-1]",
            "callbacks.isotropy.local_k=2",
            "callbacks.isotropy.layer_profiles=true",
        ],
        folder,
    )
    return folder, train(cfg)


@pytest.mark.slow
def test_measures_pretrained_and_every_epoch_into_results(isobn_run):
    folder, results = isobn_run
    isotropy = results["isotropy"]
    assert sorted(isotropy["per_epoch"]) == ["0", "1", "2"]
    assert isotropy["pretrained"] == isotropy["per_epoch"]["0"]
    assert isotropy["final"] == isotropy["per_epoch"]["2"]
    assert isotropy["best"] == isotropy["per_epoch"][str(results["best_epoch"])]
    keys = set(isotropy["final"])
    for view in ("pre_norm", "post_norm", *TOKEN_VIEWS):
        for metric in ("iw", "log_iw", "avg_cosine", "isoscore", "std_cv", "corr_abs_mean"):
            assert f"iso/{view}/{metric}" in keys
    assert "iso/pre_norm/local_isoscore" in keys
    for epoch in ("0", "1", "2"):  # the embeddings and the 2 layers, at both levels
        for level in ("sentence", "tokens"):
            for layer in range(3):
                assert profile_key(level, layer, "twonn") in isotropy["per_epoch"][epoch]
        assert len(isotropy["massive_activations"][epoch]) == 3
    written = json.loads((folder / "results.json").read_text())["isotropy"]
    assert json.dumps(written) == json.dumps(isotropy)  # NaN: layer 0's [CLS] is one point
    outliers = isotropy["outlier_dimensions"]
    assert outliers["factor"] == 5.0 and sorted(outliers["per_epoch"]) == ["0", "1", "2"]
    for epoch, views in outliers["per_epoch"].items():
        assert sorted(views) == sorted(["pre_norm", "post_norm", *TOKEN_VIEWS])
        for view, dims in views.items():
            assert all(isinstance(dim, int) for dim in dims)
            assert isotropy["per_epoch"][epoch][f"iso/{view}/n_outliers"] == len(dims)
    # Before training IsoBN has no statistics yet: it is the identity, so both views agree.
    pre = {k.split("/")[-1]: v for k, v in isotropy["pretrained"].items() if "/pre_norm/" in k}
    post = {k.split("/")[-1]: v for k, v in isotropy["pretrained"].items() if "/post_norm/" in k}
    assert pre == pytest.approx(post)
    # After training IsoBN rescales dimensions: the classifier's input differs from the encoder's.
    assert isotropy["final"]["iso/post_norm/std_cv"] != isotropy["final"]["iso/pre_norm/std_cv"]


@pytest.mark.slow
def test_pretrained_values_match_an_independent_computation(isobn_run, tiny_bert, glue_dir):
    """Epoch 0 equals measure_all on the same probe examples encoded by a fresh pretrained model."""
    _, results = isobn_run
    from isotune.data import load_split
    from tests.helpers.tasks import load_task

    task = load_task("rte")
    examples = load_split(task, "validation", glue_dir)
    chosen = torch.randperm(len(examples), generator=torch.Generator().manual_seed(1))[:20]
    tokenizer = load_tokenizer(str(tiny_bert))
    encoder = AutoModel.from_pretrained(str(tiny_bert)).eval()
    rows = [examples[i] for i in chosen.tolist()]
    with torch.no_grad():
        vectors = [
            encoder(
                **tokenizer(row["sentence1"], row["sentence2"], return_tensors="pt")
            ).last_hidden_state[0, 0]
            for row in rows
        ]
    expected = measure_all(torch.stack(vectors))
    pretrained = results["isotropy"]["pretrained"]
    for metric in ("isoscore", "avg_cosine", "std_mean", "corr_abs_mean", "effective_rank"):
        assert pretrained[f"iso/pre_norm/{metric}"] == pytest.approx(expected[metric], rel=1e-3)


class RecordingMonitor(IsotropyMonitor):
    """The monitor, keeping per epoch the vectors it measured and how many probe examples it had
    to encode apart from validation."""

    def __init__(self, **options):
        super().__init__(**options)
        self.vectors: dict[int, dict[str, torch.Tensor]] = {}
        self.encoded_apart: list[int] = []

    def encode_missing(self, trainer, module, capture):
        self.encoded_apart.append(super().encode_missing(trainer, module, capture))
        return self.encoded_apart[-1]

    def collect(self, trainer, module, capture=None):
        vectors = super().collect(trainer, module, capture)
        self.vectors[len(self.vectors)] = vectors
        return vectors


@torch.no_grad()
def encode_like_validation(model, datamodule, probe: list[int], token_layers=TOKEN_VIEWS):
    """The reference: every dev batch encoded whole, as validation pads it, with the public
    ``sentence_views``; the probe's rows then picked by ``idx`` and put in probe order."""
    special_ids = torch.tensor(datamodule.tokenizer.all_special_ids)
    by_idx = {}
    model.eval()
    for batch in datamodule.val_dataloader()[0]:
        views = sentence_views(model, batch, hidden_states=True)
        real = batch["attention_mask"].bool() & ~torch.isin(batch["input_ids"], special_ids)
        for row, idx in enumerate(batch["idx"].tolist()):
            by_idx[idx] = {
                PRE_NORM: views.pre_norm[row],
                POST_NORM: views.post_norm[row],
                "layer0_tokens": views.hidden_states[0][row][real[row]],
                "layer-1_tokens": views.hidden_states[-1][row][real[row]],
            }
    dev_idx = [datamodule.dataset("validation")[i]["idx"] for i in probe]
    return {
        PRE_NORM: torch.stack([by_idx[i][PRE_NORM] for i in dev_idx]),
        POST_NORM: torch.stack([by_idx[i][POST_NORM] for i in dev_idx]),
        **{view: torch.cat([by_idx[i][view] for i in dev_idx]) for view in token_layers},
    }


def fit_recording(train_config, *overrides: str, **options):
    """One epoch of a tiny-BERT IsoBN run with a recording monitor (``options`` added to its
    own); the reference vectors of the pre-trained model (before fit) and of the trained one."""
    cfg = train_config("norm=isobn", "trainer.max_epochs=1", *overrides)
    model, datamodule = tiny_model_and_data(cfg)
    monitor = RecordingMonitor(
        probe_size=20, seed=1, token_layers=[0, -1], figures=False, **options
    )
    probe = monitor.probe_indices(datamodule)
    precision = cfg.trainer.precision
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    with autocast:
        pretrained = encode_like_validation(model, datamodule, probe)
    model.train()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        precision=precision,
        limit_val_batches=cfg.trainer.limit_val_batches,
        num_sanity_val_steps=cfg.trainer.num_sanity_val_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[monitor],
    )
    trainer.fit(model, datamodule=datamodule)
    with autocast:
        trained = encode_like_validation(model, datamodule, probe)
    return monitor, pretrained, trained


def assert_same_vectors(measured: dict, reference: dict) -> None:
    assert list(measured) == [PRE_NORM, POST_NORM, *TOKEN_VIEWS]
    for view, vectors in measured.items():
        assert vectors.dtype == torch.float32 and vectors.device.type == "cpu"
        assert torch.equal(vectors, reference[view].float()), view


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "encoded_apart"),
    [
        # dev = 24 examples in validation batches of 16 and 8; the probe has 20 of them
        ((), [20, 0]),  # epoch 0 encodes the probe; epoch 1 takes all of it from validation
        (("trainer.limit_val_batches=1",), [20, 7]),  # 13 probe rows in the first batch
        (("trainer.num_sanity_val_steps=2",), [20, 0]),  # the sanity check is not measured
    ],
)
def test_vectors_from_validation_equal_a_separate_encoding_of_the_probe(
    train_config, overrides, encoded_apart
):
    """On the CPU in float32, bit for bit: validation's rows, the rows encoded apart (epoch 0,
    the rest under limit_val_batches) and a separate encoding of whole validation batches."""
    monitor, pretrained, trained = fit_recording(train_config, *overrides)
    assert monitor.encoded_apart == encoded_apart
    assert sorted(monitor.history) == [0, 1] and sorted(monitor.vectors) == [0, 1]
    assert_same_vectors(monitor.vectors[0], pretrained)
    assert_same_vectors(monitor.vectors[1], trained)
    assert monitor.vectors[1][PRE_NORM].shape == (20, 32)
    assert not torch.equal(monitor.vectors[0][PRE_NORM], monitor.vectors[1][PRE_NORM])


def test_outlier_dimensions_of_every_epoch_are_those_of_the_measured_vectors(train_config):
    """The indices kept per epoch and view, their scalars and how many of epoch 0's outliers stay,
    recomputed from the vectors the monitor measured. A factor of 1 finds some in any cloud that
    is not constant (no dimension's variance can lie below the mean in all of them), so the
    test does not hang on what a tiny random model happens to hold."""
    monitor, _, _ = fit_recording(train_config, outlier_factor=1.0)
    for epoch, vectors in monitor.vectors.items():
        for view, points in vectors.items():
            found = measure_outliers(points, 1.0, 3)
            assert monitor.outliers[epoch][view] == list(found.outliers.indices)
            values = monitor.history[epoch]
            assert values[f"iso/{view}/n_outliers"] == found.outliers.count
            assert values[f"iso/{view}/rogue_share"] == found.rogue.share
            kept = overlap(monitor.outliers[0][view], monitor.outliers[epoch][view]).kept
            assert values[f"iso/{view}/outliers_kept"] == len(kept)
    assert any(monitor.outliers[0].values()), "the test needs a cloud with outlier dimensions"
    for epoch, vectors in monitor.vectors.items():  # IsoScore* in float64, as every measure
        for view, points in vectors.items():
            expected = isoscore_star(points.double()).item()
            assert monitor.history[epoch][f"iso/{view}/isoscore_star"] == expected
    restored = IsotropyMonitor()
    restored.load_state_dict(monitor.state_dict())
    assert restored.outliers == monitor.outliers


@pytest.mark.slow
def test_under_bf16_mixed_every_epoch_is_measured_at_validation_precision(train_config):
    """Epoch 0 runs under validation's autocast too, so epochs compare; the vectors equal the
    bf16 reference bit for bit on the CPU, and differ from a float32 encoding by bf16 rounding."""
    monitor, pretrained, trained = fit_recording(train_config, "trainer.precision=bf16-mixed")
    assert monitor.encoded_apart == [20, 0]
    assert_same_vectors(monitor.vectors[0], pretrained)
    assert_same_vectors(monitor.vectors[1], trained)
    model, datamodule = tiny_model_and_data(train_config("norm=isobn"))
    float32 = encode_like_validation(model, datamodule, monitor.probe_indices(datamodule))
    bf16_vectors = monitor.vectors[0][PRE_NORM]
    assert not torch.equal(bf16_vectors, float32[PRE_NORM])
    torch.testing.assert_close(bf16_vectors, float32[PRE_NORM], rtol=0.05, atol=0.05)


def stand_in_trainer(datamodule: GLUEDataModule) -> SimpleNamespace:
    """What the monitor reads of a trainer outside fit: the data and the precision (float32)."""
    return SimpleNamespace(datamodule=datamodule, precision_plugin=Precision())


@pytest.mark.slow
def test_token_vectors_exclude_special_tokens_and_padding(train_config, isobn_run):
    model, datamodule = tiny_model_and_data(train_config())
    trainer = stand_in_trainer(datamodule)
    monitor = IsotropyMonitor(probe_size=10, seed=1, token_layers=[0, -1])
    vectors = monitor.collect(trainer, model)
    dataset = datamodule.dataset("validation")
    probe = monitor.probe_indices(datamodule)
    real_tokens = sum(len(dataset[i]["input_ids"]) - 3 for i in probe)  # [CLS] [SEP] [SEP]
    assert vectors["pre_norm"].shape == vectors["post_norm"].shape == (10, 32)
    assert vectors["layer0_tokens"].shape == vectors["layer-1_tokens"].shape == (real_tokens, 32)
    capped = IsotropyMonitor(probe_size=10, seed=1, token_layers=[-1], max_tokens=25)
    assert capped.collect(trainer, model)["layer-1_tokens"].shape == (25, 32)
    assert model.training  # the pass restores the module's mode
    assert not model.norm._forward_hooks and not model.encoder._forward_pre_hooks  # detached

    folder, _ = isobn_run
    metrics_csv = list(csv.DictReader((folder / "csv" / "metrics.csv").open()))
    logged = [row for row in metrics_csv if row.get("iso/layer-1_tokens/iw")]
    assert [float(row["iso/epoch"]) for row in logged] == [0.0, 1.0, 2.0]


def test_callback_and_analysis_collect_the_same_sentence_views(train_config):
    # One validation batch holds the whole fixture dev split, so the analysis pads alike.
    model, datamodule = tiny_model_and_data(
        train_config("norm=batchnorm", "data.eval_batch_size=64")
    )
    monitor = IsotropyMonitor(probe_size=24, seed=1)
    from_callback = monitor.collect(stand_in_trainer(datamodule), model)
    assert model.training
    dataset = datamodule.dataset("validation")
    batch = datamodule.collate([dataset[i] for i in monitor.probe_indices(datamodule)])
    from_analysis = collect_layer_vectors(model, [batch], sample=None)
    assert model.training  # both passes run in eval mode and put the training mode back
    assert tuple(from_callback) == SENTENCE_VIEWS == ("pre_norm", "post_norm")
    assert from_callback[PRE_NORM].shape == (24, 32)
    assert torch.equal(from_callback[PRE_NORM], from_analysis.pre_norm)
    assert torch.equal(from_callback[POST_NORM], from_analysis.post_norm)
    # BatchNorm (running mean 0, variance 1, eps 1e-5) divides by sqrt(1 + eps): a different view.
    torch.testing.assert_close(from_analysis.post_norm, from_analysis.pre_norm / (1 + 1e-5) ** 0.5)
    assert not torch.equal(from_analysis.post_norm, from_analysis.pre_norm)


def test_collect_views_concatenates_extras_in_order_and_keeps_eval_mode(train_config):
    model, datamodule = tiny_model_and_data(train_config())
    model.eval()
    starts = []

    def first_tokens(batch, views, start):
        starts.append(start)
        return {"last_layer_cls": views.hidden_states[-1][:, 0]}

    dataset = datamodule.dataset("validation")
    batches = [datamodule.collate([dataset[i] for i in rows]) for rows in ([0, 1, 2, 3], [4, 5])]
    collected = collect_views(model, batches, hidden_states=True, extra=first_tokens)
    assert starts == [0, 4]
    assert list(collected) == [PRE_NORM, POST_NORM, "last_layer_cls"]
    assert all(v.dtype == torch.float32 and v.device.type == "cpu" for v in collected.values())
    assert torch.equal(collected["last_layer_cls"], collected[PRE_NORM])  # cls pooling
    assert not model.training


@pytest.mark.slow
def test_figures_saved_per_view_and_epoch(isobn_run):
    folder, _ = isobn_run
    names = sorted(path.name for path in (folder / "isotropy").glob("*.png"))
    assert names == [
        "layer_profiles.png",  # drawn when training ends, one line per epoch
        *(
            f"{view}_epoch{epoch:02d}.png"
            for view in ("post_norm", "pre_norm")
            for epoch in range(3)
        ),
    ]
    assert all((folder / "isotropy" / name).stat().st_size > 10_000 for name in names)


def test_figures_draw_what_measure_cloud_computed_without_measuring_again(tmp_path, monkeypatch):
    points = torch.randn(50, 6, dtype=torch.float64) * torch.tensor([1.0, 2, 3, 4, 5, 6])
    points[:, 2] = 7.0  # a constant dimension: no correlation, std 0
    measured = measure_cloud(points, dominant_factor=2.0)
    assert measured.scalars == measure_all(points, dominant_factor=2.0)
    assert torch.equal(measured.stats.std, isobn_stats(points).std)
    assert torch.equal(measured.spectrum.variances, spectrum(points).variances)
    expected = torch.nan_to_num(torch.corrcoef(points.T)).abs()  # constant row and column: 0
    torch.testing.assert_close(correlation_matrix(measured.stats), expected)

    def no_second_measurement(*args, **kwargs):
        raise AssertionError("the figure measured the points again")

    monkeypatch.setattr(PointCloud, "__init__", no_second_measurement)
    path = save_geometry_figure(measured, "test", tmp_path / "figure.png")
    assert path.stat().st_size > 10_000


def test_probe_set_is_seeded_and_capped(train_config):
    _, datamodule = tiny_model_and_data(train_config())

    def probe_indices(seed: int, size: int) -> list[int]:
        return sorted(IsotropyMonitor(probe_size=size, seed=seed).probe_indices(datamodule))

    assert probe_indices(3, 10) == probe_indices(3, 10)
    assert probe_indices(3, 10) != probe_indices(4, 10)
    assert len(probe_indices(3, 10)) == 10
    assert len(probe_indices(3, 1000)) == 24  # the whole (fixture) dev split


@pytest.mark.slow
def test_resume_keeps_epoch_zero_and_continues(train_config, tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    run_one_epoch(lambda: train(train_config(output_dir=first)), monkeypatch)
    results = train(train_config(f"ckpt_path={first}/checkpoints/last.ckpt", output_dir=second))
    before = json.loads((first / "results.json").read_text())["isotropy"]
    assert sorted(results["isotropy"]["per_epoch"]) == ["0", "1", "2"]
    assert results["isotropy"]["pretrained"] == before["pretrained"]


def test_profile_tables_hold_every_epoch_measured_and_go_to_loggers_with_tables():
    """W&B draws a profile against the layer only from a table: one per level, a row per epoch
    and layer, re-logged whole after each epoch (the run summary keeps the last one)."""
    monitor = IsotropyMonitor(layer_profiles=True)
    monitor.history = {
        epoch: {
            "iso/post_norm/iw": 0.5,
            **{profile_key("sentence", i, "twonn"): 10 * epoch + i for i in range(2)},
            **{profile_key("tokens", i, m): epoch + i / 10 for i in range(2) for m in "ab"},
        }
        for epoch in (0, 1)
    }
    tables = monitor.profile_tables()
    assert tables["sentence"] == (
        ["epoch", "layer", "twonn"],
        [[0, 0, 0], [0, 1, 1], [1, 0, 10], [1, 1, 11]],
    )
    assert tables["tokens"][0] == ["epoch", "layer", "a", "b"]
    assert tables["tokens"][1][-1] == [1, 1, 1.1, 1.1]
    logged = []
    with_tables = SimpleNamespace(log_table=lambda **table: logged.append(table))
    trainer = SimpleNamespace(loggers=[with_tables, SimpleNamespace()], global_step=7)
    monitor._log_profile_tables(trainer)
    assert [(t["key"], t["step"], t["data"]) for t in logged] == [
        (profile_table_key(level), 7, tables[level][1]) for level in ("sentence", "tokens")
    ]


def test_every_panel_of_the_layer_profile_figure_draws_its_levels_values():
    """A panel per measure a level has, each with a line per epoch: the largest activation is
    the tokens' alone, so the sentence row has no empty "max |h| / median" panel."""
    measured = {"sentence": PROFILE_MEASURES, "tokens": (*PROFILE_MEASURES, "massive_ratio")}
    profiles = {
        epoch: {
            level: {layer: dict.fromkeys(measures, epoch + layer) for layer in range(3)}
            for level, measures in measured.items()
        }
        for epoch in (0, 1)
    }
    panels = [axis for axis in layer_profile_figure(profiles).axes if axis.get_visible()]
    titles = [axis.get_title() for axis in panels]
    assert "tokens: max |h| / median" in titles and "sentence: max |h| / median" not in titles
    assert [title for title, axis in zip(titles, panels, strict=True) if len(axis.lines) != 2] == []


def test_layer_profiles_equal_the_library_on_the_same_vectors(train_config):
    """Each layer's sentence profile equals layer_profile of the analysis' own collection of the
    layer's pooled vectors; the token profile is layer_profile of the token sample, drawn from
    the non-special tokens; the largest activations are those of every real token's state."""
    model, datamodule = tiny_model_and_data(train_config("data.eval_batch_size=64"))
    monitor = IsotropyMonitor(probe_size=24, seed=1, layer_profiles=True, profile_tokens=60)
    capture = monitor.new_capture(datamodule, model)
    collected = monitor.collect(stand_in_trainer(datamodule), model, capture)
    values, massive = monitor.measure_profiles(collected, capture)
    dataset = datamodule.dataset("validation")
    probe = monitor.probe_indices(datamodule)
    batch = datamodule.collate([dataset[i] for i in probe])
    reference = collect_layer_vectors(model, [batch], sample=None)
    views = sentence_views(model.eval(), batch, hidden_states=True)
    real = batch["attention_mask"].bool()
    ordinary = real & ~torch.isin(
        batch["input_ids"], torch.tensor(datamodule.tokenizer.all_special_ids)
    )
    assert len(massive) == reference.num_layers == 3  # the embeddings and 2 layers
    for layer, sentences in enumerate(reference.sentences):
        expected = layer_profile(sentences)
        logged = {m: values[profile_key("sentence", layer, m)] for m in PROFILE_MEASURES}
        assert logged == pytest.approx(expected, rel=1e-12, nan_ok=True)
        tokens = collected[f"tokens_layer{layer}"]
        assert len(tokens) == sum(min(3, int(row.sum())) for row in ordinary)  # 60 / 24 -> 3 each
        states = views.hidden_states[layer]
        assert torch.isin(tokens[:, :1], states[ordinary][:, :1]).all()
        logged = {m: values[profile_key("tokens", layer, m)] for m in PROFILE_MEASURES}
        assert logged == pytest.approx(layer_profile(tokens), rel=1e-12, nan_ok=True)
        found = massive_activations(states[real])
        assert massive[layer]["magnitudes"] == pytest.approx(list(found.magnitudes))
        assert massive[layer]["dims"] == list(found.dims)
        example, position = massive[layer]["idx"][0], massive[layer]["positions"][0]
        row = [dataset[i]["idx"] for i in probe].index(example)
        assert states[row, position].abs().max().item() == pytest.approx(found.magnitudes[0])
        ratio = values[profile_key("tokens", layer, "massive_ratio")]
        assert ratio == pytest.approx(found.magnitudes[0] / tokens.abs().median().item())
