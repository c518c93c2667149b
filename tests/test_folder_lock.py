"""One writer per run folder: a second process is refused naming the first's pid, and the lock
dies with its process (``kill -9`` leaves nothing stale)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pandas as pd
import pytest

from isotune.record import folder_lock
from tests.helpers.cli import run_cli, start_script, tiny_cli_overrides
from tests.helpers.locks import WaitForFile, held_by_another_process


def test_a_folder_held_by_a_live_process_is_refused_naming_its_pid(tmp_path):
    with held_by_another_process(tmp_path) as holder:
        assert folder_lock.holder(tmp_path) == holder.pid
        with pytest.raises(folder_lock.FolderInUse, match=f"still alive: pid {holder.pid}"):
            folder_lock.hold(tmp_path)
    # killed with SIGKILL: the kernel released its lock, nothing stale is left
    assert folder_lock.holder(tmp_path) is None
    assert folder_lock.hold(tmp_path) is True
    try:
        assert folder_lock.hold(tmp_path) is False  # this process holds it already
        assert folder_lock.holder(tmp_path) == os.getpid()
    finally:
        folder_lock.release(tmp_path)


def test_a_symlink_planted_as_the_lock_file_is_never_followed(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / folder_lock.LOCK_FILE).symlink_to(target)
    with pytest.raises(folder_lock.IsotuneError, match="must be a plain file"):
        folder_lock.hold(run)
    assert target.read_text() == "keep me\n"


@pytest.mark.slow
def test_a_second_process_in_a_live_run_folder_is_refused_and_writes_nothing_there(
    tmp_path, tiny_bert, glue_dir
):
    run, go = tmp_path / "run", tmp_path / "go"
    wait = f"+callbacks.wait={{_target_:{WaitForFile.__module__}.WaitForFile,path:{go}}}"
    command = [*tiny_cli_overrides(tiny_bert, glue_dir), wait, f"hydra.run.dir={run}"]
    first = start_script(
        "train.py", *command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        while not go.with_suffix(".waiting").exists() and first.poll() is None:
            time.sleep(0.05)
        assert folder_lock.holder(run) == first.pid
        before = {path: path.stat().st_mtime_ns for path in run.rglob("*")}
        second = run_cli(*command, "trainer.log_every_n_steps=2")
        after = {path: path.stat().st_mtime_ns for path in run.rglob("*")}
    finally:
        go.touch()
        _, first_err = first.communicate(timeout=300)
    output = second.stdout + second.stderr
    assert second.returncode == 1, output
    assert f"is in use by another process, still alive: pid {first.pid}" in output
    assert "Traceback" not in output
    assert after == before  # the second process wrote nothing in the folder
    assert "log_every_n_steps" not in (run / ".hydra" / "overrides.yaml").read_text()

    assert first.returncode == 0, first_err
    record = json.loads((run / "results.json").read_text())
    assert [attempt["status"] for attempt in record["attempts"]] == ["completed"]
    metrics = pd.read_csv(run / "csv" / "metrics.csv")
    assert len(metrics) > 0 and not metrics.duplicated().any()  # each row logged once
