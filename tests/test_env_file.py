"""train.py and analyze.py read the ``.env`` of the folder they run in and no other: a ``.env``
in a parent folder (where another user could leave one setting TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD,
WANDB_BASE_URL or HF_ENDPOINT) is never read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from isotune.training.cli import ENV_FILE, load_env_file
from tests.helpers.cli import ROOT

VARIABLE = "ISOTUNE_TEST_ENV_FILE"


@pytest.fixture
def nested(tmp_path) -> Path:
    """``<tmp>/parent/child``, the parent holding a ``.env``; the child is where commands run."""
    child = tmp_path / "parent" / "child"
    child.mkdir(parents=True)
    (child.parent / ENV_FILE).write_text(f"{VARIABLE}=parent\nGLUE_DIR=/parent/glue\n")
    return child


def test_only_the_current_folders_env_file_is_read(nested, monkeypatch):
    monkeypatch.setenv(VARIABLE, "unset")
    monkeypatch.delenv(VARIABLE)  # so that the test's end removes what the file sets
    monkeypatch.chdir(nested)
    load_env_file()
    assert VARIABLE not in os.environ

    (nested / ENV_FILE).write_text(f"{VARIABLE}=child\n")
    load_env_file()
    assert os.environ[VARIABLE] == "child"


def test_the_environment_wins_over_the_env_file(nested, monkeypatch):
    (nested / ENV_FILE).write_text(f"{VARIABLE}=child\n")
    monkeypatch.setenv(VARIABLE, "typed")
    monkeypatch.chdir(nested)
    load_env_file()
    assert os.environ[VARIABLE] == "typed"


def glue_dir_seen(script: str, cwd: Path) -> str:
    """``paths.glue_dir`` as ``script`` composes it from ``cwd``, GLUE_DIR unset."""
    env = {name: value for name, value in os.environ.items() if name != "GLUE_DIR"}
    result = subprocess.run(
        [sys.executable, str(ROOT / script), "--cfg", "job", "--package", "paths", "--resolve"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("glue_dir:")]
    return line.removeprefix("glue_dir:").strip()


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train.py", "analyze.py"])
def test_the_entry_points_read_the_env_file_of_the_folder_they_run_in(nested, script):
    assert glue_dir_seen(script, nested) == "null"  # not the parent's
    (nested / ENV_FILE).write_text("GLUE_DIR=/child/glue\n")
    assert glue_dir_seen(script, nested) == "/child/glue"
