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
from tests import test_configs, test_extending, test_registry, test_train
from tests.helpers.config_checks import problems


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
    for module, name in [
        (tests.conftest, "CONF_DIR"),
        (tests.helpers.presets, "CONF_DIR"),
        (test_registry, "CONF_DIR"),
        (test_extending, "CONF"),
    ]:
        monkeypatch.setattr(module, name, conf)
    return "scale"


def test_a_norm_added_as_module_entry_and_yaml_passes_the_norms_bookkeeping(scale_norm, tmp_path):
    test_registry.test_every_norm_config_names_its_registry_key_and_every_key_has_a_config()
    test_registry.test_every_norm_config_builds_its_registered_module()
    test_registry.test_the_baseline_norm_is_registered_first()
    test_configs.test_every_norm_composes_and_builds(scale_norm, tmp_path)
    test_extending.test_every_norm_option_has_a_range_on_its_entry(scale_norm)
    # Optional, so not asked of it: an intervention (and with it the study's arm) and docs rows.
    assert scale_norm not in test_extending.norms_with_interventions()
    test_extending.test_the_config_groups_table_names_every_option_and_no_other("norm")
    test_extending.test_every_intervention_is_an_arm_of_the_study_of_every_intervention()
    test_extending.test_interventions_doc_tables_every_regularizer_and_intervention()


def test_an_added_norm_trains_and_weight_decay_spares_it(scale_norm, train_config):
    results = train(train_config("norm=scale", "debug=limit", "trainer.max_epochs=1"))
    assert results["status"] == "completed" and results["norm"] == "scale"
    test_train.test_weight_decay_spares_the_norm_and_every_gain_or_bias_by_where_it_lives(
        train_config, scale_norm
    )


def test_an_added_norms_options_are_checked_by_the_range_on_its_entry(scale_norm):
    assert problems("norm=scale", "norm.gain=0") == ["  norm.gain=0: must be a finite number > 0"]
