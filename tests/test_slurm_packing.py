"""A packed SLURM sweep (hydra.launcher.jobs_per_gpu above 1): how allocations claim jobs, and
the settings it refuses before anything is submitted. On the real local SLURM:
tests/test_slurm.py::test_a_packed_sweep_runs_its_jobs_in_fewer_allocations_each_continued_past_its_time_limit."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hydra.utils import instantiate

from isotune.errors import IsotuneError
from isotune.sweeps.gpu_slots import cpu_share
from isotune.sweeps.job_claims import JobClaims, new_claims_folder
from tests.conftest import compose_train_config

ALL_ALIVE = {"7_0", "7_1", "7_2"}


def claims_of(folder: Path, owner: str, live: set[str] | None = None) -> JobClaims:
    return JobClaims(folder, 3, owner, lambda: ALL_ALIVE if live is None else live)


def test_allocations_claim_every_job_once_even_when_they_reach_for_them_at_once(tmp_path):
    folder = new_claims_folder(tmp_path)
    taken: dict[str, list[int]] = {}
    start = threading.Barrier(3)

    def allocation(owner: str) -> None:
        claims = claims_of(folder, owner)
        start.wait()
        taken[owner] = list(iter(claims.take, None))

    threads = [threading.Thread(target=allocation, args=(f"7_{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(job for jobs in taken.values() for job in jobs) == [0, 1, 2]
    assert claims_of(folder, "7_0").left() == 0


def test_a_requeued_allocation_continues_its_own_unfinished_jobs_first(tmp_path):
    folder = new_claims_folder(tmp_path)
    first = claims_of(folder, "7_0")
    assert (first.take(), first.take()) == (0, 1)
    first.finish(0, b"returned")
    other = claims_of(folder, "7_1")
    assert (other.take(), other.take()) == (2, None)  # 1 is 7_0's, which SLURM still holds

    requeued = claims_of(folder, "7_0")  # the same allocation, started again
    assert (requeued.take(), requeued.take()) == (1, None)
    assert (requeued.finished(0), requeued.finished(1)) == (b"returned", None)


def test_a_job_of_an_allocation_slurm_no_longer_holds_is_taken_over_once(tmp_path):
    folder = new_claims_folder(tmp_path)
    crashed = claims_of(folder, "7_0")
    assert (crashed.take(), crashed.take()) == (0, 1)
    crashed.finish(0, b"returned")
    alive = {"7_1", "7_2"}
    first, second = claims_of(folder, "7_1", alive), claims_of(folder, "7_2", alive)
    # The unclaimed job first, then the dead allocation's unfinished one; its finished one stays.
    assert [first.take(), second.take(), first.take(), second.take()] == [2, 1, None, None]
    assert first.owner_of(1) == "7_2" and first.owner_of(0) == "7_0"
    assert sorted(path.name for path in folder.glob("1.claim.*")) == ["1.claim.0", "1.claim.1"]


def test_claims_stand_where_slurm_cannot_say_which_allocations_it_holds(tmp_path):
    folder = new_claims_folder(tmp_path)
    crashed = claims_of(folder, "7_0")
    assert [crashed.take() for _ in range(3)] == [0, 1, 2]
    unsure = JobClaims(folder, 3, "7_1", lambda: None)
    assert unsure.take() is None


def test_each_launch_claims_in_a_folder_of_its_own(tmp_path):
    assert new_claims_folder(tmp_path) != new_claims_folder(tmp_path)


def packed_launcher(tmp_path: Path, *overrides: str):
    config = compose_train_config(
        ["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0", *overrides], tmp_path
    )
    launcher = instantiate(config.hydra.launcher)
    launcher.setup(hydra_context=None, task_function=None, config=config)
    return launcher, Path(config.hydra.sweep.dir)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["hydra.launcher.jobs_per_gpu=0"], "hydra.launcher.jobs_per_gpu=0, but it counts"),
        (
            ["hydra.launcher.jobs_per_gpu=2", "hydra.launcher.jobs_per_allocation=3"],
            "hydra.launcher.jobs_per_allocation=3, but an allocation of gpus_per_node=0 x "
            "jobs_per_gpu=2 has 2 slots",
        ),
        (
            ["hydra.launcher.jobs_per_gpu=2", "trainer=ddp"],
            "but trainer=ddp runs one job over every GPU it sees",
        ),
    ],
)
def test_a_packed_sweep_refuses_settings_it_cannot_run_before_submitting(
    tmp_path, overrides, message
):
    launcher, sweep = packed_launcher(tmp_path, *overrides)
    with pytest.raises(IsotuneError, match=message.replace("(", r"\(")):
        launcher.launch([["seed=1"], ["seed=2"]], initial_job_idx=0)
    assert not (sweep / ".submitit").exists() and not (sweep / ".claims").exists()


def test_a_ddp_job_among_the_packed_ones_is_refused(tmp_path):
    launcher, _ = packed_launcher(tmp_path, "hydra.launcher.jobs_per_gpu=2")
    with pytest.raises(IsotuneError, match="trainer=ddp"):
        launcher.launch([["seed=1"], ["seed=2", "trainer=ddp"]], initial_job_idx=0)


def test_packing_sends_as_many_allocations_as_the_jobs_fill_unless_fewer_are_asked(tmp_path):
    launcher, _ = packed_launcher(tmp_path, "hydra.launcher.jobs_per_gpu=2")
    jobs = [[f"seed={seed}"] for seed in range(5)]
    assert launcher.plan(jobs) == (3, 2)
    fewer, _ = packed_launcher(
        tmp_path, "hydra.launcher.jobs_per_gpu=2", "hydra.launcher.allocations=2"
    )
    assert fewer.plan(jobs) == (2, 2)


def test_an_allocations_jobs_share_the_cores_slurm_gave_it_not_every_core(monkeypatch):
    """A cluster that does not pin a job to its cores leaves them all in its affinity: the
    allocation's jobs split the cores SLURM counted out (SLURM_CPUS_PER_TASK)."""
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert cpu_share(1) == 1 and cpu_share(2) == 1
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert cpu_share(1) == cores
