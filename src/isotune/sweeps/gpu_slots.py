"""Pin each sweep worker process to one GPU by holding an exclusive lock on one of that GPU's
slot files.

Why a lock and not ``job.num % n_gpus``: a worker pool hands jobs to whichever worker is free,
so arithmetic on job numbers overloads a GPU as soon as job durations differ. A GPU has
``jobs_per_gpu`` slots (``<slot_dir>/<gpu>#<share>.lock``); a worker locks one once, at its
start, for its whole life, and the operating system drops the lock when it dies, so a crashed
worker never leaks its slot. The lock is kept in this importable module so every job a worker
runs sees the same slot. A slot folder another user controls (a shared ``/tmp``) could hold
symlinks a lock would truncate through, or locks held forever: so it must be this user's own
folder, and a lock file a plain file of this user's, opened without following symlinks.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import pwd
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from isotune.errors import IsotuneError

SLOT_ENV_VAR = "ISOTUNE_GPU_SLOT"
SLURM_CPUS_ENV_VAR = "SLURM_CPUS_PER_TASK"  # the cores SLURM allocated to a task
SWEEP_SLOT_DIR = ".slots"  # the launcher's default slot_dir, inside the sweep directory
CPU_SLOT_PREFIX = "cpu"
SHARE_SEPARATOR = "#"  # GPU slot names are <gpu>#<share>: 0#1 is GPU 0's second slot

log = logging.getLogger(__name__)


class NoFreeSlotError(IsotuneError):
    """Every slot is locked by another process."""


@dataclass(frozen=True)
class Slot:
    """Room for one running job: a share of one GPU, or a CPU slot that sees no GPU."""

    name: str  # the lock file's stem, and ISOTUNE_GPU_SLOT in the worker
    gpu: str | None  # CUDA_VISIBLE_DEVICES in the worker; None: no GPU


@dataclass
class SlotLock:
    """An exclusive lock on one slot; closing its file releases it."""

    slot_id: str
    path: Path
    file: IO[str]

    def release(self) -> None:
        self.file.close()


def visible_gpus() -> list[str]:
    """The GPU ids this process may use, found without initialising CUDA: ``CUDA_VISIBLE_DEVICES``
    when set (ids kept verbatim, so UUIDs work; like CUDA, the list ends at the first negative id,
    so ``-1`` means no GPU), else ``torch.cuda.device_count()``, which asks NVML."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = (gpu.strip() for gpu in listed.split(","))
        return list(itertools.takewhile(lambda gpu: gpu and not gpu.startswith("-"), ids))
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def plan_slots(gpus: Sequence[object] | None, jobs_per_gpu: int, cpu_jobs: int) -> list[Slot]:
    """``jobs_per_gpu`` slots per GPU (``gpus``, or the visible ones when None); ``cpu_jobs`` CPU
    slots when there is no GPU. GPU slots come round-robin (every GPU's first share, then every
    second, ...), so the first workers spread over all GPUs before any GPU gets a second job."""
    ids = visible_gpus() if gpus is None else [str(gpu) for gpu in gpus]
    if len(set(ids)) != len(ids):
        raise IsotuneError(f"GPU list {ids} names a GPU twice; list each GPU id once.")
    if not ids:
        return [Slot(f"{CPU_SLOT_PREFIX}{index}", None) for index in range(cpu_jobs)]
    return [
        Slot(f"{gpu}{SHARE_SEPARATOR}{share}", gpu) for share in range(jobs_per_gpu) for gpu in ids
    ]


def cpu_share(jobs_at_once: int) -> int:
    """Torch threads for each of ``jobs_at_once`` jobs: the cores this process may use, split evenly
    (at least one each); in a SLURM job, at most its ``SLURM_CPUS_PER_TASK``, since a cluster that
    does not pin a job to its cores leaves every core in its affinity. Left alone, every job takes
    all cores, and oversubscribed cores slow everything down, LAPACK most: ``eigh`` of a 384 x 384
    matrix ran in 5 s instead of 0.02 s with two 2-thread processes on 2 cores."""
    cores = len(os.sched_getaffinity(0))
    allocated = os.environ.get(SLURM_CPUS_ENV_VAR, "")
    if allocated.isdigit() and int(allocated) > 0:
        cores = min(cores, int(allocated))
    return max(1, cores // jobs_at_once)


def pinned_environment(slot: Slot) -> dict[str, str]:
    """Environment that confines a process to its slot: its GPU, or none for a CPU slot."""
    return {"CUDA_VISIBLE_DEVICES": "" if slot.gpu is None else slot.gpu, SLOT_ENV_VAR: slot.name}


def _unusable(path: Path, why: str) -> IsotuneError:
    return IsotuneError(
        f"{path} cannot hold the GPU launcher's slot locks: {why}. Leave hydra.launcher.slot_dir "
        "at its default (the sweep folder's .slots) or point it at a folder of your own."
    )


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _check_own(path: Path, info: os.stat_result, kind: str, is_kind: bool) -> None:
    """Refuse ``path`` unless it is a ``kind`` (not a symlink) owned by this user."""
    if stat.S_ISLNK(info.st_mode):
        raise _unusable(path, "it is a symbolic link")
    if not is_kind:
        raise _unusable(path, f"it is not a {kind}")
    if info.st_uid != os.geteuid():
        raise _unusable(path, f"it belongs to {_owner(info.st_uid)}, not to you")


def usable_slot_dir(slot_dir: Path) -> Path:
    """``slot_dir``, made (mode 0700) where missing, once it is a folder of this user's own that
    this user may write in; otherwise an :class:`IsotuneError` that names what is wrong."""
    slot_dir = Path(slot_dir)
    try:
        slot_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = slot_dir.lstat()
    except OSError as error:
        raise _unusable(slot_dir, f"it cannot be made a folder ({error.strerror})") from None
    _check_own(slot_dir, info, "folder", stat.S_ISDIR(info.st_mode))
    if not os.access(slot_dir, os.W_OK | os.X_OK):
        raise _unusable(slot_dir, "you may not write in it")
    return slot_dir


def try_lock(slot_dir: Path, slot_id: str) -> SlotLock | None:
    """Lock one slot without waiting; None when another process (or open file) holds it. The lock
    file is opened without following a symlink or blocking (on a FIFO), and used only when it is a
    plain file of this user's with no other name (a hard link): the pid written into it never lands
    in a file someone planted there."""
    path = Path(slot_dir) / f"{slot_id.replace('/', '_')}.lock"
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, 0o600)
    except OSError as error:
        why = "it is a symbolic link" if path.is_symlink() else error.strerror
        raise _unusable(path, why) from None
    try:
        info = os.fstat(descriptor)
        _check_own(path, info, "plain file", stat.S_ISREG(info.st_mode))
        if info.st_nlink != 1:
            raise _unusable(path, f"it has {info.st_nlink} names (hard links)")
    except IsotuneError:
        os.close(descriptor)
        raise
    file = os.fdopen(descriptor, "r+")  # the open file IS the lock, held beyond this call
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.close()
        return None
    file.truncate(0)
    file.write(f"{os.getpid()}\n")  # who holds the slot, for a human looking at the sweep dir
    file.flush()
    return SlotLock(slot_id, path, file)


def acquire_slot(
    slot_dir: Path, slot_ids: Sequence[str], timeout_s: float | None = 0.0, poll_s: float = 0.2
) -> SlotLock:
    """Lock the first free slot, polling until ``timeout_s`` (None: wait as long as it takes)."""
    slot_dir = usable_slot_dir(slot_dir)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    announced_wait = False
    while True:
        for slot_id in slot_ids:
            lock = try_lock(slot_dir, slot_id)
            if lock is not None:
                return lock
        if deadline is not None and time.monotonic() >= deadline:
            raise NoFreeSlotError(
                f"All slots {list(slot_ids)} in {slot_dir} are locked by other processes; "
                "wait for them to finish or run fewer jobs at once."
            )
        if not announced_wait:
            log.info("All slots %s in %s are busy; waiting for one", list(slot_ids), slot_dir)
            announced_wait = True
        time.sleep(poll_s)


def held_slots(slot_dir: Path) -> list[str]:
    """Slots of ``slot_dir`` locked right now, i.e. whose worker process is alive."""
    held = []
    for path in sorted(Path(slot_dir).glob("*.lock")):
        lock = try_lock(path.parent, path.stem)
        if lock is None:
            held.append(path.stem)
        else:
            lock.release()
    return held


_claimed: tuple[Slot, SlotLock] | None = None  # this process's slot and the lock that holds it


def claim_process_slot(
    slot_dir: Path, slots: Sequence[Slot], timeout_s: float | None = None
) -> Slot:
    """Claim one of ``slots`` for the rest of this process's life and pin the environment to it,
    before anything initialises CUDA (which reads ``CUDA_VISIBLE_DEVICES`` once). Claiming again
    returns the slot held, so a worker never moves to another GPU."""
    global _claimed
    if _claimed is not None:
        return _claimed[0]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise IsotuneError(
            f"CUDA is already initialised in process {os.getpid()}, so CUDA_VISIBLE_DEVICES can no "
            "longer pin it to a GPU; claim the slot before anything touches CUDA."
        )
    lock = acquire_slot(slot_dir, [slot.name for slot in slots], timeout_s=timeout_s)
    slot = next(slot for slot in slots if slot.name == lock.slot_id)
    _claimed = (slot, lock)
    os.environ.update(pinned_environment(slot))
    return slot
