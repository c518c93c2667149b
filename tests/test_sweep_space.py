"""A sweep knows its size: its expected footprint before any job starts (refused, in one message,
where its file system cannot hold it, unless overridden), and the disk its folder uses after."""

from __future__ import annotations

import shutil

import pytest

from hydra_plugins.isotune_launcher._sweep_space import (
    check_sweep_fits,
    completed_runs,
    jobs_at_once,
)
from isotune.errors import IsotuneError
from isotune.model.encoders import parameter_count
from isotune.record.results import RESULTS_FILE
from isotune.sweeps.footprint import RECORDS, RunFootprint, disk_used, readable, sweep_footprint
from isotune.sweeps.runs import Run
from isotune.sweeps.summary import summarize_sweep
from tests.conftest import compose_train_config
from tests.helpers.cli import run_cli, tiny_cli_overrides
from tests.helpers.disks import small_disk
from tests.helpers.fake_runs import completed, write_multirun, write_run

MINILM = 22_713_216  # parameters of the packaged MiniLM encoder
MB = 1_000_000


def test_a_run_peaks_with_two_whole_last_checkpoints_and_keeps_what_checkpoint_keep_says():
    model = 4 * MINILM  # float32
    slim = RunFootprint.of(MINILM, "full", "slim")
    assert slim.peak == 2 * 3 * model + model + RECORDS  # old and new last.ckpt, slim best.ckpt
    assert slim.completed == model + RECORDS
    full = RunFootprint.of(MINILM, "full", "full")
    assert (full.peak, full.completed) == (3 * 3 * model + RECORDS, 2 * 3 * model + RECORDS)
    assert RunFootprint.of(MINILM, "full", "none").completed == RECORDS
    lora = RunFootprint.of(MINILM, "lora", "full")
    assert lora.completed < 0.03 * full.completed + RECORDS  # adapters and head only
    # The study: 160 MiniLM runs kept whole are about 83 GB; slim, a ninth of it.
    assert 80e9 < sweep_footprint([full] * 160, at_once=1) < 90e9
    assert sweep_footprint([slim] * 160, at_once=1) < 17e9
    assert sweep_footprint([slim] * 4, at_once=2) == 2 * slim.peak + 2 * slim.completed


def test_jobs_at_once_follow_the_launcher(monkeypatch):
    basic = compose_train_config(["seed=1"]).hydra.launcher
    slurm = compose_train_config(["hydra/launcher=slurm"]).hydra.launcher
    gpus = compose_train_config(["hydra/launcher=gpus", "hydra.launcher.n_jobs=3"]).hydra.launcher
    assert jobs_at_once(basic, 160) == 1
    assert jobs_at_once(slurm, 160) == slurm.array_parallelism
    assert jobs_at_once(gpus, 160) == 3 and jobs_at_once(gpus, 2) == 2
    # n_jobs null: one job a slot, not every job at once (the preview's time was a wave short)
    slots = compose_train_config(["hydra/launcher=gpus", "hydra.launcher.gpus=[0,1]"])
    assert jobs_at_once(slots.hydra.launcher, 160) == 2
    shared = compose_train_config(
        ["hydra/launcher=gpus", "hydra.launcher.gpus=[0,1]", "hydra.launcher.jobs_per_gpu=3"]
    )
    assert jobs_at_once(shared.hydra.launcher, 160) == 6
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: one CPU slot
    cpu = compose_train_config(["hydra/launcher=gpus"]).hydra.launcher
    assert jobs_at_once(cpu, 160) == 1
    packed = compose_train_config(
        ["hydra/launcher=slurm", "hydra.launcher.jobs_per_gpu=3", "hydra.launcher.allocations=4"]
    ).hydra.launcher  # four allocations of one GPU, three jobs on it
    assert jobs_at_once(packed, 160) == 12 and jobs_at_once(packed, 5) == 5


def test_a_sweep_that_does_not_fit_can_be_started_knowingly(tmp_path):
    job = compose_train_config(["checkpoint.keep=full"])
    with pytest.raises(IsotuneError) as refused:  # 10,000 MiniLM runs kept whole: 5.5 TB
        check_sweep_fits(tmp_path, [job] * 10_000, at_once=1)
    message = str(refused.value)
    assert "10000 jobs with checkpoint.keep=full" in message  # a sweep typed afresh
    assert "check_free_space=false" in message
    knowingly = compose_train_config(["checkpoint.keep=full", "check_free_space=false"])
    check_sweep_fits(tmp_path, [knowingly] * 10_000, at_once=1)  # not refused


def test_a_sweep_into_a_small_disk_is_refused_before_any_job_starts(tmp_path, tiny_bert, glue_dir):
    with small_disk(tmp_path / "disk", size="4m") as disk:
        sweep = disk / "sweep"
        result = run_cli(
            "-m", *tiny_cli_overrides(tiny_bert, glue_dir), "seed=1,2,3", f"hydra.sweep.dir={sweep}"
        )
        output = result.stdout + result.stderr
        assert result.returncode == 1, output
        assert "Traceback" not in output, output
        assert output.count("This sweep needs about") == 1, output
        assert f"in {sweep}, but its file system has" in output
        for way_out in ("checkpoint.keep=none", "hydra.sweep.dir", "array_parallelism"):
            assert way_out in output
        assert "check_free_space=false" in output
        assert not (sweep / "0").exists() and not (sweep / "multirun.yaml").exists()


def test_the_sweep_summary_states_the_disk_its_folder_uses(tmp_path):
    write_multirun(tmp_path, ["seed=1,2"])
    for job, seed in enumerate((1, 2)):
        write_run(
            tmp_path / str(job), [f"seed={seed}"], completed("minilm", "none", "rte", seed, 0.6)
        )
    (tmp_path / "0" / "checkpoints").mkdir()
    (tmp_path / "0" / "checkpoints" / "best.ckpt").write_bytes(b"\1" * 300_000)
    used = disk_used(tmp_path)
    assert 300_000 <= used < 400_000
    assert f"The sweep folder uses {readable(used)} of disk." in summarize_sweep(tmp_path).text


@pytest.mark.slow  # four tiny jobs, as two sweeps
def test_a_sweep_typed_again_is_sized_by_the_jobs_it_has_left(tmp_path, tiny_bert, glue_dir):
    with small_disk(tmp_path / "disk", size="64m") as disk:
        sweep = disk / "sweep"
        command = ["-m", *tiny_cli_overrides(tiny_bert, glue_dir), "seed=1,2,3"]
        command.append(f"hydra.sweep.dir={sweep}")
        first = run_cli(*command)
        assert first.returncode == 0, first.stdout + first.stderr
        shutil.rmtree(sweep / "2")  # as if its job were preempted before it started
        keep = compose_train_config([]).checkpoint.keep
        run = RunFootprint.of(parameter_count(str(tiny_bert)), "full", keep)
        one, three = sweep_footprint([run], 1), sweep_footprint([run] * 3, 1)
        room = (one + three) // 2  # one job's estimate fits, the three jobs' does not
        filler = disk / "filler"
        filler.write_bytes(b"\1" * (shutil.disk_usage(disk).free - room))
        again = run_cli(*command)
        output = again.stdout + again.stderr
        assert again.returncode == 0, output
        assert "This sweep needs about" not in output
        assert "for its 1 job left (2 completed before); checkpoint.keep=" in output
        assert [Run.read(sweep / job / RESULTS_FILE).completed for job in "012"] == [True] * 3


def test_completed_runs_counts_the_runs_that_completed(tmp_path):
    assert completed_runs(tmp_path / "absent") == 0
    for job, seed in enumerate((1, 2)):
        write_run(
            tmp_path / str(job), [f"seed={seed}"], completed("minilm", "none", "rte", seed, 0.6)
        )
    write_run(tmp_path / "2", ["seed=3"], {"status": "failed", "error": "NaN loss"})
    assert completed_runs(tmp_path) == 2
