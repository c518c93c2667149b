"""The `gpus` Hydra launcher and its slot claiming, on CPU: GPU ids are simulated with
`hydra.launcher.gpus` (or CUDA_VISIBLE_DEVICES), so these tests check the pinning logic, not real
devices."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hydra_plugins.isotune_launcher.gpus_launcher import GpusLauncher, _join_or_kill
from isotune.errors import IsotuneError
from isotune.sweeps import gpu_slots
from tests.conftest import CONF_DIR, ROOT
from tests.helpers.cli import run_script, tiny_cli_overrides

SRC_DIR = ROOT / "src"


def _env_with_src() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_DIR), env.get("PYTHONPATH")]))
    return env


def test_two_claimers_never_get_the_same_slot(tmp_path):
    first = gpu_slots.acquire_slot(tmp_path, ["0", "1"])
    second = gpu_slots.acquire_slot(tmp_path, ["0", "1"])
    try:
        assert {first.slot_id, second.slot_id} == {"0", "1"}
        with pytest.raises(gpu_slots.NoFreeSlotError, match="All slots"):
            gpu_slots.acquire_slot(tmp_path, ["0", "1"], timeout_s=0.0)
    finally:
        first.release()
        second.release()


def test_a_slot_held_by_another_process_is_skipped(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from isotune.sweeps import gpu_slots;"
            "slots = gpu_slots.plan_slots(['0'], jobs_per_gpu=2, cpu_jobs=1);"
            f"print(gpu_slots.claim_process_slot({str(tmp_path)!r}, slots).name, flush=True);"
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env_with_src(),
    )
    try:
        held = holder.stdout.readline().strip()
        lock = gpu_slots.acquire_slot(tmp_path, ["0#0", "0#1"])
        assert {held, lock.slot_id} == {"0#0", "0#1"}
        lock.release()
    finally:
        holder.communicate("")
    # The holder is gone: the OS released its lock, so both slots are free again.
    locks = [gpu_slots.acquire_slot(tmp_path, ["0#0", "0#1"]) for _ in range(2)]
    assert {lock.slot_id for lock in locks} == {"0#0", "0#1"}
    for lock in locks:
        lock.release()


def test_a_released_slot_can_be_reclaimed(tmp_path):
    lock = gpu_slots.acquire_slot(tmp_path, ["3"])
    lock.release()
    again = gpu_slots.acquire_slot(tmp_path, ["3"])
    assert again.slot_id == "3"
    again.release()


def test_held_slots_are_those_of_live_lock_holders(tmp_path):
    lock = gpu_slots.acquire_slot(tmp_path, ["0", "1"])
    gpu_slots.acquire_slot(tmp_path, ["1"]).release()  # leaves an unlocked 1.lock behind
    assert gpu_slots.held_slots(tmp_path) == ["0"]
    lock.release()
    assert gpu_slots.held_slots(tmp_path) == []


def plant(slot_dir: Path, how: str, victim: Path) -> None:
    """A lock file another user could leave in a shared slot folder, aimed at ``victim``."""
    slot_dir.mkdir(exist_ok=True)
    lock = slot_dir / "0.lock"
    if how == "symlink":
        lock.symlink_to(victim)
    elif how == "hard link":
        os.link(victim, lock)
    else:
        os.mkfifo(lock)


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("symlink", "it is a symbolic link"),
        ("hard link", "it has 2 names"),
        ("fifo", "it is not a plain file"),
    ],
)
def test_a_planted_lock_file_is_refused_and_its_target_left_whole(tmp_path, how, why):
    victim = tmp_path / "victim.txt"
    victim.write_text("a user's file\n")
    plant(tmp_path / "slots", how, victim)
    with pytest.raises(
        IsotuneError, match=f"0.lock cannot hold the GPU launcher's slot locks: {why}"
    ):
        gpu_slots.acquire_slot(tmp_path / "slots", ["0"])
    with pytest.raises(IsotuneError, match=why):
        gpu_slots.held_slots(tmp_path / "slots")  # what the launcher and isotune.rerun ask
    assert victim.read_text() == "a user's file\n"


def test_a_slot_folder_that_is_a_symlink_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "slots").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(IsotuneError, match=r"slots cannot hold .* it is a symbolic link"):
        gpu_slots.acquire_slot(tmp_path / "slots", ["0"])
    assert not list((tmp_path / "elsewhere").iterdir())


def test_a_slot_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_slots.os, "geteuid", lambda: os.stat(tmp_path).st_uid + 1)
    with pytest.raises(IsotuneError, match=r"belongs to \S+, not to you.*a folder of your own"):
        gpu_slots.acquire_slot(tmp_path, ["0"])
    assert not list(tmp_path.iterdir())


def test_a_slot_folder_without_write_permission_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_slots.os, "access", lambda path, mode: False)
    with pytest.raises(IsotuneError, match="you may not write in it"):
        gpu_slots.acquire_slot(tmp_path, ["0"])


def test_a_new_slot_folder_is_the_users_alone(tmp_path):
    gpu_slots.acquire_slot(tmp_path / "slots", ["0"]).release()
    assert (tmp_path / "slots").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "slots" / "0.lock").stat().st_mode & 0o777 == 0o600


def test_claiming_pins_the_process_environment_once(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_slots, "_claimed", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    monkeypatch.setenv(gpu_slots.SLOT_ENV_VAR, "unset")
    slots = gpu_slots.plan_slots(None, jobs_per_gpu=1, cpu_jobs=1)
    blocker = gpu_slots.acquire_slot(tmp_path, ["5#0"])
    try:
        slot = gpu_slots.claim_process_slot(tmp_path, slots)
        assert slot == gpu_slots.Slot("7#0", "7")
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "7"
        assert os.environ[gpu_slots.SLOT_ENV_VAR] == "7#0"
        blocker.release()
        assert gpu_slots.claim_process_slot(tmp_path, slots) == slot  # never moves
    finally:
        blocker.release()
        gpu_slots._claimed[1].release()


def test_slots_go_round_robin_over_the_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpu_slots.plan_slots(None, jobs_per_gpu=1, cpu_jobs=4) == [
        gpu_slots.Slot("2#0", "2"),
        gpu_slots.Slot("3#0", "3"),
    ]
    assert gpu_slots.plan_slots([0, 1], jobs_per_gpu=2, cpu_jobs=1) == [
        gpu_slots.Slot("0#0", "0"),
        gpu_slots.Slot("1#0", "1"),
        gpu_slots.Slot("0#1", "0"),
        gpu_slots.Slot("1#1", "1"),
    ]
    with pytest.raises(IsotuneError, match="twice"):
        gpu_slots.plan_slots(["0", "0"], jobs_per_gpu=1, cpu_jobs=1)


@pytest.mark.parametrize("visible", ["-1", ""])
def test_without_gpus_there_are_cpu_slots_that_see_no_gpu(monkeypatch, visible):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    slots = gpu_slots.plan_slots(None, jobs_per_gpu=2, cpu_jobs=2)
    assert slots == [gpu_slots.Slot("cpu0", None), gpu_slots.Slot("cpu1", None)]
    assert gpu_slots.pinned_environment(slots[1]) == {
        "CUDA_VISIBLE_DEVICES": "",
        gpu_slots.SLOT_ENV_VAR: "cpu1",
    }


def launcher(gpus: list[str] | None, jobs_per_gpu: int = 1, n_jobs: int | None = None):
    return GpusLauncher(gpus=gpus, jobs_per_gpu=jobs_per_gpu, n_jobs=n_jobs, slot_dir="unused")


def test_jobs_at_once_default_to_one_per_slot():
    slots, n_jobs = launcher(["0", "1"], jobs_per_gpu=3).plan()
    assert (len(slots), n_jobs) == (6, 6)
    assert launcher(["0", "1"], jobs_per_gpu=3, n_jobs=4).plan()[1] == 4


def test_n_jobs_without_gpus_is_the_number_of_cpu_jobs():
    slots, n_jobs = launcher([], n_jobs=3).plan()
    assert ([slot.name for slot in slots], n_jobs) == (["cpu0", "cpu1", "cpu2"], 3)
    slots, n_jobs = launcher([]).plan()
    assert ([slot.name for slot in slots], n_jobs) == (["cpu0"], 1)


def test_more_jobs_at_once_than_slots_is_refused():
    with pytest.raises(
        IsotuneError, match=r"n_jobs=5 but GPUs \['0', '1'\] x jobs_per_gpu=2 give 4"
    ):
        launcher(["0", "1"], jobs_per_gpu=2, n_jobs=5).plan()


@pytest.mark.parametrize(("jobs_per_gpu", "n_jobs"), [(0, None), (1, 0)])
def test_job_counts_below_one_are_refused(jobs_per_gpu, n_jobs):
    with pytest.raises(IsotuneError, match="set them to 1 or more"):
        launcher(["0"], jobs_per_gpu=jobs_per_gpu, n_jobs=n_jobs).plan()


def test_threads_per_job_below_one_is_refused():
    refused = GpusLauncher(gpus=["0"], jobs_per_gpu=1, n_jobs=None, slot_dir="x", threads_per_job=0)
    with pytest.raises(IsotuneError, match=r"threads_per_job=0: set it to 1 or more"):
        refused.plan()


APP = """
import json, os, signal, sys, time
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig


def gather(folder, job_num, count):
    # Wait until `count` jobs have started, so that they provably run at the same time.
    folder.mkdir(exist_ok=True)
    (folder / str(job_num)).touch()
    deadline = time.monotonic() + 60  # a safety stop, not a measurement
    while len(list(folder.iterdir())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(list(folder.iterdir()))} of {count} jobs ran at once")
        time.sleep(0.02)


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg):
    start = time.time()
    hydra_cfg = HydraConfig.get()
    if cfg.mode == "crash":
        os._exit(3)
    if hydra_cfg.job.num < cfg.gather:
        gather(Path(hydra_cfg.sweep.dir, "gathered"), hydra_cfg.job.num, cfg.gather)
    if cfg.mode == "stoppable":  # as a training run stops: records its end, exits 128 + signal
        stopped = []  # its handlers outlive it, as a run's can (Lightning's restore them late)
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, lambda signum, frame: stopped.append(signum))
        Path(hydra_cfg.sweep.dir, "stoppable").touch()
        while not stopped:
            time.sleep(0.02)
        Path(hydra_cfg.runtime.output_dir, "results.json").write_text('{"status": "completed"}')
        sys.exit(128 + stopped[0])
    time.sleep(cfg.sleep)
    record = {
        "start": start,
        "end": time.time(),
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slot": os.environ.get("ISOTUNE_GPU_SLOT"),
        "threads": torch.get_num_threads(),
        "sleep": cfg.sleep,
        "mode": cfg.mode,
    }
    Path(hydra_cfg.runtime.output_dir, "record.json").write_text(json.dumps(record))
    if cfg.mode == "fail":
        raise RuntimeError("planned failure")


if __name__ == "__main__":
    main()
"""

TWO_GPUS = ("hydra/launcher=gpus", "hydra.launcher.gpus=[0,1]")


def _app_folder(tmp_path: Path) -> Path:
    """``tmp_path`` made the app's folder: APP, its config and our gpus launcher's YAML (the app
    uses ours); the sweep folder to give it."""
    (tmp_path / "my_app.py").write_text(textwrap.dedent(APP))
    (tmp_path / "config.yaml").write_text("sleep: 0.0\nmode: ok\ngather: 0\n")
    launcher_yaml = tmp_path / "hydra" / "launcher" / "gpus.yaml"
    launcher_yaml.parent.mkdir(parents=True)
    shutil.copy(CONF_DIR / "hydra" / "launcher" / "gpus.yaml", launcher_yaml)
    return tmp_path / "sweep"


def _run_sweep(
    tmp_path: Path, *overrides: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    sweep_dir = _app_folder(tmp_path)
    result = subprocess.run(
        [sys.executable, "my_app.py", "-m", f"hydra.sweep.dir={sweep_dir}", *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**_env_with_src(), **(env or {})},
        timeout=120,
    )
    records = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/record.json"))]
    return result, records


def most_jobs_at_once(records: list[dict]) -> dict[str, int]:
    """Per GPU (CUDA_VISIBLE_DEVICES), the most jobs that ran at the same time."""
    most: dict[str, int] = {}
    for record in records:
        running = [
            other
            for other in records
            if other["cuda_visible_devices"] == record["cuda_visible_devices"]
            and other["start"] <= record["start"] < other["end"]
        ]  # jobs on this GPU running when `record` started: the peaks are at starts
        gpu = record["cuda_visible_devices"]
        most[gpu] = max(most.get(gpu, 0), len(running))
    return most


@pytest.mark.slow
def test_sweep_runs_one_job_per_slot_at_a_time(tmp_path):
    durations = [0.1, 1.0, 0.2, 0.6, 0.3]
    result, records = _run_sweep(
        tmp_path, *TWO_GPUS, "hydra.launcher.n_jobs=2", "sleep=" + ",".join(map(str, durations))
    )
    assert result.returncode == 0, result.stderr
    assert sorted(r["sleep"] for r in records) == sorted(durations)
    assert {(r["slot"], r["cuda_visible_devices"]) for r in records} <= {("0#0", "0"), ("1#0", "1")}
    assert set(most_jobs_at_once(records).values()) == {1}
    assert len({r["pid"] for r in records}) <= 2  # more jobs than slots: they queued


@pytest.mark.slow
def test_jobs_per_gpu_packs_each_gpu_but_never_beyond(tmp_path):
    # Two GPUs x 2 = 4 slots and n_jobs by default 4; the first four jobs wait for one another,
    # so they run at once, which needs all four slots; the rest queue with unequal durations.
    durations = [0.1, 0.1, 0.1, 0.1, 0.9, 0.1, 0.5, 0.2, 0.7, 0.1, 0.3]
    result, records = _run_sweep(
        tmp_path,
        *TWO_GPUS,
        "hydra.launcher.jobs_per_gpu=2",
        "gather=4",
        "sleep=" + ",".join(map(str, durations)),
    )
    assert result.returncode == 0, result.stderr
    assert len(records) == len(durations)
    assert {(r["slot"], r["cuda_visible_devices"]) for r in records} == {
        ("0#0", "0"),
        ("0#1", "0"),
        ("1#0", "1"),
        ("1#1", "1"),
    }
    assert most_jobs_at_once(records) == {"0": 2, "1": 2}
    for pid in {r["pid"] for r in records}:  # a worker stays on its GPU
        assert len({r["cuda_visible_devices"] for r in records if r["pid"] == pid}) == 1


@pytest.mark.slow
def test_n_jobs_runs_that_many_cpu_jobs_at_once_without_gpus(tmp_path):
    result, records = _run_sweep(
        tmp_path,
        "hydra/launcher=gpus",
        "hydra.launcher.n_jobs=2",
        "gather=2",
        "sleep=0.0,0.1,0.2",
        env={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert result.returncode == 0, result.stderr
    assert sorted(r["sleep"] for r in records) == [0.0, 0.1, 0.2]
    assert {r["slot"] for r in records} == {"cpu0", "cpu1"}
    assert {r["cuda_visible_devices"] for r in records} == {""}
    # Two jobs at once share the cores instead of each taking all of them.
    assert {r["threads"] for r in records} == {max(1, len(os.sched_getaffinity(0)) // 2)}


@pytest.mark.slow
def test_threads_per_job_sets_each_jobs_torch_threads(tmp_path):
    result, records = _run_sweep(
        tmp_path, *TWO_GPUS, "hydra.launcher.threads_per_job=3", "sleep=0.0,0.1,0.2"
    )
    assert result.returncode == 0, result.stderr
    assert [r["threads"] for r in records] == [3, 3, 3]


@pytest.mark.slow
def test_failing_and_crashing_jobs_do_not_stop_the_others(tmp_path):
    result, records = _run_sweep(
        tmp_path, *TWO_GPUS, "hydra.launcher.n_jobs=2", "mode=fail,crash,ok,ok2", "sleep=0.2"
    )
    assert result.returncode != 0
    assert sorted(r["mode"] for r in records) == ["fail", "ok", "ok2"]
    output = result.stdout + result.stderr
    assert "RuntimeError: planned failure" in output
    assert "my_app.py" in output  # the job's traceback names the app's file
    assert "Job #1 (mode=crash sleep=0.2) died with its worker process" in output
    assert "exit code 3" in output
    assert "2 of 4 jobs failed" in output


@pytest.mark.slow
def test_a_stopped_sweeps_jobs_are_each_reported_stopped_once(tmp_path):
    """SIGTERM to the sweep: a job that records its end and exits 143 (as a training run does)
    and one the signal ends outside any handler are each one "stopped" line, not a crash."""
    sweep = _app_folder(tmp_path)
    overrides = ["hydra/launcher=gpus", "hydra.launcher.n_jobs=2", "gather=2", "sleep=120"]
    process = subprocess.Popen(
        [
            sys.executable,
            "my_app.py",
            "-m",
            f"hydra.sweep.dir={sweep}",
            *overrides,
            "mode=stoppable,ok",
        ],
        cwd=tmp_path,
        env={**_env_with_src(), "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120  # a safety stop, not a measurement
    while not (sweep / "stoppable").exists() or len(list((sweep / "gathered").iterdir())) < 2:
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert "died with its worker process" not in output and "FAILED" not in output, output
    recorded = f"stopped by SIGTERM: {sweep / '0' / 'results.json'} says completed"
    assert output.count(recorded) == 1, output
    assert (
        output.count("#1 (gather=2 sleep=120 mode=ok) stopped by SIGTERM before returning") == 1
    ), output


@pytest.mark.slow
def test_one_ctrl_c_stops_a_sweep_whose_jobs_take_every_signal_for_their_own(tmp_path):
    """Ctrl-C as a terminal sends it, to the whole process group: each job records its end and
    returns, its worker (whose job left its own SIGTERM handler behind) is told to stop, and the
    sweep ends within seconds, each job one "stopped by SIGINT" line. Before, the launcher sent
    SIGTERM to the workers and joined them without a timeout: a worker back in its wait for the
    next job took that SIGTERM for its job's, and the sweep waited for a second Ctrl-C."""
    sweep = _app_folder(tmp_path)
    overrides = ["hydra/launcher=gpus", "hydra.launcher.n_jobs=2", "gather=2", "mode=stoppable"]
    process = subprocess.Popen(
        [sys.executable, "my_app.py", "-m", f"hydra.sweep.dir={sweep}", *overrides, "sleep=1,2,3"],
        cwd=tmp_path,
        env={**_env_with_src(), "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell's foreground job
    )
    try:
        deadline = time.monotonic() + 120  # a safety stop, not a measurement
        while not (sweep / "stoppable").exists() or len(list((sweep / "gathered").iterdir())) < 2:
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
            time.sleep(0.05)
        time.sleep(0.5)  # both jobs past installing their handlers
        os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "killing it" not in output, output  # every worker ended when told to
    for job in ("0", "1"):
        stopped = f"stopped by SIGINT: {sweep / job / 'results.json'} says completed"
        assert output.count(stopped) == 1, output
    assert not (sweep / "2").exists()  # no job starts once the sweep is stopping


def _ignore_sigterm_and_sleep(ready) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(600)


def test_a_worker_that_does_not_end_when_told_is_killed_at_the_deadline():
    """The launcher never waits for a worker without a deadline: one that ignores its stop (as a
    worker did whose finished run had left its own SIGTERM handler behind) is killed then."""
    fork = multiprocessing.get_context("fork")
    ready = fork.Event()
    worker = fork.Process(target=_ignore_sigterm_and_sleep, args=(ready,))
    worker.start()
    assert ready.wait(60)
    worker.terminate()  # ignored
    started = time.monotonic()
    _join_or_kill(worker, time.monotonic() + 0.5)
    assert 0.4 < time.monotonic() - started < 30
    assert worker.exitcode == -signal.SIGKILL


@pytest.mark.slow
def test_an_unusable_slot_folder_is_one_message_before_any_job(tiny_bert, glue_dir, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("a user's file\n")
    plant(tmp_path / "shared", "symlink", victim)
    result = run_script(
        "train.py",
        "-m",
        "hydra/launcher=gpus",
        f"hydra.launcher.slot_dir={tmp_path / 'shared'}",
        "seed=1,2",
        *tiny_cli_overrides(tiny_bert, glue_dir),
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "Traceback" not in output and "PermissionError" not in output, output[-3000:]
    assert output.count("cannot hold the GPU launcher's slot locks: it is a symbolic link") == 1
    assert not list(tmp_path.glob("logs/multirun/*/*/results.json"))  # no job ran
    assert victim.read_text() == "a user's file\n"
