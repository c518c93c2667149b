"""The SLURM tooling acts only on what it made: the SLURM tests run on the project's own local
cluster alone (skipped on any other, even under CI=true), and ``scripts/local_slurm.sh`` refuses
a slurm.conf it did not write and a SLURM it did not start, and stops only the daemons it
started. The script runs against a temporary conf and state folder (ISOTUNE_SLURM_CONF,
ISOTUNE_SLURM_STATE), so these tests touch neither /etc nor a running cluster."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import slurm
from tests.helpers.cli import ROOT

SCRIPT = ROOT / "scripts" / "local_slurm.sh"
HERE = socket.gethostname().split(".")[0]  # as the script writes it (hostname -s)


def fake_slurm(bin_dir: Path, monkeypatch: pytest.MonkeyPatch, cluster: str, host: str) -> None:
    """``sbatch`` and ``scontrol show config`` on the PATH answering for ``cluster`` on ``host``."""
    bin_dir.mkdir()
    for name, answer in {
        "sbatch": "",
        "scontrol": f"ClusterName             = {cluster}\nSlurmctldHost[0]        = {host}\n",
    }.items():
        (bin_dir / name).write_text(f"#!/bin/sh\nprintf '{answer}'\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_the_local_cluster_is_the_one_the_script_writes(tmp_path, monkeypatch):
    assert f"ClusterName={slurm.LOCAL_CLUSTER}\n" in SCRIPT.read_text()
    fake_slurm(tmp_path / "bin", monkeypatch, slurm.LOCAL_CLUSTER, HERE)
    assert slurm.no_local_cluster() is None


@pytest.mark.parametrize(
    ("cluster", "host"), [("production", HERE), (slurm.LOCAL_CLUSTER, "login01")]
)
def test_another_cluster_is_skipped_even_under_ci(tmp_path, monkeypatch, cluster, host):
    fake_slurm(tmp_path / "bin", monkeypatch, cluster, host)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception, match="not this project's local cluster"):
        slurm.require_local_cluster()


def test_a_missing_cluster_fails_under_ci_and_is_skipped_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="sbatch is not installed"):
        slurm.require_local_cluster()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="sbatch is not installed"):
        slurm.require_local_cluster()


def local_slurm(command: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``bash scripts/local_slurm.sh <command>`` with its conf and state in ``tmp_path``."""
    env = {
        **os.environ,
        "ISOTUNE_SLURM_CONF": str(tmp_path / "etc" / "slurm.conf"),
        "ISOTUNE_SLURM_STATE": str(tmp_path / "state"),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts, killed at its end."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def dummy(name: str, tmp_path: Path, processes: list[subprocess.Popen]) -> subprocess.Popen:
    """A process whose program is named ``name`` (a copy of sleep), as pgrep and /proc see it."""
    program = tmp_path / "bin" / name
    if not program.exists():
        program.parent.mkdir(exist_ok=True)
        shutil.copy(shutil.which("sleep"), program)
    processes.append(subprocess.Popen([str(program), "300"]))
    return processes[-1]


def alive(process: subprocess.Popen) -> bool:
    return process.poll() is None


@pytest.mark.slow
@pytest.mark.parametrize("linked", [False, True])
def test_start_refuses_a_slurm_conf_it_did_not_write(tmp_path, linked):
    conf = tmp_path / "etc" / "slurm.conf"
    conf.parent.mkdir()
    real = tmp_path / "production.conf" if linked else conf
    real.write_text("ClusterName=production\nSlurmctldHost=head01\n")
    if linked:
        conf.symlink_to(real)
    before = real.read_bytes()
    result = local_slurm("start", tmp_path)
    assert result.returncode == 1
    assert f"Refusing to overwrite {conf}: scripts/local_slurm.sh did not write it" in result.stderr
    assert real.read_bytes() == before and conf.is_symlink() == linked
    assert not (tmp_path / "state").exists()  # no daemon started, no node touched


@pytest.mark.slow
def test_start_refuses_beside_a_slurm_it_did_not_start(tmp_path, processes):
    foreign = dummy("slurmctld", tmp_path, processes)
    result = local_slurm("start", tmp_path)
    assert result.returncode == 1
    assert "a slurmctld that scripts/local_slurm.sh did not start is running" in result.stderr
    assert str(foreign.pid) in result.stderr
    assert alive(foreign)
    assert not (tmp_path / "etc").exists() and not (tmp_path / "state").exists()


@pytest.mark.slow
def test_stop_stops_only_the_daemons_its_pid_files_name(tmp_path, processes):
    ours = dummy("slurmd", tmp_path, processes)
    foreign = dummy("slurmd", tmp_path, processes)  # the same program, not in a pid file
    reused = dummy("sleep", tmp_path, processes)  # slurmctld's pid, now another program's
    pids = tmp_path / "state" / "pids"
    pids.mkdir(parents=True)
    (pids / "slurmd.pid").write_text(f"{ours.pid}\n")
    (pids / "slurmctld.pid").write_text(f"{reused.pid}\n")

    result = local_slurm("stop", tmp_path)
    assert result.returncode == 0, result.stderr
    assert ours.wait(timeout=60) == -signal.SIGTERM
    assert f"slurmd (pid {ours.pid}) stopped" in result.stdout
    assert "slurmctld: none started by scripts/local_slurm.sh is running" in result.stdout
    assert alive(foreign) and alive(reused)
    assert not list(pids.iterdir())  # the pid files are gone with what they named
