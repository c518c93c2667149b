"""Epoch 0's isotropy measures shared by a sweep's jobs: read where another job measured the same
weights, probe batches and settings, equal to measuring them; a run alone measures its own."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from isotune.callbacks.isotropy import SHARED_FOLDER
from isotune.callbacks.shared_pretrained import (
    MEASURES_FILE,
    SharedPretrained,
    pretrained_key,
    tensors_sha256,
)
from isotune.training.run import train
from tests.helpers.cli import run_cli, tiny_cli_overrides

SHARED_RUN = (
    "trainer.max_epochs=1",
    "callbacks.isotropy.figures=true",
    "callbacks.isotropy.probe_size=20",
    "callbacks.isotropy.token_layers=[0,-1]",
    "callbacks.isotropy.layer_profiles=true",
)


def epoch_zero(results: dict) -> str:
    """Epoch 0's values, outlier dimensions and massive activations as JSON (NaN equal)."""
    isotropy = results["isotropy"]
    return json.dumps(
        [
            isotropy["pretrained"],
            isotropy["outlier_dimensions"]["per_epoch"]["0"],
            isotropy["massive_activations"].get("0"),
        ]
    )


@pytest.mark.slow
def test_a_second_job_reads_epoch_zero_equal_to_measuring_it(train_config, tmp_path, caplog):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    shared = f"callbacks.isotropy.shared_dir={sweep}"
    alone = train(train_config(*SHARED_RUN, output_dir=tmp_path / "alone"))
    assert not any(sweep.iterdir())  # nothing shared without the folder asked for
    first = train(train_config(*SHARED_RUN, shared, output_dir=tmp_path / "first"))
    (entry,) = (sweep / SHARED_FOLDER).iterdir()
    assert (entry / MEASURES_FILE).is_file()
    with caplog.at_level(logging.INFO, logger="isotune.callbacks.isotropy"):
        second = train(train_config(*SHARED_RUN, shared, output_dir=tmp_path / "second"))
    assert "measured by another job" in caplog.text
    assert epoch_zero(first) == epoch_zero(alone) == epoch_zero(second)
    # the run after epoch 0 is the same run: its own epoch 1 and scores, bit for bit
    assert json.dumps(second["isotropy"]["per_epoch"]["1"]) == json.dumps(
        alone["isotropy"]["per_epoch"]["1"]
    )
    assert second["history"] == alone["history"] and second["best"] == alone["best"]
    for view in ("pre_norm", "post_norm"):  # the run keeps its figures of epoch 0
        figure = f"isotropy/{view}_epoch00.png"
        assert (tmp_path / "second" / figure).read_bytes() == (
            entry / f"{view}_epoch00.png"
        ).read_bytes()


@pytest.mark.slow
def test_other_settings_or_weights_are_measured_not_read(train_config, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    shared = f"callbacks.isotropy.shared_dir={sweep}"
    train(train_config(*SHARED_RUN, shared, output_dir=tmp_path / "a"))
    train(
        train_config(*SHARED_RUN, shared, "callbacks.isotropy.rogue_k=2", output_dir=tmp_path / "b")
    )
    train(train_config(*SHARED_RUN, shared, "adapt=lora", output_dir=tmp_path / "c"))
    assert len(list((sweep / SHARED_FOLDER).iterdir())) == 3


@pytest.mark.slow
def test_the_seeds_of_a_sweep_share_one_measurement(tiny_bert, glue_dir, tmp_path):
    """python train.py -m seed=1,2: the probe is the whole (fixture) dev split for both seeds,
    so one entry serves both, and a run alone (no sweep folder) writes none."""
    overrides = tiny_cli_overrides(tiny_bert, glue_dir, f"paths.log_dir={tmp_path}")
    result = run_cli("-m", "seed=1,2", *overrides)
    assert result.returncode == 0, result.stderr
    (sweep,) = (tmp_path / "multirun").iterdir()
    assert len(list((sweep / SHARED_FOLDER).iterdir())) == 1
    per_job = [json.loads((sweep / str(n) / "results.json").read_text()) for n in (0, 1)]
    assert epoch_zero(per_job[0]) == epoch_zero(per_job[1])
    result = run_cli(*overrides)
    assert result.returncode == 0, result.stderr
    assert len(list(tmp_path.glob(f"**/{SHARED_FOLDER}"))) == 1


def test_the_key_changes_with_any_weight_bit_batch_or_setting():
    weights = {"w": torch.tensor([1.0, 2.0])}
    batches = [
        {"input_ids": torch.tensor([[1, 2, 0]]), "attention_mask": torch.tensor([[1, 1, 0]])}
    ]
    key = pretrained_key(weights, batches, {"rogue_k": 3})
    assert key == pretrained_key({"w": torch.tensor([1.0, 2.0])}, batches, {"rogue_k": 3})
    nudged = {"w": torch.tensor([1.0, torch.nextafter(torch.tensor(2.0), torch.tensor(3.0))])}
    assert pretrained_key(nudged, batches, {"rogue_k": 3}) != key
    unpadded = [{k: v[:, :2] for k, v in batches[0].items()}]
    assert pretrained_key(weights, unpadded, {"rogue_k": 3}) != key
    assert pretrained_key(weights, batches, {"rogue_k": 2}) != key
    as_half = tensors_sha256([("w", weights["w"].half())]).hexdigest()
    assert as_half != tensors_sha256([("w", weights["w"])]).hexdigest()


def test_an_unreadable_or_foreign_entry_is_measured_again(tmp_path, caplog):
    shared = SharedPretrained(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / MEASURES_FILE).write_text("{not json")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / MEASURES_FILE).write_text('{"values": {}}')
    with caplog.at_level(logging.WARNING):
        assert shared.read("a") is None and shared.read("b") is None and shared.read("c") is None
    assert "unreadable" in caplog.text and "no entry of this version" in caplog.text


def test_an_entry_reads_back_what_was_written(tmp_path):
    figure = tmp_path / "pre_norm_epoch00.png"
    figure.write_bytes(b"png")
    shared = SharedPretrained(tmp_path / "shared")
    values = {"iso/pre_norm/iw": 0.1 + 0.2, "iso/pre_norm/twonn": float("nan")}
    shared.write("k", values, {"pre_norm": [3]}, [], {"pre_norm": figure})
    found = shared.read("k")
    assert found["values"]["iso/pre_norm/iw"] == 0.1 + 0.2
    assert json.dumps(found["values"]) == json.dumps(values)
    assert found["outliers"] == {"pre_norm": [3]}
    assert found["figures"]["pre_norm"].read_bytes() == b"png"
