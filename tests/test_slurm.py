"""Sweeps on a real SLURM (``scripts/local_slurm.sh``, which ``.ci/run`` starts): a job array
completes; a job longer than its time limit is requeued until it completes, equal to an
uninterrupted run; a cancelled job is continued by ``isotune.rerun``; a preempted (requeued) job
continues where it stopped; an Optuna search sends each batch of trials' seeds as one job array
and ends with its held-out report. Run only on the project's own local cluster (skipped, with the
reason, on any other); each test cancels the jobs it submitted and no other, which a job
submitted before them and still queued after them proves."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from isotune.training.run import train
from tests.conftest import compose_train_config
from tests.helpers import slurm
from tests.helpers.cli import ROOT, run_script, sweep_with_a_bad_job, tiny_cli_overrides

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


@pytest.fixture(scope="module", autouse=True)
def bystander(tmp_path_factory) -> Iterator[str]:
    """The project's own local cluster (tests/helpers/slurm.py: skipped, with the reason, on any
    other); and a job submitted before the module's tests, outside their bookkeeping, which
    must outlive them. Cancelled by its id at the module's end."""
    slurm.require_local_cluster()
    job = slurm.submit_held_job(tmp_path_factory.mktemp("bystander"))
    yield job
    slurm.cancel(job)


@pytest.fixture(autouse=True)
def no_job_left_behind(tmp_path):
    """No job of the test left when it ends: those it submitted (from its tmp_path), only."""
    yield
    slurm.cancel(*slurm.jobs_in(tmp_path))


ON_THIS_NODE = (  # a CPU job that fits the single test node
    "hydra/launcher=slurm",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
)


def records(sweep: Path) -> dict[str, dict]:
    return {path.parent.name: json.loads(path.read_text()) for path in sweep.glob("*/results.json")}


def the_sweep(cwd: Path) -> Path:
    (sweep,) = (cwd / "logs" / "multirun").iterdir()
    return sweep


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def job_id(sweep: Path) -> str:
    return wait_for(
        lambda: next((p.name.split("_")[0] for p in sweep.glob(".submitit/*/*_submitted.pkl")), ""),
        60,
        "the job was submitted",
    )


def slurm_job(job: Path) -> str:
    """The SLURM job a sweep's job ran as (``<array job>_<task>``), as submitit told Hydra."""
    return str(OmegaConf.load(job / ".hydra" / "hydra.yaml").hydra.job.id)


def test_a_job_array_completes(tiny_bert, glue_dir, tmp_path):
    result = run_script(
        "train.py",
        "-m",
        *ON_THIS_NODE,
        "seed=1,2",
        *tiny_cli_overrides(tiny_bert, glue_dir),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = the_sweep(tmp_path)
    assert {job: r["status"] for job, r in records(sweep).items()} == {
        "0": "completed",
        "1": "completed",
    }
    assert f"Sweep {sweep}: 2 of 2 jobs completed." in result.stdout + result.stderr


def _epochs_lasting(seconds: float, run: list[str], folder: Path) -> int:
    """How many epochs of ``run`` train for about ``seconds`` here. SLURM's warning comes at a
    fixed time into an allocation, so the job's length is measured on this machine, not guessed:
    CI's machine trains twice as fast as a developer's, and a guessed 6,400 steps finished there
    within one allocation. (The probe's wall time includes loading, so it errs short.)"""
    probe_epochs = 20
    probe = train(compose_train_config([*run, f"trainer.max_epochs={probe_epochs}"], folder))
    return math.ceil(seconds / (probe["wall_time_s"] / probe_epochs))


def test_a_job_longer_than_its_time_limit_is_requeued_until_it_completes_exactly(
    tiny_bert, glue_dir, tmp_path
):
    # SLURM checks time limits on a 30 s tick (fixed in slurmctld, no slurm.conf setting) and
    # sends the warning once the time left is within signal_delay_s + 30 s: in an allocation of
    # 1 minute with a delay of 5 s, between 25 and 55 s after the start, whatever the tick's
    # phase, and the time limit itself ends it 60 to 90 s after: 35 s or more to stop. Less
    # start-up (~11 s), each allocation trains 14-44 s, so a job of ~80 s of training (a machine
    # that speeds up 1.8-fold after the probe still times out) times out at least once and
    # completes in two to six allocations. (With a delay of 20 s the window was
    # 10-40 s, and a requeued job restarting in step with the tick was warned 12 s after each
    # start, before a step; so the test took 2-minute allocations and 150 s of training.)
    run = [
        *tiny_cli_overrides(
            tiny_bert, glue_dir, "callbacks.early_stopping=null", "data.batch_size=2"
        ),
        "trainer.limit_train_batches=1.0",
    ]
    epochs = _epochs_lasting(80, run, tmp_path / "probe")
    limit = (
        "hydra.launcher.timeout_min=1",
        "hydra.launcher.signal_delay_s=5",
        "hydra.launcher.max_num_timeout=10",
    )
    # A probe slowed by other work on the machine chooses a job that ends before any warning:
    # then the sweep runs again, three times as long, in a folder of its own (twice at most).
    for longer in range(3):
        cwd = tmp_path / f"sweep-{longer}"
        cwd.mkdir()
        typed = [*run, f"trainer.max_epochs={epochs}"]
        result = run_script("train.py", "-m", *ON_THIS_NODE, *limit, *typed, cwd=cwd, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        job = the_sweep(cwd) / "0"
        record = json.loads((job / "results.json").read_text())
        if len(record["attempts"]) >= 2 or longer == 2:
            break
        epochs *= 3
    run.append(f"trainer.max_epochs={epochs}")
    attempts = record["attempts"]
    assert record["status"] == "completed" and len(attempts) >= 2, attempts
    assert all(a["ended_by"] == "SIGUSR2" for a in attempts[:-1]), attempts
    assert [a["resumed_at_step"] for a in attempts[1:]] == [a["steps"] for a in attempts[:-1]]

    uninterrupted = train(compose_train_config(run, tmp_path / "uninterrupted"))
    assert record["history"] == uninterrupted["history"]
    assert record["steps"] == uninterrupted["steps"] == epochs * 32
    # Completed, both keep their best epoch's model only (checkpoint.keep=slim, the default).
    expected = torch.load(tmp_path / "uninterrupted/checkpoints/best.ckpt", weights_only=True)
    actual = torch.load(job / "checkpoints/best.ckpt", weights_only=True)
    for name, tensor in expected["state_dict"].items():
        assert torch.equal(actual["state_dict"][name], tensor), name


def test_a_packed_sweep_runs_its_jobs_in_fewer_allocations_each_continued_past_its_time_limit(
    tiny_bert, glue_dir, tmp_path
):
    """Three jobs packed into two allocations (jobs_per_gpu=2; on this CPU node one job at a
    time each): every job is claimed once, by one allocation; a job warned of its allocation's
    time limit stops and the requeued allocation continues it where it stopped; every record is
    that of an uninterrupted in-process run of the same job."""
    # Time limits as in the test above: the warning comes 25 to 55 s after an allocation starts.
    # Each job trains about 45 s alone on one thread, as in the sweep (cpus_per_task=1), where it
    # runs beside the other allocation and the uninterrupted runs: an allocation's first job,
    # started about 11 s in, is warned mid-job. (Timed on this process's threads, a probe on a
    # loaded machine chose jobs of 7 s, all done before any warning.)
    run = [
        *tiny_cli_overrides(
            tiny_bert, glue_dir, "callbacks.early_stopping=null", "data.batch_size=2"
        ),
        "trainer.limit_train_batches=1.0",
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the probe on one thread, as each job of the sweep
    try:
        run.append(f"trainer.max_epochs={_epochs_lasting(45, run, tmp_path / 'probe')}")
    finally:
        torch.set_num_threads(threads)
    packed = (
        "hydra.launcher.jobs_per_gpu=2",
        "hydra.launcher.jobs_per_allocation=1",
        "hydra.launcher.allocations=2",
        "hydra.launcher.timeout_min=1",
        "hydra.launcher.signal_delay_s=5",
        "hydra.launcher.max_num_timeout=30",  # a loaded machine gets little done per minute
    )
    sweep_process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), "-m", *ON_THIS_NODE, *packed, "seed=1,2,3", *run],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # The same jobs in this process meanwhile, uninterrupted, on one thread as each job of the
    # sweep: what the sweep's records must equal.
    torch.set_num_threads(1)
    try:
        uninterrupted = {
            seed: train(compose_train_config([*run, f"seed={seed}"], tmp_path / f"alone-{seed}"))
            for seed in (1, 2, 3)
        }
    finally:
        torch.set_num_threads(threads)
    output, _ = sweep_process.communicate(timeout=1800)
    assert sweep_process.returncode == 0, output[-3000:]
    sweep = the_sweep(tmp_path)
    assert f"Sweep {sweep}: 3 of 3 jobs completed." in output
    assert "Packing 3 jobs into 2 allocations" in output

    (claims,) = (sweep / ".claims").iterdir()
    owners = {job: (claims / f"{job}.claim.0").read_text() for job in range(3)}
    (array,) = {owner.split("_")[0] for owner in owners.values()}
    assert set(owners.values()) == {f"{array}_0", f"{array}_1"}  # both allocations ran jobs
    assert sorted(p.name for p in claims.glob("*.claim.*")) == [f"{j}.claim.0" for j in range(3)]

    done = records(sweep)
    attempts = [done[str(job)]["attempts"] for job in range(3)]
    # A time limit came mid-job: the requeued allocation continued that job at its step.
    assert any(len(tries) >= 2 and tries[0]["steps"] > 0 for tries in attempts), attempts
    for tries in attempts:
        assert all(a["ended_by"] == "SIGUSR2" for a in tries[:-1]), tries
        # A job its allocation took just before the warning may stop before its first step: it
        # has nothing to continue from, and starts again.
        assert [a["resumed_at_step"] for a in tries[1:]] == [a["steps"] or None for a in tries[:-1]]
    for job, seed in enumerate((1, 2, 3)):
        record = done[str(job)]
        assert record["status"] == "completed"
        assert record["history"] == uninterrupted[seed]["history"], job
        assert record["steps"] == uninterrupted[seed]["steps"]


def _long_job(tiny_bert: Path, glue_dir: Path, cwd: Path) -> subprocess.Popen:
    run = tiny_cli_overrides(
        tiny_bert, glue_dir, "callbacks.early_stopping=null", "trainer.max_epochs=30"
    )
    return subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), "-m", *ON_THIS_NODE, *run],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _some_epochs_done(job: Path) -> bool:
    record = job / "results.json"
    return record.is_file() and len(json.loads(record.read_text()).get("history", [])) >= 3


def test_a_cancelled_job_is_interrupted_and_rerun_continues_it_from_its_checkpoint(
    tiny_bert, glue_dir, tmp_path
):
    sweep_process = _long_job(tiny_bert, glue_dir, tmp_path)
    try:
        sweep = wait_for(
            lambda: next((tmp_path / "logs" / "multirun").glob("*"), None), 60, "sweep"
        )
        wait_for(lambda: _some_epochs_done(sweep / "0"), 180, "three epochs")
        subprocess.run(["scancel", job_id(sweep)], check=True)
        wait_for(
            lambda: records(sweep)["0"]["status"] == "interrupted", 60, "an interrupted record"
        )
    finally:
        sweep_process.send_signal(signal.SIGTERM)  # without accounting it cannot see the cancel
        sweep_process.wait(60)
    stopped = records(sweep)["0"]
    assert stopped["interrupted_by"] == "SIGTERM" and stopped["steps"] > 0

    rerun = subprocess.run(
        [sys.executable, "-m", "isotune.rerun", str(sweep)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "resumes from checkpoints/last.ckpt" in rerun.stdout
    done = records(sweep)["0"]
    assert done["status"] == "completed" and done["steps"] == 30 * 4
    assert done["attempts"][-1]["resumed_at_step"] == stopped["steps"]


def test_a_preempted_job_is_requeued_and_continues_where_it_stopped(tiny_bert, glue_dir, tmp_path):
    sweep_process = _long_job(tiny_bert, glue_dir, tmp_path)
    try:
        sweep = wait_for(
            lambda: next((tmp_path / "logs" / "multirun").glob("*"), None), 60, "sweep"
        )
        wait_for(lambda: _some_epochs_done(sweep / "0"), 180, "three epochs")
        subprocess.run(["scontrol", "requeue", job_id(sweep)], check=True)  # as a preemption
        assert sweep_process.wait(600) == 0
    finally:
        if sweep_process.poll() is None:
            sweep_process.kill()
    done = records(sweep)["0"]
    assert done["status"] == "completed" and done["steps"] == 30 * 4
    first, *_, last = done["attempts"]
    assert first["ended_by"] == "SIGTERM" and first["steps"] > 0
    assert last["resumed_at_step"] is not None and last["status"] == "completed"


def test_a_failed_job_ends_the_sweep_with_its_summary_not_a_traceback(
    tiny_bert, glue_dir, tmp_path
):
    result, output, sweep = sweep_with_a_bad_job(tiny_bert, glue_dir, tmp_path, *ON_THIS_NODE)
    assert result.returncode == 1
    assert "Traceback" not in output, output[-3000:]
    assert f"Sweep {sweep}: 1 of 2 jobs completed, 1 did not:" in output
    assert "seed='abc': must be an integer" in output


def test_a_search_runs_each_batch_of_trials_seeds_as_a_job_array_then_reports(
    tiny_bert, glue_dir, tmp_path
):
    done = run_script(
        "train.py", "-m", "hparams_search=istar", *ON_THIS_NODE, "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.n_trials=2", "hydra.sweeper.pruner=null", "hydra.sweeper.seeds=[1,2]",
        "hydra.sweeper.report_seeds=[3]", "trainer.max_epochs=1", "logger=none",
        *tiny_cli_overrides(tiny_bert, glue_dir),
        cwd=tmp_path,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    folder = tmp_path / "logs" / "search" / "istar_rte_minilm"
    trials = pd.read_csv(folder / "trials.csv")
    assert sorted(zip(trials.trial, trials.seed, strict=True)) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert set(trials.state) == {"COMPLETE"} and set(trials.job_status) == {"completed"}
    jobs = {
        str(path.parent.relative_to(folder)): json.loads(path.read_text())["status"]
        for path in folder.rglob("results.json")
    }
    (best,) = {job.split("/")[1] for job in jobs if job.startswith("report/trial-")}
    assert best in ("trial-000", "trial-001")
    assert jobs == {
        **{f"trial-00{t}/seed-{s}": "completed" for t in (0, 1) for s in (1, 2)},
        f"report/{best}/seed-3": "completed",
        "report/baseline/seed-3": "completed",
    }
    assert f"Sweep {folder}: 6 of 6 jobs completed." in output

    # Each job ran as a SLURM job: submitit's log of that job (its output file) shows the job
    # starting under its id and training into the job's folder.
    slurm_jobs = {job: slurm_job(folder / job) for job in jobs}
    for job, slurm_id in slurm_jobs.items():
        log = (folder / ".submitit" / slurm_id / f"{slurm_id}_0_log.out").read_text()
        assert f"JobEnvironment(job_id={slurm_id}," in log, job
        assert f"Output directory: {folder / job}\n" in log, job
    # Both trials' seeds went to SLURM at once, as one job array; the report as another.
    arrays = {job: slurm_id.split("_")[0] for job, slurm_id in slurm_jobs.items()}
    assert len({arrays[job] for job in jobs if job.startswith("trial-")}) == 1
    assert len({arrays[job] for job in jobs if job.startswith("report/")}) == 1
    assert len(set(arrays.values())) == 2

    report = (folder / "search_report.md").read_text()
    assert "2 trials: 2 complete, 0 pruned, 0 failed; 4 runs" in report
    assert "## Held out: the best trial and the baseline on the report seeds" in report
    assert f"| best (trial {int(best[-3:])}) |" in report and "| baseline | reg=none |" in report
    assert report.count("(n = 1)") == 2 and "Held out" in output  # printed at the end too

    table = subprocess.run(
        [sys.executable, "-m", "isotune.aggregate", str(folder)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr[-3000:]
    counted = pd.read_csv(folder / "results_table.csv")
    # The baseline and the best on the report seed (1 each), each trial on the tuning seeds (2
    # each): the best's tuning and report runs are kept apart, never pooled (docs/search.md).
    assert sorted(counted.n) == [1, 1, 2, 2]


HELD = "+hydra.launcher.additional_parameters.hold=true"  # queued until released or cancelled
SEARCH_OF_ONE_TRIAL = (
    "hparams_search=istar", "hydra.sweeper.n_trials=1", "hydra.sweeper.pruner=null",
    "hydra.sweeper.seeds=[1]", "hydra.sweeper.report_seeds=[2]", "trainer.max_epochs=1",
    "logger=none",
)  # fmt: skip


def stopped_with_its_jobs_queued(cwd: Path, *args: str) -> tuple[Path, str]:
    """Start ``train.py -m <args>`` from ``cwd`` with its jobs held in SLURM's queue, stop it
    (SIGTERM) once they are submitted; its folder and the array they were sent as. It stops as
    on Ctrl-C, naming the jobs that go on (hydra_plugins/isotune_launcher/waiting.py)."""
    output = cwd / "stopped.log"
    with output.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "train.py"), "-m", *ON_THIS_NODE, HELD, *args],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        submitted = wait_for(
            lambda: (
                process.poll() is not None
                or next((cwd / "logs").glob("*/*/.submitit/*/*_submitted.pkl"), None)
            ),
            120,
            "the jobs were submitted",
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    stopped = output.read_text()
    assert isinstance(submitted, Path), stopped[-3000:]  # it ended before
    folder = submitted.parents[2]
    (array,) = slurm.jobs_in(cwd)
    assert slurm.job_state(array) == "PENDING"
    # Stopped as by Ctrl-C: the summary, then the jobs that go on and how to cancel them.
    assert process.returncode == 128 + signal.SIGTERM, stopped[-3000:]
    assert "Jobs it sent to SLURM go on without it: " in stopped, stopped[-3000:]
    assert "(PENDING). They write into their folders as they run" in stopped
    assert f"To stop them instead: scancel {array}\n" in stopped and "Traceback" not in stopped
    return folder, array


def test_a_search_whose_jobs_are_still_queued_is_continued_only_once_they_are_gone(
    tiny_bert, glue_dir, tmp_path
):
    """A queued job holds no folder yet: typed again, the search names it instead of sending
    it a second time; once it is cancelled, the same command continues and ends."""
    search = (*SEARCH_OF_ONE_TRIAL, *tiny_cli_overrides(tiny_bert, glue_dir))
    folder, array = stopped_with_its_jobs_queued(tmp_path, *search)
    submitted = sorted((folder / ".submitit").iterdir())

    again = run_script("train.py", "-m", *ON_THIS_NODE, HELD, *search, cwd=tmp_path)
    output = again.stdout + again.stderr
    assert again.returncode == 1, output[-3000:]
    # One job (a trial of one seed): submitit sends it alone, not as an array.
    assert f"are still queued or running: {array} (PENDING)." in output, output[-3000:]
    assert f"scancel {array})" in output and "Traceback" not in output
    assert sorted((folder / ".submitit").iterdir()) == submitted  # nothing sent again
    assert slurm.jobs_in(tmp_path) == [array]

    slurm.cancel(array)
    wait_for(lambda: not slurm.jobs_in(tmp_path), 60, "the cancelled jobs left the queue")
    done = run_script("train.py", "-m", *ON_THIS_NODE, *search, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    trials = pd.read_csv(folder / "trials.csv")
    assert list(trials.state) == ["COMPLETE"] and list(trials.job_status) == ["completed"]


def test_rerun_of_a_sweep_whose_jobs_are_still_queued_waits_for_them(tiny_bert, glue_dir, tmp_path):
    """The queued jobs have no folder yet, so they count as missing: rerun would run them a
    second time beside SLURM. It refuses, naming them; once they are cancelled, it runs them."""
    sweep, array = stopped_with_its_jobs_queued(
        tmp_path, "seed=1,2", *tiny_cli_overrides(tiny_bert, glue_dir)
    )
    rerun = [sys.executable, "-m", "isotune.rerun", str(sweep)]
    refused = subprocess.run(rerun, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"{array}_0 (PENDING), {array}_1 (PENDING)" in refused.stderr
    assert f"scancel {array})" in refused.stderr and not list(sweep.glob("rerun-*"))

    slurm.cancel(array)
    wait_for(lambda: not slurm.jobs_in(tmp_path), 60, "the cancelled jobs left the queue")
    done = subprocess.run(rerun, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Reran 2 jobs, 0 failed again." in done.stdout


def test_the_cleanup_cancels_the_tests_own_jobs_and_no_other(bystander, tmp_path):
    own = slurm.submit_held_job(tmp_path)
    assert slurm.jobs_in(tmp_path) == [own]
    slurm.cancel(*slurm.jobs_in(tmp_path))
    wait_for(lambda: slurm.job_state(own) == "CANCELLED", 30, "the test's own job cancelled")
    assert slurm.job_state(bystander) == "PENDING"


def test_a_job_the_tests_did_not_submit_outlives_them(bystander):
    """Last in the module: every test above has submitted jobs and cancelled its own."""
    assert slurm.job_state(bystander) == "PENDING"
