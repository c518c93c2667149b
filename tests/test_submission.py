"""python -m isotune.submission: each task's run chosen by the stated rule in a sweep or a study,
its test predictions in GLUE's files and a zip of them, the tasks it lacks named; a study's runs
that kept no model named with the command that trains exactly that run again."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256
from isotune.prediction.submission import ZIP_FILE, choose_runs, report_text, write_submission
from isotune.prediction.writer import SIDECAR_SUFFIX
from tests.conftest import ROOT
from tests.helpers.fake_runs import completed, write_multirun, write_run
from tests.helpers.prediction import tiny_checkpoint

STUDY = ROOT / "docs" / "results" / "isotropy_results_minilm"  # the project's study: keep=none


def sweep_with_models(folder: Path, tiny_bert: Path) -> Path:
    """A sweep of RTE and MRPC, norm none and isobn, seeds 1 and 2, each run with a kept model:
    on RTE isobn's median (0.655) beats none's (0.65) though none has the best run (0.70)."""
    write_multirun(folder, ["task=rte,mrpc", "norm=none,isobn", "seed=1,2"])
    scores = {
        ("rte", "none"): (0.60, 0.70),
        ("rte", "isobn"): (0.66, 0.65),
        ("mrpc", "none"): (0.80, 0.81),
        ("mrpc", "isobn"): (0.70, 0.71),
    }
    number = 0
    for (task, norm), by_seed in scores.items():
        for seed, score in zip((1, 2), by_seed, strict=True):
            job = folder / str(number)
            checkpoint = tiny_checkpoint(task, job, tiny_bert)
            result = {
                **completed("bert", norm, task, seed, score),
                "best_checkpoint": str(checkpoint),
            }
            write_run(job, [f"task={task}", f"norm={norm}", f"seed={seed}"], result)
            number += 1
    return folder


def test_a_sweeps_submission_predicts_each_tasks_chosen_run_zips_and_records_every_task(
    tmp_path, tiny_bert, glue_dir
):
    sweep = sweep_with_models(tmp_path / "sweep", tiny_bert)
    out = tmp_path / "submission"
    record = write_submission(sweep, out, str(glue_dir), accelerator="cpu")

    chosen = {c["task"]: c for c in record["chosen"]}
    assert (chosen["rte"]["configuration"], chosen["rte"]["seed"]) == ("norm=isobn", 1)
    assert (chosen["mrpc"]["configuration"], chosen["mrpc"]["seed"]) == ("norm=none", 2)
    assert "best median dev score over its seeds" in record["rule"]
    assert record["files"] == ["MRPC", "RTE"]
    assert record["lacking"] == [
        "CoLA", "SST-2", "STS-B", "QQP", "MNLI-m", "MNLI-mm", "QNLI", "WNLI", "AX"
    ]  # fmt: skip
    with zipfile.ZipFile(out / ZIP_FILE) as archive:
        assert sorted(archive.namelist()) == ["MRPC.tsv", "RTE.tsv"]  # no sidecar for the server
        assert archive.read("RTE.tsv") == (out / "RTE.tsv").read_bytes()
    sidecar = json.loads((out / f"RTE.tsv{SIDECAR_SUFFIX}").read_text())
    assert sidecar["run"] == str((sweep / "2").resolve())
    assert sidecar["checkpoint_sha256"] == file_sha256(sweep / "2" / "checkpoints" / "best.ckpt")
    predicted = json.loads((out / "predictions.json").read_text())  # each task's, none lost
    assert sorted(predicted) == ["mrpc", "rte"]
    assert predicted["rte"]["files"] == {"RTE.tsv": 10}
    assert predicted["mrpc"]["files"] == {"MRPC.tsv": 10}
    assert predicted["rte"]["source"]["run"] == str((sweep / "2").resolve())
    text = report_text(record)
    assert (
        "Lacking (no run predicted them; GLUE's server wants all 11 files in a submission): "
        "CoLA, SST-2" in text
    )
    assert "seed 1" in text and "debug" not in text


def test_a_studys_runs_that_kept_no_model_are_named_with_the_command_that_trains_each_again(
    tmp_path, glue_dir
):
    study = tmp_path / "study"
    shutil.copytree(STUDY, study)
    out = tmp_path / "submission"
    with pytest.raises(IsotuneError) as refused:
        write_submission(study, out, str(glue_dir))
    message = str(refused.value)
    assert "kept no model" in message
    for task, seed in (("rte", 102), ("mrpc", 103)):  # the baseline arm's best held-out seeds
        line = next(line for line in message.splitlines() if line.strip().startswith(f"{task}:"))
        assert f"task={task} norm=none reg=none" in line and f"seed={seed}" in line
        assert line.endswith("checkpoint.keep=slim hydra.mode=RUN resume=never")
    assert not out.exists()  # nothing written
    choices, rule = choose_runs(study, arm="cosreg")
    assert "study arm cosreg" in rule
    assert {c.task: c.result["seed"] for c in choices} == {"rte": 102, "mrpc": 103}


def test_a_studys_chosen_run_with_a_kept_model_is_predicted_and_the_others_named(
    tmp_path, tiny_bert, glue_dir
):
    study = tmp_path / "study"
    shutil.copytree(STUDY, study)
    job = study / "rte" / "none" / "report" / "trial-000" / "seed-102"
    result = json.loads((job / "results.json").read_text())
    result["best_checkpoint"] = str(tiny_checkpoint("rte", job, tiny_bert))
    (job / "results.json").write_text(json.dumps(result))
    record = write_submission(study, tmp_path / "out", str(glue_dir), accelerator="cpu")
    assert [c["task"] for c in record["chosen"]] == ["rte"] and record["files"] == ["RTE"]
    assert [c["task"] for c in record["kept_no_model"]] == ["mrpc"]
    assert "seed=103" in record["kept_no_model"][0]["train_again"]
    assert "kept no model" in report_text(record)


def test_a_task_of_your_own_data_is_skipped_with_a_line_saying_why(tmp_path, tiny_bert, glue_dir):
    """A sweep over RTE and a task=files task: RTE is submitted, the own task skipped (its run
    kept no model: it is not named with a command to train it again either)."""
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["task=rte,files", "seed=1"])
    rte = completed("bert", "none", "rte", 1, 0.6)
    rte["best_checkpoint"] = str(tiny_checkpoint("rte", sweep / "0", tiny_bert))
    write_run(sweep / "0", ["task=rte", "seed=1"], rte)
    write_run(sweep / "1", ["task=files", "seed=1"], completed("bert", "none", "files", 1, 0.9))
    record = write_submission(sweep, tmp_path / "out", str(glue_dir), accelerator="cpu")
    assert [c["task"] for c in record["chosen"]] == ["rte"] and record["files"] == ["RTE"]
    assert record["kept_no_model"] == [] and [c["task"] for c in record["skipped"]] == ["files"]
    assert (
        "  files: skipped, task files is your own data (task=files), which GLUE's server does "
        "not score" in report_text(record)
    )
    # Only your own data's runs: refused in one message, nothing written.
    own = tmp_path / "own"
    write_multirun(own, ["task=files", "seed=1"])
    write_run(own / "0", ["task=files", "seed=1"], completed("bert", "none", "files", 1, 0.9))
    with pytest.raises(IsotuneError) as raised:
        write_submission(own, tmp_path / "out2", str(glue_dir))
    assert "holds no GLUE task to submit: task files is your own" in str(raised.value)
    assert "predict.py ckpt_path=<run>/checkpoints/best.ckpt test_file=<file>" in str(raised.value)
    assert not (tmp_path / "out2").exists()


def test_a_folder_that_holds_no_run_and_an_arm_outside_a_study_are_refused(tmp_path, glue_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(IsotuneError, match=r"holds no run .*Fix: pass the folder of a sweep"):
        write_submission(tmp_path / "empty", tmp_path / "out", str(glue_dir))
    write_run(tmp_path / "runs" / "0", ["task=rte"], completed("bert", "none", "rte", 1, 0.6))
    with pytest.raises(IsotuneError, match=r"--arm isobn chooses an arm of a study.*Fix: drop"):
        choose_runs(tmp_path / "runs", arm="isobn")
    with pytest.raises(IsotuneError, match=r"no arm 'istar'.*none"):
        choose_runs(STUDY, arm="istar")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_command_prints_the_rule_and_writes_into_logs_submission(tmp_path, tiny_bert, glue_dir):
    sweep = sweep_with_models(tmp_path / "sweep", tiny_bert)
    result = subprocess.run(
        [sys.executable, "-m", "isotune.submission", str(sweep), "--glue-dir", str(glue_dir)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Each task's run: the configuration with the best median")
    (folder,) = (tmp_path / "logs" / "submission").iterdir()
    assert (folder / ZIP_FILE).is_file() and (folder / "RTE.tsv").is_file()


def test_a_submission_of_debug_runs_says_they_are_not_results(tmp_path, tiny_bert, glue_dir):
    """A run of debug=limit scored 8 of dev's 24 examples after a few batches: its submission
    is made (a check of the pipeline), under a line saying it is no result."""
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["task=rte", "debug=limit"])
    result = completed("bert", "none", "rte", 1, 0.6)
    result["best_checkpoint"] = str(tiny_checkpoint("rte", sweep / "0", tiny_bert))
    result["dev_examples"] = {"scored": 8, "of": 24}
    write_run(sweep / "0", ["task=rte", "debug=limit"], result)
    record = write_submission(sweep, tmp_path / "out", str(glue_dir), accelerator="cpu")
    line = "This run is a debug run (debug=limit: 8 of 24 dev examples scored): not results."
    assert record["debug"] == line
    assert report_text(record).splitlines()[1] == line
