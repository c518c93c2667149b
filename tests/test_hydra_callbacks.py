"""The checks Hydra runs before it makes a folder, in-process (the CLI tests type them through
train.py and analyze.py, in the slow tier): a folder that cannot be written and a missing required
key stop with one message and exit status 1, and leave nothing behind."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from isotune.training.hydra_callbacks import (
    OutputFolderCheck,
    PreviewOfASweep,
    RequiredBeforeStart,
)


def config(run_dir, sweep_dir=None, **values):
    return OmegaConf.create(
        {
            "hydra": {"run": {"dir": str(run_dir)}, "sweep": {"dir": str(sweep_dir or run_dir)}},
            "paths": {"log_dir": str(run_dir)},
            **values,
        }
    )


def test_a_writable_folder_passes_and_nothing_is_left_behind(tmp_path):
    folder = tmp_path / "logs" / "runs" / "today"
    OutputFolderCheck().on_run_start(config(folder))
    OutputFolderCheck().on_multirun_start(config(folder, tmp_path / "logs" / "multirun" / "x"))
    assert list(tmp_path.iterdir()) == []  # Hydra makes the folder itself, a moment later


def test_a_path_through_a_file_is_one_message_with_the_fix(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(SystemExit) as stopped:
        OutputFolderCheck().on_run_start(config(blocker / "run"))
    assert stopped.value.code == 1
    error = capsys.readouterr().err
    assert f"Cannot write the run's folder {blocker / 'run'}" in error
    assert "Fix: run from a folder you can write, or set paths.log_dir" in error
    assert blocker.read_text() == "not a folder"


def test_a_missing_required_key_stops_before_any_folder(tmp_path, capsys):
    check = RequiredBeforeStart("ckpt_path", "python analyze.py ckpt_path=<checkpoint>")
    with pytest.raises(SystemExit) as stopped:
        check.on_multirun_start(config(tmp_path / "run", ckpt_path=None))
    assert stopped.value.code == 1
    assert capsys.readouterr().err.strip() == (
        "Error: ckpt_path is not set. Fix: python analyze.py ckpt_path=<checkpoint>"
    )
    check.on_run_start(config(tmp_path / "run", ckpt_path="best.ckpt"))  # set: passes


def test_a_preview_of_a_single_run_is_refused_before_it_trains(tmp_path, capsys):
    preview = {"hydra": {"sweeper": {"preview": True}, "run": {"dir": str(tmp_path / "run")}}}
    with pytest.raises(SystemExit) as stopped:
        PreviewOfASweep().on_run_start(OmegaConf.create(preview))
    assert stopped.value.code == 1
    assert "Fix: add -m to preview its one job" in capsys.readouterr().err
    PreviewOfASweep().on_run_start(config(tmp_path / "run"))  # no preview: passes
    assert list(tmp_path.iterdir()) == []
