"""Which allocation of a packed SLURM sweep runs which job: a claim file per job.

A packed sweep (conf/hydra/launcher/slurm.yaml, ``jobs_per_gpu`` above 1) sends N allocations
that all work through one list of jobs. Each job must run in exactly one of them, also when an
allocation is requeued (its time limit, a preemption) or dies. So a job is claimed by creating
its claim file, which names the allocation (its SLURM job id, ``123_4`` for an array element,
the same after a requeue), in the launch's claims folder:

- creating it is atomic and exclusive (written to a temporary file, then ``os.link``ed to its
  name, which fails where the name exists): of two allocations reaching for one job, one wins;
- a requeued allocation first takes back the jobs it claimed and did not finish (they continue
  from their ``last.ckpt``, as a requeued array task does), since its claims name it still;
- a job is finished when its return is written beside its claim (``<job>.return``); a job that
  stopped on a signal has none, and stays its allocation's;
- a claim of an allocation SLURM no longer holds (not in ``squeue``: it crashed, or was
  cancelled) and without a return may be taken over by a running allocation: by creating the
  claim of the next generation (``<job>.claim.<n+1>``), exclusive as the first.

Each launch gets a claims folder of its own (a sweep typed again starts afresh: its completed
jobs are read, not rerun), in the sweep's ``.claims/``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from isotune.atomic_files import write_bytes

log = logging.getLogger(__name__)

CLAIMS_DIR = ".claims"
CLAIM = ".claim."  # <job>.claim.<generation>
RETURN = ".return"  # <job>.return: the job's pickled JobReturn, written when it finished


def new_claims_folder(sweep_dir: Path) -> Path:
    """A fresh, empty claims folder for one launch of the sweep."""
    parent = Path(sweep_dir) / CLAIMS_DIR
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="launch-", dir=parent))


class JobClaims:
    """The claims of ``n_jobs`` jobs (0 to n-1) in ``folder``, as allocation ``owner`` sees them.
    ``live_owners`` says which allocations SLURM still holds, None where it cannot tell (asked
    only when the unclaimed jobs have run out)."""

    def __init__(
        self, folder: Path, n_jobs: int, owner: str, live_owners: Callable[[], set[str] | None]
    ) -> None:
        self.folder = Path(folder)
        self.n_jobs = n_jobs
        self.owner = owner
        self.live_owners = live_owners
        self.own_unfinished = [job for job in range(n_jobs) if self._unfinished_claim(job, owner)]
        if self.own_unfinished:
            log.info(f"Allocation {owner} continues its unfinished jobs {self.own_unfinished}")

    def take(self) -> int | None:
        """The next job this allocation runs, now claimed by it; None when every job is
        claimed by an allocation that SLURM still holds, or finished."""
        if self.own_unfinished:
            return self.own_unfinished.pop(0)
        for job in range(self.n_jobs):
            if self._claim(job) is None and self._create(job, 0):
                return job
        abandoned = [job for job in range(self.n_jobs) if self._unfinished_claim(job)]
        if not abandoned:
            return None
        live = self.live_owners()
        if live is None:  # unknown: every claim stands
            return None
        for job in abandoned:
            generation, owner = self._claim(job)
            if owner not in live and self._create(job, generation + 1):
                log.warning(f"Job {job} was claimed by allocation {owner}, which SLURM no longer "
                            "holds: this allocation takes it over")  # fmt: skip
                return job
        return None

    def left(self) -> int:
        """The jobs no allocation has claimed yet."""
        return sum(self._claim(job) is None for job in range(self.n_jobs))

    def finish(self, job: int, job_return: bytes) -> None:
        """Job ``job`` ended (not stopped by a signal): its return, which also says no
        allocation runs it again."""
        write_bytes(self.folder / f"{job}{RETURN}", job_return)

    def finished(self, job: int) -> bytes | None:
        """Job ``job``'s return, or None where no allocation finished it."""
        try:
            return (self.folder / f"{job}{RETURN}").read_bytes()
        except FileNotFoundError:
            return None

    def owner_of(self, job: int) -> str | None:
        claim = self._claim(job)
        return None if claim is None else claim[1]

    def _unfinished_claim(self, job: int, owner: str | None = None) -> bool:
        claim = self._claim(job)
        if claim is None or (self.folder / f"{job}{RETURN}").exists():
            return False
        return owner is None or claim[1] == owner

    def _claim(self, job: int) -> tuple[int, str] | None:
        """The job's current claim: its generation and owner; None where it has none."""
        prefix = f"{job}{CLAIM}"
        generations = [
            int(name.removeprefix(prefix))
            for name in os.listdir(self.folder)
            if name.startswith(prefix) and name.removeprefix(prefix).isdigit()
        ]
        if not generations:
            return None
        generation = max(generations)
        return generation, (self.folder / f"{prefix}{generation}").read_text()

    def _create(self, job: int, generation: int) -> bool:
        """Claim ``job`` as ``generation`` for this allocation; False where another allocation
        created that claim first."""
        handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".claim-")
        try:
            with os.fdopen(handle, "w") as file:
                file.write(self.owner)
            os.link(temporary, self.folder / f"{job}{CLAIM}{generation}")
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)
