"""The isotropy callback: fixed probe set, epoch 0 + every epoch, logged, figures, results.json."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from transformers import AutoModel

from isotune.analysis.geometry import collect_layer_vectors
from isotune.data import GLUEDataModule
from isotune.encoders import load_tokenizer
from isotune.isotropy import measure_all
from isotune.isotropy.callback import IsotropyMonitor
from isotune.isotropy.vectors import POST_NORM, PRE_NORM, SENTENCE_VIEWS, collect_views
from isotune.module import GLUEClassifier
from isotune.tasks import TaskSpec
from isotune.training import train
from tests.conftest import compose_train_config, tiny_run_overrides


@pytest.fixture(scope="module")
def isobn_run(tmp_path_factory, tiny_bert, glue_dir):
    """One tiny-BERT IsoBN run with token-level layers and figures on."""
    folder = tmp_path_factory.mktemp("iso-run")
    cfg = compose_train_config(
        [
            *tiny_run_overrides(tiny_bert, glue_dir),
            "norm=isobn",
            "callbacks.isotropy.figures=true",
            "callbacks.isotropy.probe_size=20",
            "callbacks.isotropy.token_layers=[0,-1]",
            "callbacks.isotropy.local_k=2",
        ],
        folder,
    )
    return folder, train(cfg)


def test_measures_pretrained_and_every_epoch_into_results(isobn_run):
    folder, results = isobn_run
    isotropy = results["isotropy"]
    assert sorted(isotropy["per_epoch"]) == ["0", "1", "2"]
    assert isotropy["pretrained"] == isotropy["per_epoch"]["0"]
    assert isotropy["final"] == isotropy["per_epoch"]["2"]
    assert isotropy["best"] == isotropy["per_epoch"][str(results["best_epoch"])]
    keys = set(isotropy["final"])
    for view in ("pre_norm", "post_norm", "layer0_tokens", "layer-1_tokens"):
        for metric in ("iw", "log_iw", "avg_cosine", "isoscore", "std_cv", "corr_abs_mean"):
            assert f"iso/{view}/{metric}" in keys
    assert "iso/pre_norm/local_isoscore" in keys
    assert json.loads((folder / "results.json").read_text())["isotropy"] == isotropy
    # Before training IsoBN has no statistics yet: it is the identity, so both views agree.
    pre = {k.split("/")[-1]: v for k, v in isotropy["pretrained"].items() if "/pre_norm/" in k}
    post = {k.split("/")[-1]: v for k, v in isotropy["pretrained"].items() if "/post_norm/" in k}
    assert pre == pytest.approx(post)
    # After training IsoBN rescales dimensions: the classifier's input differs from the encoder's.
    assert isotropy["final"]["iso/post_norm/std_cv"] != isotropy["final"]["iso/pre_norm/std_cv"]


def test_pretrained_values_match_an_independent_computation(isobn_run, tiny_bert, glue_dir):
    """Epoch 0 equals measure_all on the same probe examples encoded by a fresh pretrained model."""
    _, results = isobn_run
    from isotune.data import load_split
    from tests.test_metrics import load_task

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


def test_token_vectors_exclude_special_tokens_and_padding(train_config, isobn_run):
    cfg = train_config()
    tokenizer = load_tokenizer(cfg.model.name_or_path)
    datamodule = GLUEDataModule(
        TaskSpec.from_config(cfg.task), tokenizer, glue_dir=cfg.paths.glue_dir, eval_batch_size=4
    )
    model = GLUEClassifier(task=cfg.task, model=cfg.model, norm=cfg.norm, optim=cfg.optim)
    trainer = type("FakeTrainer", (), {"datamodule": datamodule})
    monitor = IsotropyMonitor(probe_size=10, seed=1, token_layers=[0, -1])
    vectors = monitor.collect(trainer, model)
    probe = monitor.probe_loader(trainer).dataset
    real_tokens = sum(
        len(probe[i]["input_ids"]) - 3 for i in range(len(probe))
    )  # [CLS] [SEP] [SEP]
    assert vectors["pre_norm"].shape == vectors["post_norm"].shape == (10, 32)
    assert vectors["layer0_tokens"].shape == vectors["layer-1_tokens"].shape == (real_tokens, 32)
    capped = IsotropyMonitor(probe_size=10, seed=1, token_layers=[-1], max_tokens=25)
    assert capped.collect(trainer, model)["layer-1_tokens"].shape == (25, 32)
    assert model.training  # the pass restores the module's mode

    folder, _ = isobn_run
    metrics_csv = list(csv.DictReader((folder / "csv" / "metrics.csv").open()))
    logged = [row for row in metrics_csv if row.get("iso/layer-1_tokens/iw")]
    assert [float(row["iso/epoch"]) for row in logged] == [0.0, 1.0, 2.0]


def probe_setup(cfg, probe_size: int = 10) -> tuple[GLUEClassifier, type, IsotropyMonitor]:
    """A fresh tiny classifier in training mode, a stand-in trainer and a monitor's probe."""
    datamodule = GLUEDataModule(
        TaskSpec.from_config(cfg.task),
        load_tokenizer(cfg.model.name_or_path),
        glue_dir=cfg.paths.glue_dir,
        eval_batch_size=4,
    )
    model = GLUEClassifier(task=cfg.task, model=cfg.model, norm=cfg.norm, optim=cfg.optim)
    trainer = type("FakeTrainer", (), {"datamodule": datamodule})
    return model, trainer, IsotropyMonitor(probe_size=probe_size, seed=1)


def test_callback_and_analysis_collect_the_same_sentence_views(train_config):
    model, trainer, monitor = probe_setup(train_config("norm=batchnorm"))
    from_callback = monitor.collect(trainer, model)
    assert model.training
    from_analysis = collect_layer_vectors(model, monitor.probe_loader(trainer), sample=None)
    assert model.training  # both passes run in eval mode and put the training mode back
    assert tuple(from_callback) == SENTENCE_VIEWS == ("pre_norm", "post_norm")
    assert from_callback[PRE_NORM].shape == (10, 32)
    assert torch.equal(from_callback[PRE_NORM], from_analysis.pre_norm)
    assert torch.equal(from_callback[POST_NORM], from_analysis.post_norm)
    # BatchNorm (running mean 0, variance 1, eps 1e-5) divides by sqrt(1 + eps): a different view.
    torch.testing.assert_close(from_analysis.post_norm, from_analysis.pre_norm / (1 + 1e-5) ** 0.5)
    assert not torch.equal(from_analysis.post_norm, from_analysis.pre_norm)


def test_collect_views_concatenates_extras_in_order_and_keeps_eval_mode(train_config):
    model, trainer, monitor = probe_setup(train_config())
    model.eval()
    starts = []

    def first_tokens(batch, views, start):
        starts.append(start)
        return {"last_layer_cls": views.hidden_states[-1][:, 0]}

    loader = monitor.probe_loader(trainer)
    collected = collect_views(model, loader, hidden_states=True, extra=first_tokens)
    assert starts == [0, 4, 8]  # 10 probe examples in batches of 4
    assert list(collected) == [PRE_NORM, POST_NORM, "last_layer_cls"]
    assert all(v.dtype == torch.float32 and v.device.type == "cpu" for v in collected.values())
    assert torch.equal(collected["last_layer_cls"], collected[PRE_NORM])  # cls pooling
    assert not model.training


def test_figures_saved_per_view_and_epoch(isobn_run):
    folder, _ = isobn_run
    names = sorted(path.name for path in (folder / "isotropy").glob("*.png"))
    assert names == [
        f"{view}_epoch{epoch:02d}.png" for view in ("post_norm", "pre_norm") for epoch in range(3)
    ]
    assert all((folder / "isotropy" / name).stat().st_size > 10_000 for name in names)


def test_probe_set_is_seeded_and_capped(train_config, tmp_path):
    cfg = train_config()
    datamodule = GLUEDataModule(
        TaskSpec.from_config(cfg.task),
        load_tokenizer(cfg.model.name_or_path),
        glue_dir=cfg.paths.glue_dir,
    )

    class FakeTrainer:
        pass

    FakeTrainer.datamodule = datamodule

    def probe_indices(seed: int, size: int) -> list[int]:
        loader = IsotropyMonitor(probe_size=size, seed=seed).probe_loader(FakeTrainer)
        return sorted(loader.dataset.indices)

    assert probe_indices(3, 10) == probe_indices(3, 10)
    assert probe_indices(3, 10) != probe_indices(4, 10)
    assert len(probe_indices(3, 10)) == 10
    assert len(probe_indices(3, 1000)) == 24  # the whole (fixture) dev split


def test_resume_keeps_epoch_zero_and_continues(train_config, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    train(train_config("trainer.max_epochs=1", output_dir=first))
    results = train(
        train_config(
            "trainer.max_epochs=2", f"ckpt_path={first}/checkpoints/last.ckpt", output_dir=second
        )
    )
    before = json.loads((first / "results.json").read_text())["isotropy"]
    assert sorted(results["isotropy"]["per_epoch"]) == ["0", "1", "2"]
    assert results["isotropy"]["pretrained"] == before["pretrained"]
