"""The `gpus` Hydra launcher and its slot claiming, on CPU: GPU ids are simulated with
`hydra.launcher.gpus`, so these tests check the pinning logic, not real devices."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hydra_plugins.isotune_launcher.gpus_launcher import GpusLauncher
from isotune.errors import IsotuneError
from isotune.sweeps import gpu_slots

SRC_DIR = Path(__file__).resolve().parents[1] / "src"


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
            f"print(gpu_slots.claim_process_slot({str(tmp_path)!r}, ['0', '1']), flush=True);"
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env_with_src(),
    )
    try:
        held = holder.stdout.readline().strip()
        lock = gpu_slots.acquire_slot(tmp_path, ["0", "1"])
        assert {held, lock.slot_id} == {"0", "1"}
        lock.release()
    finally:
        holder.communicate("")
    # The holder is gone: the OS released its lock, so both slots are free again.
    locks = [gpu_slots.acquire_slot(tmp_path, ["0", "1"]) for _ in range(2)]
    assert {lock.slot_id for lock in locks} == {"0", "1"}
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


def test_claiming_pins_the_process_environment_once(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_slots, "_process_slot", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    monkeypatch.setenv(gpu_slots.SLOT_ENV_VAR, "unset")
    blocker = gpu_slots.acquire_slot(tmp_path, ["5"])
    try:
        slot = gpu_slots.claim_process_slot(tmp_path, ["5", "7"])
        assert slot == "7"
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "7"
        assert os.environ[gpu_slots.SLOT_ENV_VAR] == "7"
        blocker.release()
        assert gpu_slots.claim_process_slot(tmp_path, ["5", "7"]) == "7"  # never moves
    finally:
        blocker.release()
        gpu_slots._process_slot.release()


def test_slot_ids_fall_back_to_cpu_slots(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpu_slots.slot_ids(None, cpu_jobs=2) == ["2", "3"]
    assert gpu_slots.slot_ids([0, 1], cpu_jobs=2) == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert gpu_slots.slot_ids(None, cpu_jobs=2) == ["cpu0", "cpu1"]
    assert gpu_slots.pinned_environment("cpu1") == {
        "CUDA_VISIBLE_DEVICES": "",
        gpu_slots.SLOT_ENV_VAR: "cpu1",
    }
    with pytest.raises(IsotuneError, match="twice"):
        gpu_slots.slot_ids(["0", "0"], cpu_jobs=1)


def test_more_jobs_at_once_than_slots_is_refused():
    launcher = GpusLauncher(gpus=["0", "1"], n_jobs=3)
    with pytest.raises(IsotuneError, match=r"n_jobs=3 but there are 2 slots"):
        launcher._jobs_at_once(["0", "1"])


APP = """
import json, os, time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg):
    start = time.time()
    if cfg.mode == "crash":
        os._exit(3)
    time.sleep(cfg.sleep)
    record = {
        "start": start,
        "end": time.time(),
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slot": os.environ.get("ISOTUNE_GPU_SLOT"),
        "sleep": cfg.sleep,
        "mode": cfg.mode,
    }
    Path(HydraConfig.get().runtime.output_dir, "record.json").write_text(json.dumps(record))
    if cfg.mode == "fail":
        raise RuntimeError("planned failure")


if __name__ == "__main__":
    main()
"""


def _run_sweep(tmp_path: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    (tmp_path / "my_app.py").write_text(textwrap.dedent(APP))
    (tmp_path / "config.yaml").write_text("sleep: 0.0\nmode: ok\n")
    sweep_dir = tmp_path / "sweep"
    launcher = ["hydra/launcher=gpus", "hydra.launcher.gpus=[0,1]", "hydra.launcher.n_jobs=2"]
    result = subprocess.run(
        [sys.executable, "my_app.py", "-m", *launcher, f"hydra.sweep.dir={sweep_dir}", *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env_with_src(),
        timeout=60,
    )
    records = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/record.json"))]
    return result, records


def test_sweep_runs_one_job_per_slot_at_a_time(tmp_path):
    durations = [0.1, 1.0, 0.2, 0.6, 0.3]
    result, records = _run_sweep(tmp_path, "sleep=" + ",".join(map(str, durations)))
    assert result.returncode == 0, result.stderr
    assert sorted(r["sleep"] for r in records) == sorted(durations)
    assert {r["slot"] for r in records} <= {"0", "1"}
    for record in records:
        assert record["cuda_visible_devices"] == record["slot"]
    for a, b in itertools.combinations(records, 2):
        overlapping = a["start"] < b["end"] and b["start"] < a["end"]
        assert not (overlapping and a["slot"] == b["slot"]), (a, b)
    assert len({r["pid"] for r in records}) <= 2  # more jobs than slots: they queued


def test_failing_and_crashing_jobs_do_not_stop_the_others(tmp_path):
    result, records = _run_sweep(tmp_path, "mode=fail,crash,ok,ok2", "sleep=0.2")
    assert result.returncode != 0
    assert sorted(r["mode"] for r in records) == ["fail", "ok", "ok2"]
    output = result.stdout + result.stderr
    assert "RuntimeError: planned failure" in output
    assert "my_app.py" in output  # the job's traceback names the app's file
    assert "Job #1 (mode=crash sleep=0.2) died with its worker process" in output
    assert "exit code 3" in output
    assert "2 of 4 jobs failed" in output
