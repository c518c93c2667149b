"""The jobs a sweep folder sent to SLURM that SLURM still holds (queued, running, completing).

A SLURM job outlives the command that submitted it, and a queued one holds no folder lock yet:
the same command typed again, or ``isotune.rerun``, would send a second job into its folder. So
these commands ask first. A folder's own jobs are this user's jobs whose submitit output file
lies under ``<sweep>/.submitit/``: no job id is read from the folder (SLURM reuses ids after a
reinstall), and nothing is done to any job (``squeue`` only reads).
"""

from __future__ import annotations

import getpass
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from isotune.errors import IsotuneError

SUBMITIT_DIR = ".submitit"  # where conf/hydra/launcher/slurm.yaml puts each job's files
SEPARATOR = "|"  # between squeue's fields; a job id or state never holds one
SQUEUE_FORMAT = f"JobArrayID:{SEPARATOR},State:{SEPARATOR},STDOUT:"  # fields of any width
# A job whose processes are ending: it sends nothing more, and while it still holds its folder,
# the folder lock says so.
ENDING = "COMPLETING"


@dataclass(frozen=True)
class SlurmJob:
    """One job (or job array element) SLURM still holds."""

    job_id: str  # 123 or, for an array element, 123_4
    state: str  # PENDING, RUNNING, COMPLETING...

    @property
    def array_id(self) -> str:
        """The id ``scancel`` takes to cancel the whole array (the job's own id if none)."""
        return self.job_id.partition("_")[0]


def jobs_of_folder(squeue_output: str, sweep_dir: Path) -> list[SlurmJob]:
    """The jobs in ``squeue_output`` (one per line, :data:`SQUEUE_FORMAT`) whose output file
    lies in ``sweep_dir``'s submitit folder, but those :data:`ENDING`. The output file is
    listed as submitted, patterns unexpanded (``.submitit/%A_%a/%A_%a_0_log.out``)."""
    submitted = Path(sweep_dir).resolve() / SUBMITIT_DIR
    jobs = []
    for line in squeue_output.splitlines():
        fields = [field.strip() for field in line.split(SEPARATOR)]
        if len(fields) < 3 or not fields[0]:
            continue
        job_id, state, stdout = fields[:3]
        if state != ENDING and stdout and Path(stdout).resolve().is_relative_to(submitted):
            jobs.append(SlurmJob(job_id, state))
    return jobs


def live_jobs(sweep_dir: Path) -> list[SlurmJob]:
    """The jobs ``sweep_dir`` sent to SLURM that SLURM still holds; none where the folder sent
    none (it has no submitit folder) or SLURM's commands are not installed here."""
    if not (Path(sweep_dir) / SUBMITIT_DIR).is_dir() or shutil.which("squeue") is None:
        return []
    command = [
        "squeue",
        "--noheader",
        "--array",  # one line per array element, a queued one too
        f"--user={getpass.getuser()}",
        f"--Format={SQUEUE_FORMAT}",
    ]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", None) or error
        raise IsotuneError(
            f"{sweep_dir} sent jobs to SLURM, and SLURM did not say whether they are still "
            f"queued or running ({' '.join(command)}: {str(detail).strip()}); a job queued there "
            "would be sent a second time. Fix: type the command again once squeue answers."
        ) from error
    return jobs_of_folder(answer.stdout, Path(sweep_dir))


def check_no_live_jobs(sweep_dir: Path, what: str) -> None:
    """Refuse ``what`` (the command about to send jobs) while jobs ``sweep_dir`` sent to SLURM
    are still queued or running, naming them and the fix."""
    jobs = live_jobs(sweep_dir)
    if not jobs:
        return
    raise IsotuneError(
        f"Jobs that {sweep_dir} sent to SLURM are still queued or running: "
        f"{_listed(jobs)}. {what} would send a second job into their folders. Fix: wait until "
        f"they end (squeue --me lists them), or cancel them (scancel {_arrays(jobs)}); then type "
        "the command again: a completed job is read, an interrupted one resumes from its last.ckpt."
    )


def jobs_going_on(sweep_dir: Path) -> str | None:
    """For a sweep or search stopped while it waited: a line naming the jobs ``sweep_dir`` sent
    to SLURM, which go on without it, and how to cancel them; None where there are none or
    SLURM does not answer (the stop is not held up by it)."""
    try:
        jobs = live_jobs(sweep_dir)
    except IsotuneError:
        return None
    if not jobs:
        return None
    return (
        f"Jobs it sent to SLURM go on without it: {_listed(jobs)}. They write into their "
        "folders as they run, and no command sends them again while SLURM holds them. To stop "
        f"them instead: scancel {_arrays(jobs)}"
    )


def _listed(jobs: list[SlurmJob]) -> str:
    return ", ".join(f"{job.job_id} ({job.state})" for job in jobs)


def _arrays(jobs: list[SlurmJob]) -> str:
    """What ``scancel`` takes to cancel them: each array once."""
    return " ".join(dict.fromkeys(job.array_id for job in jobs))
