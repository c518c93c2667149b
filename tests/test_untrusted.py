"""Checkpoints and folders from elsewhere are data: a checkpoint that would run code is refused
on every route before any of it runs, saved settings are never resolved, and a refused start
leaves the folder it was typed in byte-identical (docs/security.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from isotune.analysis.run import literal, run_max_length
from isotune.atomic_files import links_leaving
from isotune.dashboard.tensorboard import tensorboard_logger
from isotune.errors import IsotuneError
from isotune.record.checkpoint_reading import UNSAFE_LOAD_VARIABLE, read_checkpoint
from isotune.record.checkpoints import RunCheckpoint, RunCheckpointIO
from isotune.record.folder_links import check_links_stay_inside
from isotune.record.kept_checkpoint import read_kept_checkpoint
from isotune.training.hydra_callbacks import StartCheckInRunFolder
from isotune.training.run import train
from tests.conftest import compose_config
from tests.helpers.cli import ROOT, run_script, tiny_cli_overrides
from tests.helpers.untrusted import code_running_checkpoint, folder_digest

REFUSED = "Refused to read"
UNSAFE_ENVIRONMENTS = [{}, {UNSAFE_LOAD_VARIABLE: "1"}]  # the variable must change nothing


@pytest.fixture(params=UNSAFE_ENVIRONMENTS, ids=["plain", "force-no-weights-only"])
def environment(request, monkeypatch) -> dict[str, str]:
    for name, value in request.param.items():
        monkeypatch.setenv(name, value)
    return request.param


def test_every_in_process_read_refuses_a_code_running_checkpoint(tmp_path, environment):
    marker = tmp_path / "marker"
    evil = code_running_checkpoint(tmp_path / "evil.ckpt", marker)
    reads = {
        "read_checkpoint": lambda: read_checkpoint(evil),
        "Lightning's load": lambda: RunCheckpointIO().load_checkpoint(evil),
        "analyze.py's load": lambda: read_kept_checkpoint(str(evil), "analyze.py"),
        "predict.py's load": lambda: read_kept_checkpoint(str(evil), "predict.py"),
    }
    for route, read in reads.items():
        with pytest.raises(IsotuneError) as refused:
            read()
        assert str(refused.value).startswith(f"{REFUSED} {evil}: "), route
        assert "it names posix.system" in str(refused.value), route
    assert not marker.exists()
    assert os.environ.get(UNSAFE_LOAD_VARIABLE) == environment.get(UNSAFE_LOAD_VARIABLE)


def test_a_refused_checkpoint_is_recorded_in_a_new_run_folder(train_config, tmp_path, environment):
    marker = tmp_path / "marker"
    evil = code_running_checkpoint(tmp_path / "elsewhere" / "evil.ckpt", marker)
    with pytest.raises(IsotuneError) as refused:
        train(train_config(f"ckpt_path={evil}", output_dir=tmp_path / "run"))
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["status"] == "failed"
    assert record["error"] == f"IsotuneError: {refused.value}"
    assert not marker.exists()


def test_a_checkpoint_without_the_keys_train_py_writes_names_them(tmp_path):
    torch.save({"state_dict": {"weight": torch.zeros(1)}}, tmp_path / "weights.ckpt")
    with pytest.raises(IsotuneError) as refused:
        read_checkpoint(tmp_path / "weights.ckpt")
    assert "it lacks hyper_parameters, global_step, epoch, loops" in str(refused.value)


def test_a_saved_interpolation_stays_a_string_in_the_config(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "secret-key")
    saved = {"name": "${oc.env:WANDB_API_KEY}", "tags": ["a\\${x}", "${oc.env:HOME}"], "n": 3}
    cfg = OmegaConf.create({"model": literal(saved), "logger": {"name": "${model.name}"}})
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["model"] == saved
    assert resolved["logger"]["name"] == "${oc.env:WANDB_API_KEY}"


def test_a_saved_max_length_is_read_as_data(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_LENGTH", "64")
    (tmp_path / ".hydra").mkdir()
    config = tmp_path / ".hydra" / "config.yaml"
    config.write_text(yaml.safe_dump({"data": {"max_length": "${oc.env:SOME_LENGTH}"}}))
    with pytest.raises(IsotuneError, match=r"data.max_length='\$\{oc.env:SOME_LENGTH\}', not a"):
        run_max_length(None, tmp_path / "checkpoints" / "best.ckpt")
    config.write_text(yaml.safe_dump({"data": {"max_length": 64}}))
    assert run_max_length(None, tmp_path / "checkpoints" / "best.ckpt") == 64


def test_a_name_with_slashes_stays_one_tensorboard_folder(tmp_path):
    logger = tensorboard_logger(str(tmp_path), 1, model="../../x", task="rte", norm="none")
    assert logger.log_dir == str(tmp_path / "tensorboard" / ".._.._x-rte-none-seed1")


def one_message(result) -> str:
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output, output[-3000:]
    assert output.count(REFUSED) == 1, output[-3000:]
    return output


@pytest.mark.slow
@pytest.mark.parametrize("environment", UNSAFE_ENVIRONMENTS, ids=["plain", "force-no-weights"])
def test_train_and_analyze_refuse_a_code_running_checkpoint(
    tmp_path, tiny_bert, glue_dir, environment
):
    marker = tmp_path / "marker"
    evil = code_running_checkpoint(tmp_path / "evil.ckpt", marker)
    overrides = tiny_cli_overrides(tiny_bert, glue_dir, f"ckpt_path={evil}")
    trained = run_script(
        "train.py", *overrides, f"hydra.run.dir={tmp_path / 'run'}", env=environment
    )
    one_message(trained)
    assert json.loads((tmp_path / "run" / "results.json").read_text())["status"] == "failed"
    analysed = run_script(
        "analyze.py", f"ckpt_path={evil}", f"hydra.run.dir={tmp_path / 'analysis'}", env=environment
    )
    one_message(analysed)
    assert not marker.exists()


def run_folder_holding(tmp_path, tiny_bert, glue_dir, marker):
    """A run folder as a failed run leaves it, its last.ckpt replaced by a code-running one."""
    folder = tmp_path / "sweep" / "0"
    overrides = tiny_cli_overrides(tiny_bert, glue_dir)
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "results.json").write_text(json.dumps({"status": "failed", "error": "E: x"}))
    (folder / "train.log").write_text("the earlier attempt's log\n")
    code_running_checkpoint(folder / "checkpoints" / "last.ckpt", marker)
    return folder, overrides


def test_the_start_check_refuses_before_hydra_rewrites_a_run_folder(
    tmp_path, tiny_bert, glue_dir, environment, capsys
):
    marker = tmp_path / "marker"
    folder, overrides = run_folder_holding(tmp_path, tiny_bert, glue_dir, marker)
    before = folder_digest(folder)
    cfg = compose_config("train", [*overrides, f"hydra.run.dir={folder}"])
    with pytest.raises(SystemExit) as stopped:
        StartCheckInRunFolder().on_run_start(cfg)
    assert stopped.value.code == 1
    error = capsys.readouterr().err
    assert error.startswith(f"Error: {REFUSED} {folder / 'checkpoints' / 'last.ckpt'}: ")
    assert error.count("\n") == 1
    assert folder_digest(folder) == before and not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("environment", UNSAFE_ENVIRONMENTS, ids=["plain", "force-no-weights"])
def test_a_run_folder_holding_a_code_running_checkpoint_is_left_as_it_was(
    tmp_path, tiny_bert, glue_dir, environment
):
    marker = tmp_path / "marker"
    folder, overrides = run_folder_holding(tmp_path, tiny_bert, glue_dir, marker)
    before = folder_digest(folder)
    started = run_script("train.py", *overrides, f"hydra.run.dir={folder}", env=environment)
    one_message(started)
    assert folder_digest(folder) == before

    sweep = folder.parent
    sweeper = {"_target_": "a.NevergradSweeper"}  # jobs not known in advance: none missing
    hydra = {"sweeper": sweeper, "overrides": {"task": []}}
    hydra |= {"runtime": {"cwd": str(ROOT)}, "job": {"name": "train"}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    rerun = subprocess.run(
        [sys.executable, "-m", "isotune.rerun", str(sweep)],
        env={**os.environ, "HF_HUB_OFFLINE": "1", **environment},
        capture_output=True,
        text=True,
        timeout=300,
    )
    one_message(rerun)
    assert "Reran 1 job, 1 failed again." in rerun.stdout
    assert folder_digest(folder) == before
    assert not marker.exists()


@pytest.mark.slow
def test_a_refused_resume_typed_in_a_run_folder_leaves_its_files_as_they_were(
    tmp_path, tiny_bert, glue_dir
):
    folder = tmp_path / "run"
    overrides = [*tiny_cli_overrides(tiny_bert, glue_dir), f"hydra.run.dir={folder}"]
    first = run_script("train.py", *overrides)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    before = folder_digest(folder)
    refused = run_script("train.py", *overrides, "norm=isobn")
    output = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert output.count("comes from a run configured otherwise") == 1
    assert folder_digest(folder) == before  # .hydra/, train.log, results.json, metrics.csv


def folder_with_links_out(tmp_path):
    """A shared run folder whose ``checkpoints`` and ``train.log`` are links into someone's home."""
    home = tmp_path / "someone"
    home.mkdir()
    (home / ".bashrc").write_text("theirs\n")
    folder = tmp_path / "shared-run"
    folder.mkdir()
    (folder / "checkpoints").symlink_to(home)
    (folder / "train.log").symlink_to(home / ".bashrc")
    return folder, home


def test_a_run_folder_with_links_leading_out_is_refused_before_hydra_writes_there(
    tmp_path, tiny_bert, glue_dir, capsys
):
    folder, home = folder_with_links_out(tmp_path)
    before = folder_digest(home)
    cfg = compose_config(
        "train", [*tiny_cli_overrides(tiny_bert, glue_dir), f"hydra.run.dir={folder}"]
    )
    with pytest.raises(SystemExit) as stopped:
        StartCheckInRunFolder().on_run_start(cfg)
    assert stopped.value.code == 1
    error = capsys.readouterr().err
    assert error.startswith(
        f"Error: The run folder {folder} holds symbolic links that lead out of it: "
        f"{folder / 'checkpoints'} -> {home.resolve()}; {folder / 'train.log'} -> "
    )
    assert error.count("\n") == 1 and "paths.log_dir" in error
    assert folder_digest(home) == before


def test_a_run_continued_in_a_folder_with_links_leading_out_writes_nothing_through_them(
    tmp_path, tiny_bert, glue_dir
):
    folder, home = folder_with_links_out(tmp_path)
    before = folder_digest(home)
    with pytest.raises(IsotuneError, match="lead out of it"):
        train(compose_config("train", tiny_cli_overrides(tiny_bert, glue_dir), folder))
    assert folder_digest(home) == before
    assert json.loads((folder / "results.json").read_text())["status"] == "failed"


def test_the_links_w_and_b_makes_into_its_cache_are_its_own_but_its_folder_is_no_link(tmp_path):
    folder = tmp_path / "run"
    logs = folder / "wandb" / "offline-run-20261201_233738-fnf390o8" / "logs"
    logs.mkdir(parents=True)
    cache = tmp_path / "cache" / "core-debug-20261201_233738.log"  # as W&B 0.2x links it
    cache.parent.mkdir()
    cache.write_text("")
    (logs / "debug-core.log").symlink_to(cache)
    (folder / "wandb" / "latest-run").symlink_to("offline-run-20261201_233738-fnf390o8")
    check_links_stay_inside(folder)
    (tmp_path / "other").mkdir()
    (folder / "wandb").rename(tmp_path / "other" / "wandb")
    (folder / "wandb").symlink_to(tmp_path / "other" / "wandb")
    with pytest.raises(IsotuneError, match=f"{folder / 'wandb'} -> "):
        check_links_stay_inside(folder)


@pytest.mark.slow
def test_a_w_and_b_run_started_again_in_its_folder_continues(tmp_path, tiny_bert, glue_dir):
    folder = tmp_path / "run"
    overrides = [
        *tiny_cli_overrides(tiny_bert, glue_dir),
        "logger=wandb",
        "checkpoint.keep=full",  # its last.ckpt stays, so started again it continues from it
        f"hydra.run.dir={folder}",
    ]
    cache = tmp_path / "cache"  # W&B links each run's core log into its cache, outside the folder
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "XDG_CACHE_HOME": str(cache)}
    first = run_script("train.py", *overrides, env=env)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert [target for _, target in links_leaving(folder) if target.is_relative_to(cache)]
    again = run_script("train.py", *overrides, env=env)
    output = again.stdout + again.stderr
    assert again.returncode == 0 and "lead out of it" not in output, output[-3000:]
    assert "Resuming from" in output


@pytest.mark.slow
def test_train_py_in_a_folder_with_links_leading_out_says_so_and_writes_nothing_through_them(
    tmp_path, tiny_bert, glue_dir
):
    folder, home = folder_with_links_out(tmp_path)
    before = folder_digest(home)
    refused = run_script(
        "train.py", *tiny_cli_overrides(tiny_bert, glue_dir), f"hydra.run.dir={folder}"
    )
    output = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert output.count("lead out of it") == 1, output[-3000:]
    assert folder_digest(home) == before


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "gpus"])
def test_a_sweep_typed_again_refuses_a_job_whose_folder_has_a_link_leading_out_and_says_so(
    launcher, tmp_path, tiny_bert, glue_dir
):
    """Job 1 failed (its seed is not an integer); its train.log is then a link into someone's
    home. Typed again in its folder, the sweep refuses job 1 before Hydra writes there (its
    .hydra/ and train.log as they were, the link's target untouched), records the refusal in its
    results.json and reports it, not the earlier error; jobs 0 and 2 keep their numbers."""
    extra = ["hydra/launcher=gpus", "hydra.launcher.n_jobs=2"] if launcher == "gpus" else []
    sweep_and_tiny = ["-m", "seed=1,abc,3", *extra, *tiny_cli_overrides(tiny_bert, glue_dir)]
    first = run_script("train.py", *sweep_and_tiny, cwd=tmp_path)
    assert first.returncode == 1, (first.stdout + first.stderr)[-3000:]
    (sweep,) = (tmp_path / "logs" / "multirun").iterdir()
    job = sweep / "1"
    earlier = json.loads((job / "results.json").read_text())
    assert "seed='abc'" in earlier["error"]
    home = tmp_path / "someone"
    home.mkdir()
    (home / ".bashrc").write_text("theirs\n")
    (job / "train.log").unlink()
    (job / "train.log").symlink_to(home / ".bashrc")
    before, theirs = folder_digest(job), folder_digest(home)

    again = run_script("train.py", *sweep_and_tiny, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    output = again.stdout + again.stderr
    assert again.returncode == 1 and "Traceback" not in output, output[-3000:]
    refusal = f"IsotuneError: The run folder {job} holds symbolic links that lead out of it"
    assert f"Sweep {sweep}: 2 of 3 jobs completed, 1 did not:\n  #1 failed: {refusal}" in output
    assert "seed='abc'" not in output and "leave hydra.sweep.dir unset" in output
    record = json.loads((job / "results.json").read_text())
    assert record["status"] == "failed" and record["error"].startswith(refusal)
    assert [attempt["status"] for attempt in record["attempts"]] == ["failed", "failed"]
    after = folder_digest(job)
    assert after.pop("results.json") != before.pop("results.json")
    assert after == before and folder_digest(home) == theirs  # .hydra/*.yaml, train.log
    for number, seed in (("0", 1), ("2", 3)):
        other = json.loads((sweep / number / "results.json").read_text())
        assert (other["status"], other["seed"]) == ("completed", seed)


def test_a_best_file_a_checkpoint_names_is_copied_only_if_it_is_a_checkpoint(tmp_path):
    """Continuing from another folder's checkpoint copies the best file it names into the new
    folder; a path read from a checkpoint is data, so a file that is not a train.py checkpoint
    (a private key, say) is never copied."""
    secret = tmp_path / "elsewhere" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("PRIVATE KEY")
    callback = RunCheckpoint(dirpath=tmp_path / "run" / "checkpoints", filename="best")
    earlier = {"dirpath": str(secret.parent), "best_model_path": str(secret)}
    callback.load_state_dict({**earlier, "best_model_score": torch.tensor(0.9)})
    assert not (tmp_path / "run" / "checkpoints" / "id_rsa").exists()
    assert callback.best_model_path == ""  # this run's best epoch starts afresh
