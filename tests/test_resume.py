"""last.ckpt is the last epoch, and a run resumed from it repeats the uninterrupted run exactly."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from isotune.errors import IsotuneError, RunInterrupted
from isotune.record.checkpoint_reading import FIX_CKPT_PATH, FIX_OWN_LAST, read_checkpoint
from isotune.record.rng_state import capture_rng_state, restore_rng_state
from isotune.training.run import train
from tests.helpers.resume import KILL, Killed, disarmed, kill_and_resume, load
from tests.helpers.untrusted import folder_digest

RUN = ("norm=isobn", "debug=limit", "trainer.max_epochs=3", "seed=7")


def isotropy_history(checkpoint: dict) -> dict:
    return checkpoint["callbacks"]["IsotropyMonitor"]["history"]


@pytest.mark.slow
def test_last_checkpoint_is_written_after_every_epoch(train_config, tmp_path):
    results = train(train_config(*RUN))
    assert results["steps"] == 12 and len(results["history"]) == 3
    last = load(tmp_path / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 12 and last["epoch"] == 2
    assert [entry["epoch"] for entry in last["isotune_history"]] == [1, 2, 3]
    best = load(tmp_path / "checkpoints" / "best.ckpt")
    assert results["best_checkpoint"] == str(tmp_path / "checkpoints" / "best.ckpt")
    assert best["global_step"] == 4 * results["best_epoch"]


@pytest.mark.slow
def test_resume_after_a_non_improving_epoch_repeats_the_uninterrupted_run(train_config, tmp_path):
    full, resumed, full_dir, killed_dir, resumed_dir = kill_and_resume(train_config, tmp_path, *RUN)
    primary = full["primary_metric"]
    scores = [entry[primary] for entry in full["history"]]
    assert scores[1] <= scores[0], "the interruption must follow an epoch that did not improve"
    interrupted = load(killed_dir / "checkpoints" / "last.ckpt")
    assert interrupted["global_step"] == 8  # epoch 2 did not improve, last.ckpt still holds it

    assert resumed["steps"] == full["steps"] == 12
    assert resumed["history"] == full["history"]
    assert resumed["isotropy"]["per_epoch"] == full["isotropy"]["per_epoch"]
    expected, actual = (
        load(full_dir / "checkpoints/last.ckpt"),
        load(resumed_dir / "checkpoints/last.ckpt"),
    )
    assert isotropy_history(actual) == isotropy_history(expected)
    for name, tensor in expected["state_dict"].items():
        assert torch.equal(actual["state_dict"][name], tensor), name


@pytest.mark.slow
def test_best_checkpoint_holds_the_best_epoch_whether_resumed_in_its_folder_or_elsewhere(
    train_config, tmp_path
):
    full, elsewhere, full_dir, killed_dir, elsewhere_dir = kill_and_resume(
        train_config, tmp_path, *RUN
    )
    assert full["best_epoch"] < len(full["history"]), "the best epoch must not be the last"
    with disarmed():  # the command the console prints: the same run in its own folder
        in_place = train(train_config(*RUN, KILL, output_dir=killed_dir))

    expected = load(full_dir / "checkpoints/best.ckpt")
    for results, folder in ((elsewhere, elsewhere_dir), (in_place, killed_dir)):
        assert (results["best_epoch"], results["best"]) == (full["best_epoch"], full["best"])
        assert results["best_checkpoint"] == str(folder / "checkpoints" / "best.ckpt")
        actual = load(folder / "checkpoints/best.ckpt")
        assert actual["global_step"] == expected["global_step"]
        for name, tensor in expected["state_dict"].items():
            assert torch.equal(actual["state_dict"][name], tensor), (folder.name, name)

    # One run, one folder: its attempts, and one metrics.csv with every step once.
    assert [a["status"] for a in in_place["attempts"]] == ["failed", "completed"]
    assert in_place["attempts"][1]["resumed_at_step"] == 8
    assert in_place["history"] == full["history"]
    full_csv = pd.read_csv(full_dir / "csv/metrics.csv")
    in_place_csv = pd.read_csv(killed_dir / "csv/metrics.csv")
    pd.testing.assert_frame_equal(in_place_csv[full_csv.columns], full_csv)


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_starts_again_without_its_earlier_rows(
    train_config, tmp_path
):
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    train(train_config(*RUN, output_dir=full_dir))
    kill_in_first_epoch = KILL.replace("epoch:2", "epoch:0")
    with pytest.raises(Killed):
        train(train_config(*RUN, kill_in_first_epoch, output_dir=killed_dir))
    assert not (killed_dir / "checkpoints" / "last.ckpt").exists()
    assert len(pd.read_csv(killed_dir / "csv/metrics.csv")) > 0  # the killed attempt's rows
    with disarmed():  # started again in its folder: from step 0, as there is no checkpoint
        again = train(train_config(*RUN, kill_in_first_epoch, output_dir=killed_dir))
    assert [attempt["resumed_from"] for attempt in again["attempts"]] == [None, None]
    full_csv = pd.read_csv(full_dir / "csv/metrics.csv")
    again_csv = pd.read_csv(killed_dir / "csv/metrics.csv")
    pd.testing.assert_frame_equal(again_csv[full_csv.columns], full_csv)


def test_rng_state_round_trip_restores_every_generator():
    state = capture_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(3))
    restore_rng_state(state)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])
    # Plain Python values and tensors only: loadable with torch.load(weights_only=True).
    assert isinstance(state["numpy"][1], list)


LIMIT = ("debug=limit",)  # two epochs of four steps


@pytest.mark.slow
def test_a_resume_with_other_settings_is_refused_and_leaves_the_run_folder_as_it_was(
    train_config, tmp_path
):
    train(train_config(*LIMIT))
    before = folder_digest(tmp_path)

    with pytest.raises(IsotuneError) as refused:
        train(train_config(*LIMIT, "norm=isobn"))
    message = str(refused.value)
    assert f"The checkpoint {tmp_path / 'checkpoints' / 'last.ckpt'} comes from a run" in message
    assert "norm.name: 'none' -> 'isobn'" in message and "norm.momentum" in message
    assert "resume=never" in message
    assert folder_digest(tmp_path) == before  # nothing written (the CLI: test_untrusted.py)


@pytest.mark.slow
def test_an_explicit_checkpoint_of_another_adaptation_is_refused_naming_the_keys(
    train_config, tmp_path
):
    train(train_config(*LIMIT, output_dir=tmp_path / "full"))
    resume = f"ckpt_path={tmp_path}/full/checkpoints/last.ckpt"
    with pytest.raises(IsotuneError) as refused:
        train(train_config(*LIMIT, "adapt=lora", resume, output_dir=tmp_path / "lora"))
    assert "adapt.name: 'full' -> 'lora'" in str(refused.value)
    new_record = json.loads((tmp_path / "lora" / "results.json").read_text())
    assert new_record["status"] == "failed" and "adapt.name" in new_record["error"]


@pytest.mark.slow
def test_a_truncated_checkpoint_or_another_file_is_one_clear_error(train_config, tmp_path):
    train(train_config(*LIMIT, output_dir=tmp_path / "run"))
    last = (tmp_path / "run" / "checkpoints" / "last.ckpt").read_bytes()
    (tmp_path / "truncated.ckpt").write_bytes(last[: len(last) // 2])
    for bad in (tmp_path / "truncated.ckpt", tmp_path / "run" / "results.json"):
        with pytest.raises(IsotuneError) as refused:
            train(train_config(*LIMIT, f"ckpt_path={bad}", output_dir=tmp_path / bad.stem))
        assert str(refused.value).startswith(
            f"Cannot read {bad} as a checkpoint written by train.py: it is not a complete "
            "PyTorch checkpoint file"
        )


def test_a_checkpoint_that_cannot_be_read_names_the_fix_of_the_command_reading_it(tmp_path):
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    for fix in (FIX_CKPT_PATH, FIX_OWN_LAST, "any fix"):
        with pytest.raises(IsotuneError) as refused:
            read_checkpoint(empty, fix=fix)
        assert str(refused.value).endswith(f"Fix: {fix}.")
    assert "resume=never" not in FIX_CKPT_PATH  # ckpt_path wins over resume: it changes nothing
    with pytest.raises(IsotuneError) as refused:
        read_checkpoint(tmp_path / "missing.ckpt", fix="any fix")
    missing = tmp_path / "missing.ckpt"
    assert str(refused.value) == f"ckpt_path={missing} does not exist. Fix: any fix."


def test_a_run_folder_as_ckpt_path_names_the_checkpoints_in_it(tmp_path):
    with pytest.raises(IsotuneError) as refused:
        read_checkpoint(tmp_path, fix="any fix")
    assert str(refused.value) == (
        f"ckpt_path={tmp_path} is a folder without checkpoints. Fix: any fix."
    )
    (tmp_path / "checkpoints").mkdir()
    for name in ("last.ckpt", "best.ckpt"):
        (tmp_path / "checkpoints" / name).write_bytes(b"")
    for folder in (tmp_path, tmp_path / "checkpoints"):
        with pytest.raises(IsotuneError) as refused:
            read_checkpoint(folder, fix="any fix")
        assert str(refused.value) == (
            f"ckpt_path={folder} is a folder, not a checkpoint file. Fix: "
            f"ckpt_path={tmp_path}/checkpoints/best.ckpt or "
            f"ckpt_path={tmp_path}/checkpoints/last.ckpt."
        )


@pytest.mark.slow
def test_a_broken_ckpt_path_names_a_fix_that_works_for_train_py(train_config, tmp_path):
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    with pytest.raises(IsotuneError) as refused:
        train(train_config(*LIMIT, f"ckpt_path={empty}", output_dir=tmp_path / "run"))
    assert str(refused.value).endswith(
        "Fix: point ckpt_path at checkpoints/last.ckpt (or best.ckpt) of a run folder written by "
        "train.py, or leave ckpt_path unset to start without it."
    )
    # The fix as it says: ckpt_path unset (resume=never alone would change nothing).
    again = train(train_config(*LIMIT, output_dir=tmp_path / "run"))
    assert again["status"] == "completed" and again["steps"] == 8


@pytest.mark.slow
def test_a_broken_last_checkpoint_in_its_folder_names_a_fix_that_works(train_config, tmp_path):
    train(train_config(*LIMIT))
    last = tmp_path / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])  # a copy cut short
    with pytest.raises(IsotuneError) as refused:
        train(train_config(*LIMIT))
    assert str(refused.value).endswith(
        "Fix: start afresh in this folder with resume=never (its broken last.ckpt is replaced at "
        "the first save), or in a new folder (leave hydra.run.dir unset)."
    )
    again = train(train_config(*LIMIT, "resume=never"))  # the fix as it says
    assert again["status"] == "completed" and again["steps"] == 8
    assert load(last)["global_step"] == 8


@pytest.mark.slow
def test_resume_never_starts_afresh_in_the_folder_and_keeps_the_earlier_attempt(
    train_config, tmp_path
):
    first = train(train_config(*LIMIT))
    again = train(train_config(*LIMIT, "resume=never"))
    assert again["steps"] == first["steps"] == 8
    assert again["history"] == first["history"]  # the same seeded run, from the start
    assert [attempt["resumed_from"] for attempt in again["attempts"]] == [None, None]
    assert [attempt["status"] for attempt in again["attempts"]] == ["completed", "completed"]


class SignalAtBatch(L.Callback):
    """Sends ``signum`` to this process as batch ``batch`` of epoch ``epoch`` (0-based) starts,
    while ``armed`` (as a scheduler would: the run does not know it comes)."""

    armed = True

    def __init__(self, epoch: int, batch: int, signum: int) -> None:
        self.epoch, self.batch, self.signum = epoch, batch, signum

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if self.armed and (trainer.current_epoch, batch_idx) == (self.epoch, self.batch):
            os.kill(os.getpid(), self.signum)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "signum"),
    [(("norm=isobn",), signal.SIGUSR2), (("reg=istar",), signal.SIGTERM)],
    ids=["isobn-SIGUSR2", "istar-SIGTERM"],
)
def test_a_signal_mid_epoch_saves_that_step_and_the_run_continues_there_exactly(
    overrides, signum, train_config, tmp_path, caplog
):
    run = (*overrides, "debug=limit", "trainer.max_epochs=3", "seed=7")  # 4 batches an epoch
    send = (
        f"+callbacks.signal={{_target_:{__name__}.SignalAtBatch,epoch:1,batch:1,signum:{signum}}}"
    )
    full = train(train_config(*run, output_dir=tmp_path / "full"))
    caplog.set_level(logging.INFO)
    with pytest.raises(RunInterrupted) as stopped:
        train(train_config(*run, send, output_dir=tmp_path / "run"))
    assert stopped.value.signal == signum
    assert "weights_only" not in caplog.text  # the save says what it writes: no alarming notice

    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (record["status"], record["interrupted_by"]) == ("interrupted", signum.name)
    assert record["steps"] == 4 + 2  # the batch it came in was finished, and saved
    assert load(tmp_path / "run" / "checkpoints/last.ckpt")["global_step"] == 6

    SignalAtBatch.armed = False
    try:
        resumed = train(train_config(*run, send, output_dir=tmp_path / "run"))
    finally:
        SignalAtBatch.armed = True
    assert resumed["attempts"][1]["resumed_at_step"] == 6
    assert resumed["steps"] == full["steps"] == 12
    assert resumed["history"] == full["history"]
    assert resumed["isotropy"]["per_epoch"] == full["isotropy"]["per_epoch"]
    expected = load(tmp_path / "full" / "checkpoints/last.ckpt")["state_dict"]
    actual = load(tmp_path / "run" / "checkpoints/last.ckpt")["state_dict"]
    assert expected.keys() == actual.keys()
    for name, tensor in expected.items():  # IsoBN's statistics and I-STAR's Sigma_S included
        assert torch.equal(actual[name], tensor), name


@pytest.mark.slow
def test_a_results_json_cut_in_half_is_rebuilt_from_the_last_checkpoint(train_config, tmp_path):
    with pytest.raises(Killed):
        train(train_config(*RUN, KILL))
    results = tmp_path / "results.json"
    earlier = json.loads(results.read_text())
    results.write_text(results.read_text()[: len(results.read_text()) // 2])
    with disarmed():
        rebuilt = train(train_config(*RUN, KILL))
    assert rebuilt["status"] == "completed" and rebuilt["steps"] == 12
    assert rebuilt["rebuilt_from"] == str(tmp_path / "checkpoints" / "last.ckpt")
    first, second = rebuilt["attempts"]  # the killed attempt, as its last.ckpt knew it
    assert first["started_at"] == earlier["attempts"][0]["started_at"] == rebuilt["started_at"]
    assert first["status"] == "killed" and second["resumed_at_step"] == 8
    assert rebuilt["wall_time_s"] == round(first["wall_time_s"] + second["wall_time_s"], 2)
    assert first["wall_time_s"] > 0


@pytest.mark.slow
def test_an_interrupted_run_carried_without_its_checkpoints_starts_afresh_and_completes(
    train_config, tmp_path
):
    """A study or search folder carried to another machine holds its runs' records, not their
    models (``checkpoint.keep=none`` keeps none, and a run in flight kept only its last.ckpt,
    left behind): typed again, a run interrupted in it starts again from its first step in its
    folder, and its record keeps the interrupted attempt."""
    send = (
        f"+callbacks.signal={{_target_:{__name__}.SignalAtBatch,epoch:1,batch:1,"
        f"signum:{signal.SIGTERM}}}"
    )
    with pytest.raises(RunInterrupted):
        train(train_config(*LIMIT, send))
    shutil.rmtree(tmp_path / "checkpoints")
    SignalAtBatch.armed = False
    try:
        again = train(train_config(*LIMIT, send))
    finally:
        SignalAtBatch.armed = True
    assert again["status"] == "completed" and again["steps"] == 8
    assert [attempt["status"] for attempt in again["attempts"]] == ["interrupted", "completed"]
    assert again["attempts"][1]["resumed_from"] is None
