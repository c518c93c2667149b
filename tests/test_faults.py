"""Every fault docs/faults.md lists, typed as a user types it: one message that names
the problem and the fix, exit status 1, no traceback, in a single run and inside sweeps (each
job ends failed with its message, the other jobs go on, and the sweep ends with a summary)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from isotune.training.config_checks import SEED_RANGE
from tests.helpers.cli import run_script, sweep_with_a_bad_job, tiny_cli_overrides
from tests.helpers.encoders import save_tiny_bart

pytestmark = pytest.mark.slow  # each case is a real `python train.py` (imports take seconds)


def edited_glue_dir(glue_dir: Path, into: Path, task: str, old: bytes, new: bytes) -> Path:
    """A copy of the fixture data whose ``<task>/train.tsv`` has its first ``old`` as ``new``."""
    copy = into / "glue"
    shutil.copytree(glue_dir, copy)
    train = copy / task / "train.tsv"
    assert old in train.read_bytes()
    train.write_bytes(train.read_bytes().replace(old, new, 1))
    return copy


def one_message(output: str, message: str) -> None:
    assert "Traceback" not in output, output[-3000:]
    assert output.count(message) == 1, output[-3000:]


# (overrides, the message) of single runs; "{tiny}" stands for the tiny model and data
SINGLE_RUN_FAULTS = {
    "unknown task": (["task=nope"], "Could not find 'task/nope'"),
    "unknown model option": (["model=nope"], "Could not find 'model/nope'"),
    "model not available offline": (
        ["model=bert", "{data}"],
        "Model 'bert-base-cased' is not available",
    ),
    "model folder that does not exist": (
        ["model.name_or_path=/no/such/model", "{data}"],
        "the folder /no/such/model does not exist",
    ),
    "max_length too short": (["{tiny}", "data.max_length=2"], "data.max_length=2 is too short"),
    "config values out of range": (
        ["{tiny}", "optim.lr=-1", "seed=abc"],
        "seed='abc': must be an integer from 0 to 2**32 - 1 = 4294967295 (the seeds numpy takes)"
        "\n  optim.lr=-1: must be a finite number > 0",
    ),
    "seeds out of range": (
        ["{tiny}", "seed_init=4294967296", "seed_data=-3"],
        "seed_init=4294967296: must be an integer from 0 to 2**32 - 1 = 4294967295 (the seeds "
        "numpy takes) (default: seed)\n  seed_data=-3: must be an integer from 0",
    ),
    "a margin in points": (
        ["{tiny}", "failure.margin=2.0"],
        "failure.margin=2.0: must be a number in [0, 1), in the metric's units (0.01 is one "
        "point; no score beats the trivial one by 1 or more, so every run would read FAILED TO "
        "LEARN); 2 looks like points: failure.margin=0.02",
    ),
    "a norm that cannot learn": (
        ["{tiny}", "norm=isobn", "data.batch_size=1"],
        "data.batch_size=1: must be >= 2 with norm=isobn",
    ),
    "trainer=gpu without a GPU": (["{tiny}", "trainer=gpu"], "needs a CUDA GPU, but torch sees"),
    "unwritable output folder": (
        ["{tiny}", "paths.log_dir=/proc/no-such-folder"],
        "Cannot write the run's folder /proc/no-such-folder/runs/",
    ),
    "a checkpoint that is not one": (
        ["{tiny}", "ckpt_path={tmp}/results.json"],
        "is not a complete PyTorch checkpoint file (a job killed while saving leaves a truncated "
        "one; a results.json or a log is not one). Fix: point ckpt_path at checkpoints/last.ckpt "
        "(or best.ckpt) of a run folder written by train.py, or leave ckpt_path unset",
    ),
}


@pytest.mark.parametrize("fault", SINGLE_RUN_FAULTS)
def test_a_single_run_fault_is_one_message(fault, tiny_bert, glue_dir, tmp_path):
    overrides, message = SINGLE_RUN_FAULTS[fault]
    (tmp_path / "results.json").write_text("{}")
    expanded = []
    for override in overrides:
        if override == "{tiny}":
            expanded += tiny_cli_overrides(tiny_bert, glue_dir)
        elif override == "{data}":
            expanded += [f"paths.glue_dir={glue_dir}", "debug=limit"]
        else:
            expanded.append(override.replace("{tmp}", str(tmp_path)))
    result = run_script("train.py", *expanded, cwd=tmp_path)
    assert result.returncode == 1
    one_message(result.stdout + result.stderr, message)


@pytest.mark.parametrize(
    ("task", "old", "new", "message"),
    [
        ("RTE", b"\tentailment\n", b"\tmaybe\n", "line 2: label 'maybe' is not a label"),
        ("RTE", b"cat", b"caf\xe9", "is not UTF-8 text"),
        ("STS-B", b"\t4.500\n", b"\t7.5\n", "line 2: score 7.5 is outside [0, 5]"),
        ("STS-B", b"\t4.500\n", b"\tnan\n", "line 2: score nan is not a finite number"),
    ],
    ids=["unknown label", "not UTF-8", "score out of range", "score not finite"],
)
def test_bad_data_is_one_message_naming_file_and_line(
    task, old, new, message, tiny_bert, glue_dir, tmp_path
):
    data = edited_glue_dir(glue_dir, tmp_path, task, old, new)
    overrides = [
        *tiny_cli_overrides(tiny_bert, data),
        f"task={'stsb' if task == 'STS-B' else 'rte'}",
    ]
    result = run_script("train.py", *overrides, cwd=tmp_path)
    assert result.returncode == 1
    one_message(result.stdout + result.stderr, message)
    assert str(data / task / "train.tsv") in result.stdout + result.stderr


def test_an_encoder_decoder_whose_encoder_cannot_load_alone_is_one_message(glue_dir, tmp_path):
    bart = save_tiny_bart(tmp_path / "tiny-bart")
    overrides = [f"model.name_or_path={bart}", f"paths.glue_dir={glue_dir}", "debug=limit"]
    result = run_script("train.py", *overrides, cwd=tmp_path)
    assert result.returncode == 1
    one_message(
        result.stdout + result.stderr,
        f"model.name_or_path={bart} is an encoder-decoder model ('bart') whose encoder "
        "transformers cannot load alone",
    )


def test_a_weights_file_cut_short_is_one_message(tiny_bert, glue_dir, tmp_path):
    folder = Path(shutil.copytree(tiny_bert, tmp_path / "model"))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # as an interrupted download leaves it
    result = run_script("train.py", *tiny_cli_overrides(folder, glue_dir), cwd=tmp_path)
    assert result.returncode == 1
    one_message(
        result.stdout + result.stderr,
        f"The model folder {folder} has a cut short or damaged weights file, model.safetensors",
    )


def test_analyze_without_a_checkpoint_is_one_message_and_leaves_no_folder(tmp_path):
    result = run_script("analyze.py", cwd=tmp_path)
    assert result.returncode == 1
    one_message(result.stderr, "ckpt_path is not set. Fix: python analyze.py ckpt_path=")
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("launcher", ["basic", "gpus"])
def test_a_failed_job_in_a_sweep_fails_alone_and_the_sweep_ends_with_a_summary(
    launcher, tiny_bert, glue_dir, tmp_path
):
    extra = ["hydra/launcher=gpus", "hydra.launcher.n_jobs=2"] if launcher == "gpus" else []
    result, output, sweep = sweep_with_a_bad_job(tiny_bert, glue_dir, tmp_path, *extra)
    assert result.returncode == 1
    one_message(output, f"seed='abc': must be {SEED_RANGE}\n")  # the job's own message, once
    assert output.count(f"Sweep folder: {sweep}") == 1  # as it starts
    assert f"Sweep {sweep}: 1 of 2 jobs completed, 1 did not:\n  #1 failed: IsotuneError" in output
    assert f"Rerun them with: python -m isotune.rerun {sweep}" in output
    records = [json.loads((sweep / job / "results.json").read_text()) for job in ("0", "1")]
    assert [record["status"] for record in records] == ["completed", "failed"]


def test_launcher_settings_out_of_range_are_one_message(tmp_path):
    result = run_script(
        "train.py", "-m", "hydra/launcher=gpus", "hydra.launcher.n_jobs=0", cwd=tmp_path
    )
    assert result.returncode == 1
    one_message(result.stdout + result.stderr, "hydra.launcher.n_jobs=0, but both count jobs")


def test_a_preset_sweep_that_cannot_run_here_is_one_message_per_job_and_a_summary(tmp_path):
    result = run_script("train.py", "experiment=isobn_glue", cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert "Traceback" not in output, output[-3000:]
    assert output.count("[isotune][ERROR] - Invalid config values") == 70  # each job, once
    assert output.count("trainer.accelerator='gpu': needs a CUDA GPU") == 70 + 70  # and summary
    assert ": 0 of 70 jobs completed, 70 did not:" in output
