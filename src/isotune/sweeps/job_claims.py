"""Which allocation of a packed SLURM sweep runs which job: a claim file per job.

In a packed sweep (``jobs_per_gpu`` above 1) N allocations work through one list of jobs, and
each job must run in exactly one, also across requeues and deaths. A job is claimed by creating
its claim file, naming the allocation's SLURM job id, atomically and exclusively (``os.link`` of
a temporary file fails where the name exists); a requeued allocation takes back its unfinished
claims; a job is finished when ``<job>.return`` is written beside its claim; a claim of an
allocation no longer in ``squeue`` and without a return may be taken over by creating the next
generation's claim (``<job>.claim.<n+1>``). Each launch has its own claims folder in the sweep's
``.claims/``. Docs: docs/sweeps.md#slurm-allocations-as-worker-pools.
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
        self.own_unfinished = self._unfinished_of(owner)
        if self.own_unfinished:
            log.info(f"Allocation {owner} continues its unfinished jobs {self.own_unfinished}")

    def take(self) -> int | None:
        """The next job this allocation runs, now claimed by it; None when every job is
        claimed by an allocation that SLURM still holds, or finished."""
        if self.own_unfinished:
            return self.own_unfinished.pop(0)
        claims, finished = self._read()
        for job in range(self.n_jobs):
            if job not in claims and self._create(job, 0):
                return job
        abandoned = [job for job in claims if job not in finished]
        if not abandoned:
            return None
        live = self.live_owners()
        if live is None:  # unknown: every claim stands
            return None
        for job in sorted(abandoned):
            owner = self._owner(job, claims[job])
            if owner not in live and self._create(job, claims[job] + 1):
                log.warning(f"Job {job} was claimed by allocation {owner}, which SLURM no longer "
                            "holds: this allocation takes it over")  # fmt: skip
                return job
        return None

    def left(self) -> int:
        """The jobs no allocation has claimed yet."""
        return self.n_jobs - len(self._read()[0])

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
        generation = self._read()[0].get(job)
        return None if generation is None else self._owner(job, generation)

    def _unfinished_of(self, owner: str) -> list[int]:
        claims, finished = self._read()
        return [
            job
            for job, generation in sorted(claims.items())
            if job not in finished and self._owner(job, generation) == owner
        ]

    def _read(self) -> tuple[dict[int, int], set[int]]:
        """The claims' current generation by job, and the finished jobs: one listing."""
        claims: dict[int, int] = {}
        finished: set[int] = set()
        for name in os.listdir(self.folder):
            job, claim, generation = name.partition(CLAIM)
            if claim and job.isdigit() and generation.isdigit():
                claims[int(job)] = max(claims.get(int(job), 0), int(generation))
            elif name.endswith(RETURN) and name.removesuffix(RETURN).isdigit():
                finished.add(int(name.removesuffix(RETURN)))
        return claims, finished

    def _owner(self, job: int, generation: int) -> str:
        return (self.folder / f"{job}{CLAIM}{generation}").read_text()

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
