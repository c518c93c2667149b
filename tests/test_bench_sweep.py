"""benchmarks/bench_sweep.py's reading of a sweep: a warm job's cost from the jobs' log stamps
(one worker runs them in turn), and the command it sweeps."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import bench_sweep
import pytest


def write_log(folder: Path, first: str, last: str) -> None:
    folder.mkdir(parents=True)
    (folder / "train.log").write_text(
        f"[2026-12-04 {first}][isotune.data.datamodule][INFO] - rte validation: 277 examples\n"
        "a continued message line without a stamp\n"
        f"[2026-12-04 {last}][isotune][INFO] - Output directory: somewhere\n"
    )


def test_a_warm_job_costs_from_the_previous_jobs_end_to_its_own(tmp_path):
    write_log(tmp_path / "0", "10:00:00,000", "10:00:09,500")
    write_log(tmp_path / "1", "10:00:10,250", "10:00:15,000")
    write_log(tmp_path / "2", "10:00:15,500", "10:00:20,000")
    warm, start_up = bench_sweep.read_jobs(tmp_path, 3)
    assert warm == pytest.approx([5.5, 5.0])
    assert start_up == pytest.approx([0.75, 0.5])


def test_the_before_variant_measures_in_every_job_with_foreach_adamw(tmp_path):
    command = bench_sweep.sweep_command(3, tmp_path, "/glue", bench_sweep.VARIANTS["before"])
    assert "seed=1,2,3" in command and "hydra.launcher.n_jobs=1" in command
    assert command[-2:] == ["callbacks.isotropy.shared_dir=null", "optim.fused=false"]
    assert "callbacks.isotropy.shared_dir=null" not in bench_sweep.sweep_command(
        3, tmp_path, "/glue", bench_sweep.VARIANTS["after"]
    )


def test_the_memory_mode_sweeps_a_tiny_model_and_records_each_jobs_resident_memory(tmp_path):
    command = bench_sweep.memory_command(20, tmp_path, "/glue", Path("/tiny"))
    assert "seed=" + ",".join(map(str, range(1, 21))) in command
    assert "hydra.launcher.n_jobs=1" in command and "model.name_or_path=/tiny" in command
    assert command[-1] == "+callbacks.resident_memory._target_=bench_sweep.ResidentMemory"


def test_each_job_records_its_resident_memory_and_they_are_read_in_job_order(tmp_path):
    callback = bench_sweep.ResidentMemory()
    for n in range(3):
        folder = tmp_path / str(n)
        folder.mkdir()
        callback.teardown(SimpleNamespace(default_root_dir=str(folder)), None, "fit")
        callback.teardown(SimpleNamespace(default_root_dir=str(folder / "none")), None, "validate")
    found = bench_sweep.read_resident(tmp_path, 3)
    assert [sorted(job) for job in found] == [["modules", "objects", "resident_mib"]] * 3
    assert all(10 < job["resident_mib"] < 100_000 and job["modules"] > 100 for job in found)
