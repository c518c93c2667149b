"""benchmarks/bench_sweep.py's reading of a sweep: a warm job's cost from the jobs' log stamps
(one worker runs them in turn), and the command it sweeps."""

from __future__ import annotations

from pathlib import Path

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
