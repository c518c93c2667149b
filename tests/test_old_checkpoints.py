"""A checkpoint saved before the modules moved into their wings still resumes and analyses.

``tests/fixtures/pre_wings_last.ckpt`` was saved by main at 2c83975, before the move (the commit
that added it gives the script): the tiny BERT of ``tests/helpers/encoders.py`` on the GLUE
fixtures, with ``tiny_run_overrides`` and the model and data folders given as ``tiny-bert`` and
``glue`` (relative, as its config keeps them), killed as its second epoch started. Its config
names classes by their old paths (``isotune.checkpoints.RunCheckpoint``), which a resume compares
with the current config's (:data:`isotune.record.same_run.MOVED_MODULES` maps them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import get_object

from isotune.analysis.run import analyze
from isotune.record.checkpoint_reading import CONFIG_KEY, read_checkpoint
from isotune.record.checkpoints import RunCheckpoint
from isotune.record.rng_state import BatchRngState
from isotune.record.same_run import current_targets
from isotune.training.run import train
from tests.conftest import compose_config, compose_train_config, tiny_run_overrides, write_glue_dir
from tests.helpers.analysis import SMALL
from tests.helpers.encoders import save_tiny_encoder
from tests.helpers.resume import KILL_AFTER_ONE, disarmed

FIXTURE = Path(__file__).parent / "fixtures" / "pre_wings_last.ckpt"


@pytest.fixture
def fixture_folder(tmp_path, monkeypatch) -> list[str]:
    """The overrides the fixture was trained with, run from a folder holding its ``tiny-bert``
    and ``glue`` where its config names them."""
    monkeypatch.chdir(tmp_path)
    save_tiny_encoder("bert", Path("tiny-bert"))
    glue = write_glue_dir(Path("glue"))
    return [*tiny_run_overrides(Path("tiny-bert"), glue), KILL_AFTER_ONE]


def test_the_old_class_paths_it_names_read_as_the_classes_now():
    callbacks = read_checkpoint(FIXTURE)[CONFIG_KEY]["callbacks"]
    assert callbacks["model_checkpoint"]["_target_"] == "isotune.checkpoints.RunCheckpoint"
    assert callbacks["rng_state"]["_target_"] == "isotune.rng_state.BatchRngState"
    now = current_targets(callbacks)
    assert get_object(now["model_checkpoint"]["_target_"]) is RunCheckpoint
    assert get_object(now["rng_state"]["_target_"]) is BatchRngState
    for entry in now.values():  # every callback it names is found where it is now
        assert callable(get_object(entry["_target_"])), entry["_target_"]


def test_a_target_already_in_its_wing_or_outside_the_package_is_kept():
    kept = {
        "a": {"_target_": "isotune.record.checkpoints.RunCheckpoint"},
        "b": {"_target_": "isotune.callbacks.isotropy.IsotropyMonitor"},
        "c": [{"_target_": "lightning.pytorch.callbacks.EarlyStopping"}],
        "d": {"_target_": "isotune.training.run.RecordEveryEpoch"},
    }
    assert current_targets(kept) == kept
    assert current_targets({"_target_": "isotune.training.RecordEveryEpoch"}) == {
        "_target_": "isotune.training.run.RecordEveryEpoch"
    }


@pytest.mark.slow
def test_it_resumes_training_where_it_stopped(fixture_folder, tmp_path):
    saved = read_checkpoint(FIXTURE)
    with disarmed():
        results = train(
            compose_train_config([*fixture_folder, f"ckpt_path={FIXTURE}"], tmp_path / "resumed")
        )
    assert results["status"] == "completed"
    assert results["attempts"][-1]["resumed_at_step"] == saved["global_step"]
    history = results["history"]
    assert [entry["epoch"] for entry in history] == [1, 2]
    assert history[0] == saved["isotune_history"][0]  # the epoch trained before the move
    assert results["steps"] == 2 * saved["global_step"]


@pytest.mark.slow
def test_it_analyses(fixture_folder, tmp_path):
    max_length = read_checkpoint(FIXTURE)[CONFIG_KEY]["data"]["max_length"]
    overrides = [
        f"ckpt_path={FIXTURE}",
        "paths.glue_dir=glue",
        f"data.max_length={max_length}",
        "data.dev_examples=null",
        *SMALL,
    ]
    summary = analyze(compose_config("analyze", overrides, tmp_path / "analysis"))
    assert set(summary["verdicts"]) >= {"T1", "T2", "T3", "T4", "T5"}
    assert (tmp_path / "analysis" / "report.md").is_file()
