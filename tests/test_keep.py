"""What a completed run keeps (``checkpoint.keep``): by default its best epoch's model only, which
every reader (analyze.py, test predictions) works from and a resume refuses with the way out;
``full`` keeps today's files; ``none`` no model. A run that did not complete keeps last.ckpt."""

from __future__ import annotations

import json
import logging
import shlex

import pytest
import torch
from hydra.types import RunMode

from isotune.errors import IsotuneError
from isotune.record.checkpoint_reading import KEEP_KEY
from isotune.record.kept_checkpoint import read_kept_checkpoint
from isotune.training.run import train
from tests.conftest import compose_train_config
from tests.helpers.analysis import analyzed_model
from tests.helpers.config_checks import problems
from tests.helpers.resume import KILL_AFTER_ONE, Killed, load
from tests.helpers.untrusted import folder_digest


def checkpoints(folder) -> list[str]:
    return sorted(path.name for path in (folder / "checkpoints").iterdir())


def predictions_warning(train_config, caplog, *overrides, output_dir) -> str:
    """The one warning of a completed run started again with ``overrides``; it writes nothing."""
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train(train_config(*overrides, output_dir=output_dir))
    (warning,) = [record.getMessage() for record in caplog.records]
    assert warning.startswith("write_test_predictions=true writes nothing here")
    assert not (output_dir / "predictions").exists()
    return warning


def test_a_completed_run_keeps_its_best_model_only_and_every_reader_works_from_it(
    train_config, tmp_path, caplog
):
    full = train(train_config("checkpoint.keep=full", output_dir=tmp_path / "full"))
    slim_dir = tmp_path / "slim"
    cfg = train_config("checkpoint.keep=slim", "write_test_predictions=true", output_dir=slim_dir)
    results = train(cfg)
    assert checkpoints(tmp_path / "full") == ["best.ckpt", "last.ckpt"]
    assert checkpoints(slim_dir) == ["best.ckpt"]  # last.ckpt went once the run completed
    best = slim_dir / "checkpoints" / "best.ckpt"
    assert results["best_checkpoint"] == str(best)
    slim, whole = load(best), load(full["best_checkpoint"])
    assert not {"optimizer_states", "lr_schedulers", "callbacks"} & slim.keys()
    assert slim[KEEP_KEY] == "slim" and "optimizer_states" in whole
    assert (
        best.stat().st_size < 0.6 * (tmp_path / "full" / "checkpoints" / "best.ckpt").stat().st_size
    )
    for name, tensor in whole["state_dict"].items():  # the same run, the same best model
        assert torch.equal(slim["state_dict"][name], tensor), name
    model = analyzed_model(best)  # as analyze.py reads it
    assert model.history == results["history"][: results["best_epoch"]]  # as of the best
    predictions = (slim_dir / "predictions" / f"{cfg.task.glue_dir}.tsv").read_text()
    assert len(predictions.splitlines()) == 11

    before = folder_digest(slim_dir)
    with pytest.raises(IsotuneError) as continued:  # continuing training from the slim file
        train(train_config(f"ckpt_path={best}", output_dir=tmp_path / "continued"))
    message = str(continued.value)
    assert "holds the model only" in message and "checkpoint.keep=full" in message
    assert "optimizer_states" in message
    assert "start afresh by leaving ckpt_path unset" in message  # resume=never would not do
    continued = tmp_path / "continued"
    afresh = train(train_config("checkpoint.keep=slim", output_dir=continued))  # the fix, as said
    assert afresh["status"] == "completed"
    # Typed again for its test predictions, it trains no more: it says what writes them.
    for_predictions = ("checkpoint.keep=slim", "write_test_predictions=true")
    assert predictions_warning(
        train_config, caplog, *for_predictions, output_dir=continued
    ).endswith(
        f"python predict.py ckpt_path={tmp_path / 'continued' / 'checkpoints' / 'best.ckpt'}"
    )
    # The same run started again in its folder (a sweep typed again, a requeue as it finished):
    # nothing left to train, it stands as it is; with other settings, one message.
    again = train(
        train_config("checkpoint.keep=slim", "write_test_predictions=true", output_dir=slim_dir)
    )
    assert again == json.loads((slim_dir / "results.json").read_text())
    assert again["status"] == "completed" and again["steps"] == results["steps"]
    with pytest.raises(IsotuneError) as other:
        train(train_config("checkpoint.keep=slim", "optim.lr=1e-4", output_dir=slim_dir))
    message = str(other.value)
    assert f"The checkpoint {best} comes from a run configured otherwise" in message
    assert "optim.lr" in message and "resume=never" in message
    assert folder_digest(slim_dir) == before  # the completed run's files as they were


def test_keep_none_keeps_no_model_and_a_failed_run_keeps_its_last_checkpoint(
    train_config, tmp_path, caplog
):
    results = train(train_config("checkpoint.keep=none", output_dir=tmp_path / "none"))
    assert results["status"] == "completed" and results["best_checkpoint"] is None
    assert checkpoints(tmp_path / "none") == []
    assert json.loads((tmp_path / "none" / "results.json").read_text())["best_checkpoint"] is None
    # Started again with its settings (a sweep typed again), by what its results.json records:
    # it stands as it is, quietly; with other settings, one message naming them.
    record = (tmp_path / "none" / "results.json").read_bytes()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = train(train_config("checkpoint.keep=none", output_dir=tmp_path / "none"))
    assert again == json.loads(record) and again["steps"] == results["steps"]
    assert not caplog.records  # no warning, no error
    assert (tmp_path / "none" / "results.json").read_bytes() == record
    for given in ("none/checkpoints/best.ckpt", "none"):  # analyze.py's ckpt_path
        with pytest.raises(IsotuneError, match="kept no model to analyse") as analysed:
            read_kept_checkpoint(str(tmp_path / given), "analyze.py")
        told = str(analysed.value)
        assert "completed with checkpoint.keep=none" in told and "python train.py " in told
        assert f" resume=never hydra.run.dir={tmp_path / 'none'} " in told
    told = predictions_warning(
        train_config,
        caplog,
        "checkpoint.keep=none",
        "write_test_predictions=true",
        output_dir=tmp_path / "none",
    )
    assert "kept no model (checkpoint.keep=none)" in told and "resume=never" in told
    assert (tmp_path / "none" / "results.json").read_bytes() == record
    with pytest.raises(IsotuneError) as other:
        train(train_config("checkpoint.keep=none", "seed=5", output_dir=tmp_path / "none"))
    message = str(other.value)
    assert "holds a completed run that kept no model" in message
    assert "seed: 1 -> 5" in message and "resume=never" in message
    assert (tmp_path / "none" / "results.json").read_bytes() == record

    with pytest.raises(Killed):  # killed as its second epoch starts
        train(train_config("checkpoint.keep=slim", KILL_AFTER_ONE, output_dir=tmp_path / "failed"))
    assert checkpoints(tmp_path / "failed") == ["best.ckpt", "last.ckpt"]  # it can continue
    assert "optimizer_states" in load(tmp_path / "failed" / "checkpoints" / "last.ckpt")


def test_a_study_job_that_kept_no_model_is_trained_again_as_that_one_job(tmp_path):
    """A study's job records ``study=...`` among its overrides: the command analyze.py gives
    trains that job alone (hydra.mode=RUN, not the whole sweep), with the study's settings, and
    keeps its model."""
    folder = tmp_path / "job"
    folder.mkdir()
    recorded = ["study=isotropy_cpu", "task=rte", "norm=isobn", "reg=none", "optim.lr=1e-4"]
    record = {"status": "completed", "best_checkpoint": None, "overrides": recorded}
    (folder / "results.json").write_text(json.dumps(record))
    with pytest.raises(IsotuneError, match="kept no model to analyse") as analysed:
        read_kept_checkpoint(folder / "checkpoints" / "best.ckpt", "analyze.py")
    command = str(analysed.value).split("Fix: train it again keeping its best model: ")[1]
    arguments = shlex.split(command.split(" (or ")[0])
    assert arguments[:2] == ["python", "train.py"]
    cfg = compose_train_config(arguments[2:])
    assert cfg.hydra.mode == RunMode.RUN and str(cfg.hydra.run.dir) == str(folder)
    assert cfg.checkpoint.keep == "slim" and cfg.resume == "never"
    assert (cfg.task.name, cfg.norm.name, cfg.optim.lr) == ("rte", "isobn", 1e-4)
    assert cfg.hydra.runtime.choices.trainer == "cpu_bf16"  # the study's own settings stand


def test_an_unknown_keep_is_refused_with_the_choices():
    assert problems("checkpoint.keep=some") == [
        "  checkpoint.keep='some': must be one of ['slim', 'full', 'none']"
    ]
