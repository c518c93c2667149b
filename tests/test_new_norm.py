"""docs/extending.md's claim, "A norm is its module, one entry in NORMS and one YAML file": a norm
added in just those three places composes, is checked, passes the checks of the norms' bookkeeping
and trains; the intervention, the study's arm and the docs rows are optional."""

from __future__ import annotations

import shutil

import pytest
from torch import Tensor, nn

import tests.conftest
import tests.helpers.presets
from isotune.norms.ranges import POSITIVE
from isotune.norms.registry import NORMS, Norm
from isotune.training.run import train
from tests.helpers.config_checks import problems
from tests.helpers.norms import (
    check_norm_configs,
    documented_options,
    norms_with_interventions,
    unranged_norm_options,
)


class Scale(nn.Module):
    """The added norm: the sentence vector times a fixed gain."""

    def __init__(self, num_features: int, gain: float = 1.0) -> None:
        super().__init__()
        POSITIVE.require(gain, "Scale gain")
        self.gain = gain

    def forward(self, h: Tensor) -> Tensor:
        return h * self.gain


@pytest.fixture
def scale_norm(tmp_path, monkeypatch):
    """``norm=scale`` added as its class, its entry and ``conf/norm/scale.yaml`` (in a copy of
    conf/ that the tests compose from and read), nothing else."""
    conf = shutil.copytree(tests.conftest.CONF_DIR, tmp_path / "conf")
    (conf / "norm" / "scale.yaml").write_text(
        "# The sentence vector times a gain.\nname: scale\ngain: 2.0\n"
    )
    monkeypatch.setitem(NORMS, "scale", Norm(Scale, {"gain": POSITIVE}))
    monkeypatch.setattr(tests.conftest, "CONF_DIR", conf)  # what the tests compose
    monkeypatch.setattr(tests.helpers.presets, "CONF_DIR", conf)  # what they read
    return "scale"


def test_a_norm_added_as_module_entry_and_yaml_passes_the_norms_bookkeeping(scale_norm):
    check_norm_configs()  # its YAML names its entry and builds its module
    assert unranged_norm_options(scale_norm) == []
    # Optional, so not asked of it: an intervention (and with it the study's arm) and docs rows.
    assert scale_norm not in norms_with_interventions()
    documented, expected = documented_options("norm")
    assert scale_norm not in documented and documented == expected


def test_an_added_norms_options_are_checked_by_the_range_on_its_entry(scale_norm):
    assert problems("norm=scale", "norm.gain=0") == ["  norm.gain=0: must be a finite number > 0"]


def test_an_added_norm_trains(scale_norm, train_config):
    cfg = train_config("norm=scale", "norm.gain=0.5", "debug=limit", "trainer.max_epochs=1")
    results = train(cfg)
    assert results["status"] == "completed" and results["norm"] == "scale"
