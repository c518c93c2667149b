"""A sweep or search waiting on SLURM jobs stops on SIGTERM as on Ctrl-C, and names the jobs
that go on without it (tests/test_slurm.py sends SIGTERM to real ones on the local SLURM)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

from hydra_plugins.isotune_launcher.slurm_launcher import IsotuneSlurmLauncher
from hydra_plugins.isotune_launcher.waiting import sigterm_stops_the_wait
from isotune.sweeps.slurm_jobs import jobs_going_on


@pytest.mark.parametrize("launcher", [SlurmLauncher, IsotuneSlurmLauncher])  # submitit's, ours
def test_sigterm_stops_the_wait_on_slurm_jobs_and_the_earlier_handler_comes_back(launcher):
    waiting_on_slurm = launcher.__new__(launcher)  # its type is what counts
    before = signal.getsignal(signal.SIGTERM)
    # What the sweepers catch for Ctrl-C. (Not matched by class: Hydra's plugin scan, run by
    # other tests, executes the plugin modules again, so the class raised may be a newer one.)
    with pytest.raises(KeyboardInterrupt) as stopped, sigterm_stops_the_wait(waiting_on_slurm):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the handler raises here, at once
    assert type(stopped.value).__name__ == "SweepStopped"
    assert stopped.value.signal == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_launcher_running_jobs_in_the_sweeps_own_process_keeps_their_handling():
    """The basic launcher's run acts on SIGTERM itself (isotune.record.stopping)."""
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_stops_the_wait(BasicLauncher()):
        assert signal.getsignal(signal.SIGTERM) == before


def fake_squeue(folder: Path, script: str) -> Path:
    """A folder on PATH holding an ``squeue`` that runs ``script``."""
    folder.mkdir()
    squeue = folder / "squeue"
    squeue.write_text(f"#!/bin/sh\n{script}\n")
    squeue.chmod(0o755)
    return folder


def test_the_jobs_going_on_are_named_with_the_command_that_cancels_them(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    (sweep / ".submitit").mkdir(parents=True)
    out = f"{sweep}/.submitit/%A_%a/%A_%a_0_log.out"
    lines = f"echo '4_0|RUNNING|{out}'; echo '4_1|PENDING|{out}'; echo '9|RUNNING|/elsewhere'"
    monkeypatch.setenv("PATH", str(fake_squeue(tmp_path / "bin", lines)))
    going_on = jobs_going_on(sweep)
    assert going_on is not None
    assert "go on without it: 4_0 (RUNNING), 4_1 (PENDING)." in going_on
    assert going_on.endswith("To stop them instead: scancel 4") and "9" not in going_on


def test_a_stop_is_not_held_up_by_a_slurm_that_does_not_answer(tmp_path, monkeypatch):
    (tmp_path / ".submitit").mkdir()
    monkeypatch.setenv("PATH", str(fake_squeue(tmp_path / "bin", "exit 1")))
    assert jobs_going_on(tmp_path) is None
    monkeypatch.setenv("PATH", str(fake_squeue(tmp_path / "empty", "true")))
    assert jobs_going_on(tmp_path) is None  # SLURM holds none of its jobs
