"""results.json through a run's life: rewritten at every epoch end (so that the age of a killed
job's file tells it from a slow one), and Ctrl-C or SIGTERM recorded as ``interrupted`` with the
command that resumes the run."""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, read_write

from isotune.atomic_files import write_text
from isotune.errors import NoSpaceLeft
from isotune.model.classifier import GLUEClassifier
from isotune.record.resume import interrupted_runs_like
from isotune.training import fit
from isotune.training import run as training
from isotune.training.cli import (
    INTERRUPTED_EXIT_CODE,
    user_errors_reported,
    warn_of_interrupted_runs,
)
from isotune.training.run import train
from tests.conftest import compose_train_config
from tests.helpers.fake_runs import write_run

STEPS_PER_EPOCH = 64 // 8  # fixture training examples / data.batch_size of the tiny run


def read_results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def epochs(results: dict) -> list[int]:
    return [entry["epoch"] for entry in results.get("history", [])]


@pytest.fixture
def sigint_restored():
    """Lightning ignores SIGINT once it has caught a KeyboardInterrupt; give Ctrl-C back."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


@pytest.mark.slow
def test_results_json_is_rewritten_at_every_epoch_end(train_config, tmp_path, monkeypatch):
    snapshots = []  # results.json as each epoch starts
    monkeypatch.setattr(
        GLUEClassifier,
        "on_train_epoch_start",
        lambda self: snapshots.append(read_results(tmp_path)),
    )
    final = train(train_config("trainer.max_epochs=3"))

    start, after_one, after_two = snapshots
    assert start["status"] == "running" and epochs(start) == [] and start["steps"] == 0
    # Written since the start (epoch 0's isotropy), in whole seconds: no earlier than the start.
    assert start["started_at"] <= start["updated_at"]
    for done, snapshot in ((1, after_one), (2, after_two)):
        assert snapshot["status"] == "running"
        assert epochs(snapshot) == list(range(1, done + 1))
        assert snapshot["steps"] == done * STEPS_PER_EPOCH
        assert snapshot["history"] == final["history"][:done]
        best = max(snapshot["history"], key=lambda entry: entry["accuracy"])
        assert snapshot["best_epoch"] == best["epoch"]
        assert snapshot["best"]["accuracy"] == best["accuracy"]
        per_epoch = snapshot["isotropy"]["per_epoch"]
        assert sorted(per_epoch) == [str(e) for e in range(done + 1)]  # epoch 0: pre-trained
        assert per_epoch == {e: final["isotropy"]["per_epoch"][e] for e in per_epoch}
    assert start["updated_at"] <= after_one["updated_at"] <= after_two["updated_at"]
    assert after_two["updated_at"] <= final["updated_at"] == read_results(tmp_path)["updated_at"]
    assert final["status"] == "completed" and epochs(final) == [1, 2, 3]


def interrupted_by_the_cli(cfg, caplog, monkeypatch) -> tuple[int, list[str]]:
    """Run as ``python train.py`` would (train.py's main); its exit code and Ctrl-C message."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with (
        pytest.raises(SystemExit) as stopped,
        caplog.at_level(logging.WARNING, "isotune"),
        user_errors_reported(cfg),
    ):
        train(cfg)
    messages = [r.getMessage() for r in caplog.records if r.name == "isotune"]
    return stopped.value.code, messages


def plain_run(cfg: DictConfig) -> DictConfig:
    """``cfg`` as ``python train.py <overrides>`` runs it: Hydra's run mode, its folder chosen
    by Hydra (no hydra.run.dir typed)."""
    return in_mode(cfg, RunMode.RUN)


def in_mode(cfg: DictConfig, mode: RunMode) -> DictConfig:
    with read_write(cfg.hydra):
        cfg.hydra.mode = mode
    HydraConfig().set_config(cfg)
    return cfg


def ctrl_c() -> None:
    raise KeyboardInterrupt


def sigterm() -> None:
    """What a cluster's time limit or preemption sends; Lightning's handler (installed for ``fit``
    only) stops the run after the current batch."""
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "stopped_by", "steps_in_epoch_two"),
    [(ctrl_c, signal.SIGINT, 2), (sigterm, signal.SIGTERM, 3)],
)  # Ctrl-C stops at once (from the last epoch end); SIGTERM after the batch it came in, saved
def test_a_signal_during_fit_is_recorded_and_the_console_says_how_to_resume(
    stop,
    stopped_by,
    steps_in_epoch_two,
    train_config,
    tmp_path,
    monkeypatch,
    caplog,
    sigint_restored,
):
    def stop_in_the_second_epoch(self, batch, batch_idx):
        if self.current_epoch == 1 and batch_idx == 2:
            stop()

    monkeypatch.setattr(GLUEClassifier, "on_train_batch_start", stop_in_the_second_epoch)
    runs = tmp_path / "runs"  # as logs/runs/ holds the folders of plain runs
    run = runs / "2026-12-01_09-00-00-000000"
    cfg = train_config(output_dir=run)
    exit_code, messages = interrupted_by_the_cli(cfg, caplog, monkeypatch)

    assert exit_code == {signal.SIGINT: INTERRUPTED_EXIT_CODE, signal.SIGTERM: 143}[stopped_by]
    results = read_results(run)
    assert (results["status"], results["interrupted_by"], results["error"]) == (
        "interrupted",
        stopped_by.name,
        None,
    )
    assert epochs(results) == [1] and results["steps"] == STEPS_PER_EPOCH + steps_in_epoch_two
    checkpoint = run / "checkpoints" / "last.ckpt"
    saved_at = STEPS_PER_EPOCH + (steps_in_epoch_two if stopped_by == signal.SIGTERM else 0)
    assert torch.load(checkpoint, weights_only=True)["global_step"] == saved_at
    resume = shlex.join(["python", "train.py", *cfg.hydra.overrides.task, f"hydra.run.dir={run}"])
    assert messages == [
        f"Interrupted ({stopped_by.name}). Output directory: {run}\n"
        f"Resume it in its folder, from its checkpoints/last.ckpt: {resume}"
    ]

    # The same command typed again (no hydra.run.dir) starts over in a new folder beside it:
    # its start names the interrupted run and that command, and continues nothing (stopped here
    # while loading, as Ctrl-C would).
    caplog.clear()
    again = plain_run(train_config(output_dir=runs / "2026-12-01_10-00-00-000000"))
    monkeypatch.setattr(fit, "load_tokenizer", lambda name_or_path: ctrl_c())
    _, messages = interrupted_by_the_cli(again, caplog, monkeypatch)
    assert messages[0] == (
        f"A run with these settings was interrupted in {run}; this one starts over in a new "
        f"folder, {again.paths.output_dir}, and continues nothing. To continue that run instead, "
        f"stop this one (Ctrl-C). Resume it in its folder, from its checkpoints/last.ckpt: {resume}"
    )
    assert read_results(Path(again.paths.output_dir))["attempts"][0]["resumed_from"] is None

    monkeypatch.undo()  # no more signals: the printed command finishes the run in its folder
    resumed = train(train_config(output_dir=run))
    assert resumed["status"] == "completed" and epochs(resumed) == [1, 2]
    assert resumed["steps"] == 2 * STEPS_PER_EPOCH
    first, second = resumed["attempts"]
    assert (first["status"], first["ended_by"], first["resumed_from"]) == (
        "interrupted",
        stopped_by.name,
        None,
    )
    assert (second["status"], second["resumed_from"], second["resumed_at_step"]) == (
        "completed",
        str(checkpoint),
        saved_at,
    )
    assert read_results(run) == resumed


def leave_run(folder: Path, record: dict, last_checkpoint: bool = True) -> Path:
    """A run folder as train.py leaves it, written directly: its results.json (and last.ckpt)."""
    write_run(folder, record["overrides"], record)
    if last_checkpoint:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    return folder


def test_only_interrupted_runs_of_the_same_command_that_can_continue_are_found_beside_a_new_run(
    tmp_path,
):
    settings = {"task": "rte", "norm": "isobn", "seed": 1, "overrides": ["norm=isobn", "seed=1"]}
    runs = tmp_path / "runs"
    interrupted = {**settings, "status": "interrupted", "steps": 12}
    same = leave_run(runs / "a", interrupted)
    reordered = leave_run(runs / "b", {**interrupted, "overrides": ["seed=1", "norm=isobn"]})
    leave_run(runs / "c", {**interrupted, "status": "completed"})
    leave_run(runs / "d", interrupted, last_checkpoint=False)  # nothing to continue from
    leave_run(runs / "e", {**interrupted, "overrides": ["norm=isobn", "seed=1", "logger=none"]})
    leave_run(runs / "f", {**interrupted, "seed": 2})  # the same command, other config files
    leave_run(runs / "g", interrupted).joinpath("results.json").write_text('{"interrupted"')
    new = leave_run(runs / "new", interrupted)  # its own folder is not another run
    assert interrupted_runs_like(new, settings) == [same, reordered]


def test_a_new_run_warns_of_an_interrupted_one_only_where_its_command_chose_no_folder(
    tmp_path, caplog
):
    runs = tmp_path / "runs"
    overrides = ["norm=isobn", "seed=1"]
    cfg = plain_run(compose_train_config(overrides, runs / "new"))
    settings = {"norm": "isobn", "seed": 1, "overrides": overrides}
    earlier = leave_run(runs / "earlier", {**settings, "status": "interrupted", "steps": 12})
    with caplog.at_level(logging.WARNING, "isotune"):
        warn_of_interrupted_runs(cfg, settings)
        (warning,) = [record.getMessage() for record in caplog.records]
        assert f"interrupted in {earlier}; this one starts over in a new folder" in warning
        caplog.clear()
        typed = compose_train_config([*overrides, f"hydra.run.dir={runs / 'new'}"], runs / "new")
        warn_of_interrupted_runs(plain_run(typed), settings)  # typed again: the same folder
        sweep_job = in_mode(compose_train_config(overrides, runs / "new"), RunMode.MULTIRUN)
        warn_of_interrupted_runs(sweep_job, settings)
    assert caplog.records == []


@pytest.mark.slow
def test_a_signal_as_a_trained_run_records_its_end_leaves_it_completed_and_stops_the_job(
    train_config, tmp_path, monkeypatch, caplog
):
    """A time limit can come after the last batch, while the run removes its last.ckpt and
    writes its end: the run is recorded completed (not interrupted, with no last.ckpt to continue
    from), and the job still stops with the signal's status, so a sweep does not go on."""
    keep = training.keep_of_completed_run

    def sigterm_then_keep(*args):
        sigterm()
        keep(*args)

    monkeypatch.setattr(training, "keep_of_completed_run", sigterm_then_keep)
    cfg = train_config("checkpoint.keep=slim")
    exit_code, messages = interrupted_by_the_cli(cfg, caplog, monkeypatch)

    assert exit_code == 143
    results = read_results(tmp_path)
    assert (results["status"], results["steps"], epochs(results)) == (
        "completed",
        2 * STEPS_PER_EPOCH,
        [1, 2],
    )
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()  # keep=slim, as users run
    assert messages == [
        f"Stopped (SIGTERM) as the run recorded its end: it completed, its results.json says so, "
        f"and started again it stands as it is. Output directory: {tmp_path}"
    ]
    monkeypatch.undo()
    assert train(cfg) == results  # started again: as it stands


def test_ctrl_c_before_fit_is_recorded_and_the_console_says_how_to_start_again(
    train_config, tmp_path, monkeypatch, caplog
):
    def ctrl_c_while_loading(name_or_path):
        raise KeyboardInterrupt

    monkeypatch.setattr(fit, "load_tokenizer", ctrl_c_while_loading)
    cfg = train_config()
    exit_code, messages = interrupted_by_the_cli(cfg, caplog, monkeypatch)

    assert exit_code == INTERRUPTED_EXIT_CODE
    results = read_results(tmp_path)
    assert (results["status"], results["error"], results["steps"]) == ("interrupted", None, 0)
    again = shlex.join(
        ["python", "train.py", *cfg.hydra.overrides.task, f"hydra.run.dir={tmp_path}"]
    )
    assert messages == [
        f"Interrupted (SIGINT). Output directory: {tmp_path}\n"
        f"No checkpoint was saved yet; start it again in its folder: {again}"
    ]


def test_an_error_while_recording_a_failure_still_ends_the_record_failed_with_both(
    train_config, tmp_path, monkeypatch
):
    def history_without_the_metric(self):
        raise KeyError("f1")  # as an RTE checkpoint's history read by an MRPC run once did

    monkeypatch.setattr(GLUEClassifier, "best_epoch", history_without_the_metric)
    with pytest.raises(KeyError):
        train(train_config("debug=limit"))
    results = read_results(tmp_path)
    assert results["status"] == "failed"
    assert results["error"] == ("KeyError: 'f1'; then, while recording it: KeyError: 'f1'")
    assert results["attempts"][-1]["status"] == "failed" and "finished_at" in results


def test_a_full_disk_while_recording_is_one_message_and_wandb_still_finishes(
    train_config, tmp_path, monkeypatch
):
    def full_after_the_start(path, text):
        if (tmp_path / "results.json").exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_text(path, text)

    finished = []
    monkeypatch.setattr("isotune.record.results.write_text", full_after_the_start)
    monkeypatch.setattr(
        training, "finish_wandb_runs", lambda loggers, record: finished.append(record["status"])
    )
    with pytest.raises(NoSpaceLeft, match=r"Cannot write .*results\.json: No space left on device"):
        train(train_config("debug=limit"))
    assert finished == ["failed"]  # the handler survived the failed record write
    assert read_results(tmp_path)["status"] == "running"  # as last written, whole and readable


@pytest.mark.slow
def test_a_norm_that_never_updated_its_statistics_is_named_in_the_record(train_config, tmp_path):
    results = train(train_config("norm=isobn", "trainer.limit_train_batches=0"))
    assert results["status"] == "completed" and results["steps"] == 0
    (warning,) = results["warnings"]
    assert warning.startswith("norm=isobn never updated its running statistics")
    assert read_results(tmp_path)["warnings"] == [warning]
    assert train(train_config("norm=isobn", "debug=limit"))["warnings"] == []
