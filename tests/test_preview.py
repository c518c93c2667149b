"""hydra.sweeper.preview=true (issue 64 item 1, docs/sweeps.md#preview): a plain multirun, a search
and a study say what would run, the disk it needs against the disk free and the time it would
take, from something measured, then exit 0 having launched and written nothing; a preview whose
settings are refused shows the refusal, not a plan. The slow tests run `python train.py -m` on
the tiny model."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hydra_plugins.isotune_launcher._step_timing import bound_elsewhere, job_threads, time_job
from hydra_plugins.isotune_launcher.preview import PreviewConf, folder_line
from hydra_plugins.isotune_launcher.summarizing_sweeper import SummarizingSweeperConf
from isotune.record.folder_lock import LOCK_FILE
from isotune.sweeps.time_estimate import JobParts, completed_runs_time, duration, sweep_time
from tests.conftest import compose_train_config
from tests.helpers.cli import run_script, tiny_cli_overrides
from tests.helpers.fake_runs import completed, write_run

PREVIEW = "hydra.sweeper.preview=true"


# ---- the time, from something measured ----
def test_a_sweeps_time_comes_from_the_wall_times_of_the_runs_completed_in_its_folder(tmp_path):
    for number, wall in enumerate([60.0, 90.0, 300.0]):
        write_run(
            tmp_path / str(number),
            [],
            {**completed("m", "none", "rte", 1, 0.6), "wall_time_s": wall},
        )
    write_run(tmp_path / "3", [], {"status": "failed", "wall_time_s": 5.0})  # not a job's time
    job = completed_runs_time(tmp_path)
    assert (job.typical, job.low, job.high) == (90.0, 60.0, 300.0)
    assert "3 runs completed in" in job.measured_from
    # 5 jobs, 2 at once: 3 waves of a job each
    assert sweep_time(job, 5, 2).startswith(
        "about 4.5 min (from 3 min to 15 min) for 5 jobs, 2 at once"
    )


def test_a_folder_without_a_completed_run_gives_no_time(tmp_path):
    assert completed_runs_time(tmp_path / "not made") is None
    write_run(tmp_path / "0", [], {"status": "running", "wall_time_s": 50.0})
    assert completed_runs_time(tmp_path) is None


def test_durations_read_in_their_unit():
    assert [duration(s) for s in (42, 210, 7560, 129600, 259200)] == [
        "42 s", "3.5 min", "2.1 h", "36 h", "3 days",
    ]  # fmt: skip


def test_a_job_sent_to_slurm_or_to_a_gpu_this_machine_lacks_gets_no_estimate_and_how_to_get_one(
    monkeypatch,
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    slurm = compose_train_config(["hydra/launcher=slurm", "hydra.launcher.partition=gpu"])
    said = bound_elsewhere(slurm, slurm.hydra.launcher)
    assert said.startswith("the jobs run on SLURM (partition gpu)") and "To get one:" in said
    gpu = compose_train_config(["trainer=gpu"])
    said = bound_elsewhere(gpu, gpu.hydra.launcher)
    assert "trainer.accelerator=gpu" in said and "To get one:" in said
    ddp = compose_train_config(["trainer=ddp"])
    assert "trainer.devices=-1" in bound_elsewhere(ddp, ddp.hydra.launcher)
    cpu = compose_train_config(["trainer=cpu", "hydra/launcher=gpus"])
    assert bound_elsewhere(cpu, cpu.hydra.launcher) is None


def test_a_jobs_time_counts_each_of_its_parts_as_often_as_the_job_does_it():
    """Training batches alone were 2.9x short (issue 70 item 5): the load, the epoch-0 probe and
    each validation pass count too."""
    parts = JobParts(
        load=2.0,
        probe=5.0,
        train=(1.0, 3.0, 2.0),
        train_count=10,
        val=(0.5, 1.5),
        val_count=4,
        val_end=0.25,
        validations=3,
        timed_on="CPU with 2 torch threads",
    )
    job = parts.job_time("job #0")
    # load + probe + 10 training batches + 3 passes of (4 validation batches + the pass's end)
    assert job.typical == 2 + 5 + 10 * 2.0 + 3 * (4 * 1.0 + 0.25)
    assert (job.low, job.high) == (2 + 5 + 10 + 3 * 2.25, 2 + 5 + 30 + 3 * 6.25)
    once = {"load": 2.0, "probe": 5.0}
    for part, seconds in once.items():  # once a job
        assert parts.seconds(2.0, 1.0) - replace(parts, **{part: 0.0}).seconds(2.0, 1.0) == seconds
    base = parts.seconds(2.0, 1.0)
    assert replace(parts, train_count=20).seconds(2.0, 1.0) - base == 10 * 2.0
    assert replace(parts, val_count=8).seconds(2.0, 1.0) - base == 3 * 4 * 1.0
    assert replace(parts, val_end=1.25).seconds(2.0, 1.0) - base == 3 * 1.0
    assert replace(parts, validations=6).seconds(2.0, 1.0) - base == 3 * 4.25
    saving = replace(parts, save=0.5, saves=4)  # last.ckpt each of 3 epochs, best.ckpt once
    assert saving.seconds(2.0, 1.0) - base == 4 * 0.5
    assert "a checkpoint written in 0.5 s x 4" in saving.job_time("job #0").measured_from
    for said in (
        "job #0 timed here on CPU with 2 torch threads: model and data loaded in 2 s",
        "the epoch-0 isotropy probe 5 s",
        "3 training batches 2 s each (the median) x 10",
        "2 validation batches 1 s each x 4 a pass and 0.25 s at its end (metrics, isotropy) x 3",
    ):
        assert said in job.measured_from


def test_a_probe_the_sweeps_jobs_share_is_counted_in_the_first_wave_only():
    """The jobs of a sweep read the epoch-0 measures the first ones made (callbacks.isotropy.
    shared_dir): counted in every wave, an 8-job sweep two at a time paid the probe 4 times."""
    parts = JobParts(2.0, 5.0, (1.0,), 10, (), 0, 0.0, 1, "CPU with 1 torch thread")
    alone, shared = parts.job_time("job"), replace(parts, probe_shared=True).job_time("job")
    assert alone.typical == shared.typical == 17.0  # one job pays it either way
    assert sweep_time(alone, 8, 2).startswith(f"about {duration(4 * 17.0)} ")
    assert sweep_time(shared, 8, 2).startswith(f"about {duration(4 * 17.0 - 3 * 5.0)} ")
    assert "the probe in the first wave only" in shared.measured_from
    assert "first wave" not in alone.measured_from


def test_a_job_shares_its_probe_where_its_isotropy_callback_names_a_shared_folder(tmp_path):
    from hydra_plugins.isotune_launcher._step_timing import _probe_shared

    assert _probe_shared(compose_train_config([]))  # the default: the sweep's folder
    assert not _probe_shared(compose_train_config(["callbacks.isotropy.shared_dir=null"]))
    assert not _probe_shared(compose_train_config(["callbacks.isotropy=null"]))


def test_under_the_gpus_launcher_a_job_is_timed_with_its_share_of_the_threads(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    basic = compose_train_config([])
    assert job_threads(basic.hydra.launcher, 1) is None  # the process's threads, as its job
    gpus = compose_train_config(["hydra/launcher=gpus", "hydra.launcher.n_jobs=2"])
    assert job_threads(gpus.hydra.launcher, 2) == 4  # 8 cores over 2 jobs at once
    given = compose_train_config(["hydra/launcher=gpus", "hydra.launcher.threads_per_job=3"])
    assert job_threads(given.hydra.launcher, 2) == 3


@pytest.mark.slow  # a model and a trainer built: seconds on a busy machine
def test_each_part_of_a_job_is_timed_here_and_counted_writing_nothing(
    tmp_path, tiny_bert, glue_dir, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    job = compose_train_config(
        # validation in batches of 4, of which debug=limit keeps 2
        tiny_cli_overrides(
            tiny_bert, glue_dir, "trainer=cpu", "trainer.max_epochs=3", "data.eval_batch_size=4"
        ),
        output_dir=tmp_path / "run",
    )
    threads = torch.get_num_threads()
    parts = time_job(job, threads=1, steps=3)
    # debug=limit: 4 training batches an epoch, 3 epochs; 2 validation batches a pass, each epoch
    assert (parts.train_count, parts.val_count, parts.validations) == (12, 2, 3)
    assert (len(parts.train), len(parts.val)) == (2, 2)  # the first training batch not counted
    assert min(parts.load, parts.probe, parts.val_end, parts.save, *parts.train, *parts.val) > 0
    assert parts.saves == 3 + 1  # last.ckpt each epoch, best.ckpt once
    assert parts.timed_on == "CPU with 1 torch thread" and torch.get_num_threads() == threads
    assert list(tmp_path.iterdir()) == []
    job.callbacks.isotropy = None  # no isotropy callback: no probe to time
    assert time_job(job, steps=2).probe < parts.probe / 10


def test_a_previews_folder_line_says_it_makes_no_folder(tmp_path):
    sweep = tmp_path / "sweep"
    not_made = f"Sweep folder: {sweep} (not made: a preview makes none; the sweep would)"
    assert folder_line("Sweep", sweep, preview=True) == not_made
    sweep.mkdir()
    (sweep / LOCK_FILE).touch()  # the lock its start took, removed as the preview ends
    assert folder_line("Sweep", sweep, preview=True) == not_made
    assert folder_line("Search", sweep, preview=True).endswith("the search would)")
    assert folder_line("Sweep", sweep, preview=False) == f"Sweep folder: {sweep}"
    (sweep / "0").mkdir()  # a sweep typed again: its folder holds its runs
    assert folder_line("Sweep", sweep, preview=True) == f"Sweep folder: {sweep}"


def test_every_sweeper_takes_the_one_preview_setting():
    from hydra_plugins.isotune_launcher.optuna_sweeper import OptunaSweeperConf
    from hydra_plugins.isotune_launcher.study_sweeper import StudySweeperConf

    # Hydra's plugin scan executes the plugin modules again, so a class is known by its name
    preview = (PreviewConf.__module__, PreviewConf.__qualname__)
    for conf in (SummarizingSweeperConf, OptunaSweeperConf, StudySweeperConf):
        bases = {(base.__module__, base.__qualname__) for base in conf.__mro__}
        assert preview in bases and conf().preview is False, conf.__name__
        assert "preview" not in vars(conf).get("__annotations__", {}), conf.__name__


# ---- a preview, as typed ----
def _preview(cwd: Path, *args: str):
    done = run_script("train.py", "-m", *args, PREVIEW, cwd=cwd, timeout=300)
    return done, done.stdout + done.stderr


def _nothing_written(cwd: Path) -> list[Path]:
    """Every file below ``cwd``'s logs/ (the folders the folder lock's parents leave are empty)."""
    return [Path(p, f) for p, _, files in os.walk(cwd / "logs") for f in files]


@pytest.mark.slow
def test_a_plain_multiruns_preview_lists_its_jobs_and_times_one_writing_nothing(
    tmp_path, tiny_bert, glue_dir
):
    tiny = tiny_cli_overrides(tiny_bert, glue_dir, "trainer=cpu", "logger=none")
    sweep = tmp_path / "sweep"
    done, out = _preview(tmp_path, "seed=1,2,3", "task=rte,mrpc", f"hydra.sweep.dir={sweep}", *tiny)
    assert done.returncode == 0, out[-3000:]
    assert (
        "A multirun of 6 jobs (seed=1,2,3; task=rte,mrpc): 0 completed in the folder, 6 to run"
        in out
    )
    assert "  #5 seed=3 task=mrpc\n" in out
    assert "The sweep needs about" in out and "free in" in out  # the disk against the disk free
    assert "Time: about" in out and "job #0 timed here on CPU with" in out
    assert "the epoch-0 isotropy probe" in out and "validation batches" in out
    assert f"Sweep folder: {sweep} (not made: a preview makes none" in out
    assert not sweep.exists() and _nothing_written(tmp_path) == []

    ran = run_script("train.py", "-m", "seed=1,2", f"hydra.sweep.dir={sweep}", *tiny, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    written = {path: path.read_bytes() for path in sweep.rglob("*") if path.is_file()}
    done, out = _preview(tmp_path, "seed=1,2,3", f"hydra.sweep.dir={sweep}", *tiny)
    assert done.returncode == 0, out[-3000:]
    assert "A multirun of 3 jobs (seed=1,2,3): 2 completed in the folder, 1 to run" in out
    assert "  #1 seed=2 (completed)\n  #2 seed=3\n" in out
    assert "measured from the wall times of the 2 runs completed in" in out
    assert f"Sweep folder: {sweep}\n" in out  # made by the sweep before
    assert {path: path.read_bytes() for path in sweep.rglob("*") if path.is_file()} == written


@pytest.mark.slow
def test_a_searchs_preview_counts_its_budget_writing_nothing(tmp_path, tiny_bert, glue_dir):
    done, out = _preview(
        tmp_path, "hparams_search=istar", "hydra.sweeper.n_trials=3", "hydra.sweeper.seeds=[1,2]",
        "hydra.sweeper.report_seeds=[3]", "trainer=cpu", *tiny_cli_overrides(tiny_bert, glue_dir),
    )  # fmt: skip
    assert done.returncode == 0, out[-3000:]
    assert (
        "A search (istar_rte_minilm) of 3 trials on 2 tuning seeds [1, 2], then the winner and "
        "the baseline on 1 report seed [3]: a budget of 8 runs when none is pruned or fails; 0 "
        "completed in the folder, 8 to run."
    ) in out
    assert "searched: reg.weight=tag(log, signed, interval(0.01, 1))" in out
    assert "the baseline's job timed here on CPU" in out and "(not made" in out
    assert not (tmp_path / "logs" / "search" / "istar_rte_minilm").exists()
    assert _nothing_written(tmp_path) == []


@pytest.mark.slow
def test_a_studys_preview_names_each_task_and_arm_and_a_slurm_one_has_no_estimate(
    tmp_path, tiny_bert, glue_dir
):
    done, out = _preview(
        tmp_path, "study=isotropy", "hydra.sweeper.arms=[none,isobn]", "task=rte,mrpc",
        "hydra.sweeper.n_trials=2", "hydra.sweeper.seeds=[1]", "hydra.sweeper.report_seeds=[2,3]",
        "hydra/launcher=slurm", "hydra.launcher.partition=gpu",
        *tiny_cli_overrides(tiny_bert, glue_dir),
    )  # fmt: skip
    assert done.returncode == 0, out[-3000:]
    assert (
        "A study of 4 searches, each 2 trials on 1 tuning seed [1] then its best trial on 2 "
        "report seeds [2, 3]: a budget of 16 runs when none is pruned or fails; 0 completed in "
        "the folder, 16 to run."
    ) in out
    for search in ("rte/none", "rte/isobn", "mrpc/none", "mrpc/isobn"):
        assert f"  {search}: 4 runs, 0 completed\n" in out
    assert "Time: no estimate: the jobs run on SLURM (partition gpu)" in out
    assert _nothing_written(tmp_path) == [] and list((tmp_path / "logs" / "study").iterdir()) == []


@pytest.mark.slow
def test_a_preview_of_refused_settings_shows_the_refusal_not_a_plan(tmp_path, tiny_bert, glue_dir):
    done, out = _preview(
        tmp_path, "hparams_search=istar", "hydra.sweeper.seeds=[1,2]",
        "hydra.sweeper.report_seeds=[2,3]", *tiny_cli_overrides(tiny_bert, glue_dir),
    )  # fmt: skip
    assert done.returncode == 1
    assert out.count("Seeds [2] are both tuning seeds") == 1
    assert "Preview" not in out and "A search" not in out and "Traceback" not in out
    assert _nothing_written(tmp_path) == []
