"""Seeds for what they seed: seed_init (new layers, dropout) and seed_data (batch order, subsets)
default to seed, act apart, and the aggregate pairs runs by whichever of them varies."""

from __future__ import annotations

import pytest
import torch

from isotune.errors import IsotuneError
from isotune.model.classifier import GLUEClassifier
from isotune.record.checkpoint_reading import CONFIG_KEY
from isotune.record.same_run import check_same_run, run_config
from isotune.sweeps import aggregate
from isotune.sweeps.runs import Run
from isotune.sweeps.seeds import SeedAxis
from isotune.training.run import train
from tests.conftest import compose_train_config
from tests.helpers.fake_runs import completed, write_run


def seeded(seed: int, seed_init: int | None = None, seed_data: int | None = None) -> Run:
    result = completed("minilm", "none", "rte", seed, 0.6)
    for key, value in (("seed_init", seed_init), ("seed_data", seed_data)):
        if value is not None:
            result[key] = value
    return Run(None, result)


@pytest.mark.parametrize(
    ("runs", "axis", "keys"),
    [
        ([seeded(1, 1, 1), seeded(2, 2, 2)], "seed", [1, 2]),
        ([seeded(1), seeded(2)], "seed", [1, 2]),  # older runs: seed set both
        ([seeded(1, 1, 7), seeded(1, 2, 7)], "seed_init", [1, 2]),
        ([seeded(1, 5, 1), seeded(1, 5, 2)], "seed_data", [1, 2]),
        ([seeded(1, 1, 2), seeded(1, 2, 1)], "seed_init/seed_data", ["1/2", "2/1"]),
    ],
)
def test_the_seed_that_varies_pairs_the_runs(runs, axis, keys):
    seeds = SeedAxis.of(runs)
    assert seeds.name == axis and [seeds.key(run) for run in runs] == keys


def test_a_sweep_of_seed_init_pairs_its_configurations_by_it(tmp_path):
    """``-m norm=none,isobn seed_init=1,2,3 seed_data=7``: seed_init is no part of a
    configuration, and each seed_init is a pair."""
    for norm, offset in (("none", 0.0), ("isobn", 0.02)):
        for seed_init in (1, 2, 3):
            result = completed("minilm", norm, "rte", 42, 0.6 + offset + seed_init / 100)
            result |= {"seed_init": seed_init, "seed_data": 7}
            overrides = [f"norm={norm}", f"seed_init={seed_init}", "seed_data=7"]
            write_run(tmp_path / f"{norm}-{seed_init}", overrides, result)
    result = aggregate.aggregate([tmp_path])
    assert result.seeds.name == "seed_init"
    assert result.configurations.names == ["norm=none", "norm=isobn"]
    (row,) = result.paired.itertuples(index=False)
    assert (row.n, row.median_difference) == (3, pytest.approx(2.0))


@pytest.mark.slow
def test_runs_sharing_seed_data_see_the_same_batches_whatever_their_norm_and_init(
    train_config, tmp_path, monkeypatch
):
    batches, heads = [], []
    training_step = GLUEClassifier.training_step

    def recording_step(self, batch, batch_idx):
        batches[-1].append(batch["idx"].tolist())
        return training_step(self, batch, batch_idx)

    def record_head(self):
        batches.append([])
        heads.append(self.head.weight.detach().clone())

    monkeypatch.setattr(GLUEClassifier, "training_step", recording_step)
    monkeypatch.setattr(GLUEClassifier, "on_fit_start", record_head, raising=False)
    runs = {
        "none": ("norm=none",),
        "isobn, another init": ("norm=isobn", "seed_init=2"),
        "none, another order": ("norm=none", "seed_data=2"),
    }
    for name, overrides in runs.items():
        cfg = train_config("debug=limit", *overrides, output_dir=tmp_path / name)
        results = train(cfg)
        assert results["status"] == "completed"
    none, isobn, reordered = batches
    assert len(none) == 2 * 4 and none == isobn  # two epochs of four batches, in one order
    assert reordered != none
    assert not torch.equal(heads[0], heads[1])  # seed_init changes the head
    assert torch.equal(heads[0], heads[2])  # seed_data does not


def test_a_resume_compares_the_split_seeds_but_not_the_margin(tmp_path):
    def config(*overrides: str) -> dict:
        return run_config(compose_train_config(list(overrides), tmp_path))

    saved = config()
    checkpoint = {CONFIG_KEY: saved}
    for changed in ("failure.margin=0.05", "seed_data=42"):  # seed_data=42: the default, spelled
        check_same_run(checkpoint, tmp_path, config(changed))
    with pytest.raises(IsotuneError, match=r"seed_data: 42 -> 2"):
        check_same_run(checkpoint, tmp_path, config("seed_data=2"))
    # A checkpoint from before the split seeded both with its seed.
    older = {CONFIG_KEY: {k: v for k, v in saved.items() if k not in ("seed_init", "seed_data")}}
    check_same_run(older, tmp_path, config())
    with pytest.raises(IsotuneError, match=r"seed_init: 42 -> 3"):
        check_same_run(older, tmp_path, config("seed_init=3"))
