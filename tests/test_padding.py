"""Batches padded to a few fixed lengths (data.pad_buckets): the same logits as padded to their
longest example (padding is masked), every batch at a bucket, a bad bucket list refused."""

from __future__ import annotations

import pytest
import torch

from isotune.data import GLUEDataModule
from isotune.data.padding import check_buckets, padded_length
from isotune.errors import IsotuneError
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import load_tokenizer
from tests.conftest import compose_train_config, tiny_run_overrides
from tests.helpers.tasks import load_task


def datamodule(tiny_bert, glue_dir, **options) -> GLUEDataModule:
    return GLUEDataModule(
        load_task("rte"), load_tokenizer(str(tiny_bert)), glue_dir=glue_dir, batch_size=8, **options
    )


@pytest.mark.parametrize(
    ("longest", "length"), [(1, 16), (16, 16), (17, 32), (32, 32), (33, 128), (128, 128)]
)
def test_a_batch_pads_to_the_first_bucket_that_holds_it_else_max_length(longest, length):
    assert padded_length(longest, (16, 32), 128) == length


@pytest.mark.parametrize(
    ("buckets", "problem"),
    [
        ([64, 32], r"data.pad_buckets=\[64, 32\] is not increasing"),
        ([32, 32], r"data.pad_buckets=\[32, 32\] is not increasing"),
        ([0, 32], r"data.pad_buckets=\[0, 32\] is not increasing from 1"),
        ([64, 256], r"data.pad_buckets=\[64, 256\] exceeds data.max_length=128"),
        ([], r"data.pad_buckets=\[\] is not a list of whole lengths"),
        ([16.5], r"data.pad_buckets=\[16.5\] is not a list of whole lengths"),
    ],
)
def test_a_bad_bucket_list_is_refused_with_its_value_and_the_fix(buckets, problem):
    with pytest.raises(IsotuneError, match=problem) as refused:
        check_buckets(buckets, 128)
    assert "Fix: increasing lengths from 1 to data.max_length=128" in str(refused.value)


def test_the_run_refuses_a_bad_bucket_list_before_training(tiny_bert, glue_dir, tmp_path):
    from isotune.training.run import train

    cfg = compose_train_config(
        [*tiny_run_overrides(tiny_bert, glue_dir), "data.pad_buckets=[64,32]"], tmp_path
    )
    with pytest.raises(IsotuneError, match=r"data.pad_buckets=\[64, 32\] is not increasing"):
        train(cfg)
    assert not (tmp_path / "checkpoints").exists()


def test_train_and_eval_batches_pad_to_buckets(tiny_bert, glue_dir):
    data = datamodule(tiny_bert, glue_dir, pad_buckets=[8, 16, 24])
    data.setup("fit")
    loaders = [data.train_dataloader(), *data.val_dataloader()]
    lengths = {batch["input_ids"].shape[1] for loader in loaders for batch in loader}
    assert lengths <= {8, 16, 24, 128}
    for loader in loaders:
        for batch in loader:  # every batch fits its bucket: the shorter one would not hold it
            real = int(batch["attention_mask"].sum(dim=1).max())
            assert batch["input_ids"].shape[1] == padded_length(real, (8, 16, 24), 128)


def test_logits_are_equal_with_and_without_the_extra_padding(tiny_bert, glue_dir):
    cfg = compose_train_config(tiny_run_overrides(tiny_bert, glue_dir))
    torch.manual_seed(0)
    model = GLUEClassifier(task=cfg.task, model=cfg.model, norm=cfg.norm, optim=cfg.optim).eval()
    exact, bucketed = (
        datamodule(tiny_bert, glue_dir),
        datamodule(tiny_bert, glue_dir, pad_buckets=[64]),
    )
    features = [exact.dataset(exact.task.primary_split)[i] for i in range(8)]
    short, long = exact.collate(features), bucketed.collate(features)
    assert long["input_ids"].shape[1] == 64 > short["input_ids"].shape[1]
    with torch.no_grad():
        torch.testing.assert_close(model(long), model(short), rtol=1e-6, atol=1e-6)
