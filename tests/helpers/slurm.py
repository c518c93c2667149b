"""The SLURM the tests may use, and the jobs they may cancel.

The tests submit jobs only to the project's own single-node cluster (``scripts/local_slurm.sh``,
recognised by the cluster name it writes and by its controller running on this machine), never
to a cluster they find on a login node. They cancel only their own jobs: those whose working
directory lies in the test's temporary folder (train.py, submitit and isotune.rerun submit from
the folder they run in), never every job of the user.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

LOCAL_CLUSTER = "isotune-local"  # the ClusterName scripts/local_slurm.sh writes


@dataclass(frozen=True)
class NoLocalCluster:
    """Why the SLURM tests cannot run here."""

    reason: str
    foreign: bool  # a SLURM answers, but it is not the local cluster: never the tests' to use


def _squeue(*args: str) -> list[str]:
    answer = subprocess.run(
        ["squeue", "--noheader", *args], capture_output=True, text=True, timeout=30, check=True
    )
    return answer.stdout.splitlines()


def no_local_cluster() -> NoLocalCluster | None:
    """None when the SLURM that ``sbatch`` would submit to is the project's local cluster;
    otherwise why not."""
    if shutil.which("sbatch") is None:
        return NoLocalCluster("sbatch is not installed (apt-get install slurm-wlm munge)", False)
    try:
        answer = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return NoLocalCluster(f"scontrol does not answer: {error}", False)
    if answer.returncode != 0:
        return NoLocalCluster(
            "no SLURM controller answers (bash scripts/local_slurm.sh start): "
            + answer.stderr.strip(),
            False,
        )
    config = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition("=") for line in answer.stdout.splitlines())
    )
    name = config.get("ClusterName")
    controller = config.get("SlurmctldHost[0]", "").split("(")[0]
    here = socket.gethostname().split(".")[0]
    if name != LOCAL_CLUSTER or controller != here:
        return NoLocalCluster(
            f"the SLURM that answers is cluster {name!r} controlled from {controller!r}, not this "
            f"project's local cluster ({LOCAL_CLUSTER!r} on {here!r}, from bash "
            "scripts/local_slurm.sh start): the tests submit to and cancel on no other cluster",
            True,
        )
    return None


def require_local_cluster() -> None:
    """Skip, with the reason, where the local cluster does not answer; under CI=true, where
    ``.ci/run`` starts it, a missing cluster fails instead (it must not pass as a skip), but a
    foreign one is skipped all the same."""
    missing = no_local_cluster()
    if missing is not None:
        ci = os.environ.get("CI") == "true"
        (pytest.fail if ci and not missing.foreign else pytest.skip)(missing.reason)


def jobs_in(folder: Path) -> list[str]:
    """This user's queued or running jobs submitted from ``folder`` or a folder below it (a job
    array counts once, by its array job id)."""
    jobs = (
        line.partition("|") for line in _squeue(f"--user={getpass.getuser()}", "--format=%F|%Z")
    )
    return sorted({job for job, _, workdir in jobs if Path(workdir).is_relative_to(folder)})


def submit_held_job(folder: Path) -> str:
    """A job that waits, held, until it is cancelled: no test's own, since it is submitted from
    ``folder``."""
    answer = subprocess.run(
        [
            *("sbatch", "--parsable", "--hold", f"--chdir={folder}", f"--output={folder}/%j.out"),
            *("--job-name=isotune-bystander", "--wrap=sleep 600"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return answer.stdout.strip().split(";")[0]


def job_state(job: str) -> str | None:
    """The job's state (PENDING, RUNNING, CANCELLED...) while SLURM remembers it."""
    return next(iter(_squeue(f"--jobs={job}", "--states=all", "--format=%T")), None)


def cancel(*jobs: str) -> None:
    """Cancel these jobs, and no other."""
    if jobs:
        subprocess.run(["scancel", *jobs], check=False, timeout=30)
