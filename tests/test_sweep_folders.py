"""A sweep typed again in its folder, grown by a seed or a task, runs each job in the folder that
holds its configuration and only what is new (issue 70 item 2): Hydra's numbering by place would
start its jobs in other configurations' folders, be refused there, and end "completed"."""

from __future__ import annotations

import json

import pytest
import yaml

from isotune.sweeps.aggregate import aggregate
from isotune.sweeps.job_folders import job_folders
from isotune.sweeps.summary import summarize_sweep
from tests.helpers.cli import run_script, tiny_cli_overrides
from tests.helpers.fake_runs import completed, ended_early, write_multirun, write_run
from tests.helpers.untrusted import folder_digest

GRID = [(task, seed) for task in ("rte", "mrpc") for seed in (1, 2, 3)]  # job order, seed=1,2,3


def _overrides(task: str, seed: int) -> list[str]:
    return [f"task={task}", f"seed={seed}"]


def _sweep_of_seeds_1_and_2(sweep):
    """The folders a sweep ``task=rte,mrpc seed=1,2`` left: jobs 0-3 in folders 0-3, job 3
    (mrpc seed 2) cut before it wrote results.json."""
    for number, (task, seed) in enumerate([(t, s) for t in ("rte", "mrpc") for s in (1, 2)]):
        result = completed("minilm", "none", task, seed, 0.6)
        write_run(sweep / str(number), _overrides(task, seed), result)
    (sweep / "3" / "results.json").unlink()


def test_a_grown_sweeps_jobs_go_to_the_folders_of_their_configurations(tmp_path):
    assert job_folders(tmp_path / "new", [["seed=1"], ["seed=2"]]) == ["0", "1"]
    sweep = tmp_path / "sweep"
    _sweep_of_seeds_1_and_2(sweep)
    (sweep / "multirun.yaml").write_text("{}")  # the sweep's own files are no job's
    folders = job_folders(sweep, [list(reversed(_overrides(*job))) for job in GRID])
    # rte 1, 2 as they were; rte 3 in the first free number; mrpc 2 continues in its folder 3
    assert folders == ["0", "1", "4", "2", "3", "5"]
    # Typed again with a setting that changes no result: the same computations, the same folders.
    again = job_folders(sweep, [[*_overrides(*job), "data.num_workers=2"] for job in GRID])
    assert again == folders


def test_a_folder_whose_hydra_record_was_rewritten_is_its_results_json_configuration(tmp_path):
    """The folders an older sweep grown in place left: job 1's place went to rte seed 3, whose
    refused start rewrote folder 1's .hydra/overrides.yaml; results.json still says seed 2."""
    sweep = tmp_path / "sweep"
    _sweep_of_seeds_1_and_2(sweep)
    (sweep / "1" / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(_overrides("rte", 3)))
    failed_again = ended_early("minilm", "none", "mrpc", 2)
    write_run(sweep / "5", _overrides("mrpc", 2), failed_again)  # the same job, failed elsewhere
    assert job_folders(sweep, [_overrides(*job) for job in GRID])[:3] == ["0", "1", "4"]
    # Two folders of one configuration: the one that completed first, else the lower number.
    write_run(sweep / "6", _overrides("rte", 3), completed("minilm", "none", "rte", 3, 0.7))
    assert job_folders(sweep, [_overrides("rte", 3), _overrides("mrpc", 2)]) == ["6", "3"]
    # A value typed twice: two jobs, two folders.
    assert job_folders(sweep, [_overrides("rte", 1)] * 2) == ["0", "4"]


def test_the_aggregate_reads_results_json_overrides_where_hydras_record_disagrees(tmp_path):
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["task=rte,mrpc", "seed=1,2"])
    for number, (task, seed) in enumerate([(t, s) for t in ("rte", "mrpc") for s in (1, 2)]):
        write_run(
            sweep / str(number), _overrides(task, seed), completed("m", "none", task, seed, 0.6)
        )
    write_multirun(sweep, ["task=rte,mrpc", "seed=1,2,3"])  # grown: jobs 0-5
    for number in (1, 2, 3):  # started by place as jobs 1-3 and refused, .hydra/ rewritten
        hydra = sweep / str(number) / ".hydra" / "overrides.yaml"
        hydra.write_text(yaml.safe_dump(_overrides(*GRID[number])))
    result = aggregate([sweep])
    assert [job.overrides for job in result.missing] == [
        ("task=rte", "seed=3"),
        ("task=mrpc", "seed=3"),
    ]
    assert sorted((run.result["task"], run.result["seed"]) for run in result.runs) == sorted(
        [("rte", 1), ("rte", 2), ("mrpc", 1), ("mrpc", 2)]
    )


def test_the_summary_counts_and_names_the_refused_jobs(tmp_path):
    write_multirun(tmp_path, ["seed=1,2,3"])
    write_run(tmp_path / "0", ["seed=1"], completed("minilm", "none", "rte", 1, 0.6))
    write_run(tmp_path / "1", ["seed=2"], completed("minilm", "none", "rte", 2, 0.6))
    summary = summarize_sweep(tmp_path, {("seed=3",): "Its folder holds another run."})
    assert not summary.all_completed
    assert (
        f"Sweep {tmp_path}: 2 of 3 jobs completed, 1 refused:\n"
        "  #2 refused: seed=3: Its folder holds another run.\n"
    ) in summary.text


@pytest.mark.slow
def test_a_job_whose_folder_holds_another_configuration_is_refused_before_hydra_writes_there(
    tmp_path, tiny_bert, glue_dir
):
    """With a hydra.sweep.subdir that puts every job in one folder, which holds the run of
    seed 1: seed 2 would start over it, seed 3 where seed 2 goes; neither starts, the folder is
    as it was, the sweep ends naming both and exits 1."""
    sweep = tmp_path / "sweep"
    write_run(sweep / "one", ["seed=1"], completed("minilm", "none", "rte", 1, 0.6))
    before = folder_digest(sweep / "one")
    tiny = tiny_cli_overrides(tiny_bert, glue_dir, "trainer.max_epochs=1", "logger=none")
    command = ["-m", "seed=2,3", *tiny, f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=one"]
    done = run_script("train.py", *command, cwd=tmp_path, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert f"Sweep {sweep}: 0 of 2 jobs completed, 2 refused:\n  #0 refused: seed=2" in output
    assert f"Its folder {sweep / 'one'} holds the run of another configuration (seed=1)" in output
    assert f"Its folder {sweep / 'one'} is also job #0's" in output
    assert folder_digest(sweep / "one") == before


@pytest.mark.slow  # four tiny trainings, then two more
def test_a_sweep_grown_in_its_folder_runs_only_its_new_jobs(tmp_path, tiny_bert, glue_dir):
    sweep = tmp_path / "sweep"
    tiny = tiny_cli_overrides(tiny_bert, glue_dir, "trainer.max_epochs=1", "logger=none")
    typed = ["-m", "task=rte,mrpc", *tiny, f"hydra.sweep.dir={sweep}"]
    first = run_script("train.py", *typed, "seed=1", cwd=tmp_path)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    ran = {job: folder_digest(sweep / job) for job in "01"}

    preview = run_script("train.py", *typed, "seed=1,2", "hydra.sweeper.preview=true", cwd=tmp_path)
    said = preview.stdout + preview.stderr
    assert preview.returncode == 0, said[-3000:]
    assert "2 completed in the folder, 2 to run" in said
    assert (
        "  #0 task=rte seed=1 (completed)\n  #2 task=rte seed=2\n"
        "  #1 task=mrpc seed=1 (completed)\n  #3 task=mrpc seed=2\n"
    ) in said

    grown = run_script("train.py", *typed, "seed=1,2", cwd=tmp_path)
    output = grown.stdout + grown.stderr
    assert grown.returncode == 0, output[-3000:]
    assert f"Sweep {sweep}: 4 of 4 jobs completed." in output and "refused" not in output
    assert {job: folder_digest(sweep / job) for job in "01"} == ran  # not started again
    records = {job: json.loads((sweep / job / "results.json").read_text()) for job in "0123"}
    assert {job: (r["task"], r["seed"], r["status"]) for job, r in records.items()} == {
        "0": ("rte", 1, "completed"),
        "1": ("mrpc", 1, "completed"),
        "2": ("rte", 2, "completed"),
        "3": ("mrpc", 2, "completed"),
    }
    hydra = yaml.safe_load((sweep / "3" / ".hydra" / "overrides.yaml").read_text())
    assert {"task=mrpc", "seed=2"} <= set(hydra)
