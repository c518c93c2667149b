"""Every write is whole or absent: a failed write leaves the previous file and no temporary one,
a symlink is never written through, checkpoints are staged beside themselves (never in /tmp), and
a full disk ends a run with one message, recorded failed, with nothing earlier lost."""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile

import pytest
import torch

from isotune.atomic_files import links_leaving, save_figure, write_atomically, write_text
from isotune.record import folder_lock
from isotune.record.checkpoints import RunCheckpointIO
from tests.helpers.cli import run_cli, tiny_cli_overrides
from tests.helpers.disks import FillDiskAtEpoch, small_disk


def test_a_write_replaces_the_file_whole_and_leaves_nothing_else(tmp_path):
    path = write_text(tmp_path / "results.json", "first\n")
    write_text(path, "second\n")
    assert path.read_text() == "second\n"
    assert os.listdir(tmp_path) == ["results.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


def test_a_failed_write_leaves_the_previous_file_whole_and_no_temporary_file(tmp_path):
    path = write_text(tmp_path / "metrics.csv", "step\n0\n")

    def half_then_fail(file):
        file.write(b"step\n0\n1\n")
        raise KeyboardInterrupt  # a kill's exception mid-write

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, half_then_fail)
    assert path.read_text() == "step\n0\n"
    assert os.listdir(tmp_path) == ["metrics.csv"]


def test_a_full_disk_is_an_os_error_naming_the_file_even_through_torch_save(tmp_path):
    def torch_save_on_a_full_disk(file):  # torch.save rewords the write's error
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from None

    with pytest.raises(OSError) as raised:
        write_atomically(tmp_path / "best.ckpt", torch_save_on_a_full_disk)
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(tmp_path / "best.ckpt")
    assert os.listdir(tmp_path) == []


def test_a_figure_saved_again_is_written_again_and_not_kept(tmp_path):
    """A figure redrawn and saved to the same file (an epoch's figure updated) is written each
    time, and saving keeps no reference to it (a figure per epoch must not pile up in memory)."""
    import gc
    import weakref

    from matplotlib.figure import Figure

    figure, path = Figure(figsize=(2, 2)), tmp_path / "figure.png"
    figure.add_subplot().plot([0, 1], [0, 1])
    first = save_figure(figure, path, dpi=40).read_bytes()
    figure.axes[0].plot([0, 1], [1, 0])
    assert save_figure(figure, path, dpi=40).read_bytes() != first
    alive = weakref.ref(figure)
    del figure
    gc.collect()
    assert alive() is None


def test_a_symlink_planted_at_the_destination_is_replaced_not_followed(tmp_path):
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    target.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").symlink_to(target)
    write_text(run / "report.md", "the report\n")
    assert target.read_text() == "keep me\n"
    assert not (run / "report.md").is_symlink()
    assert (run / "report.md").read_text() == "the report\n"


def test_the_links_leading_out_of_a_folder_are_found_and_only_those(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".bashrc").write_text("theirs\n")
    run = tmp_path / "run"
    (run / "wandb" / "run-1").mkdir(parents=True)
    (run / "checkpoints").symlink_to(elsewhere)
    (run / "train.log").symlink_to(elsewhere / ".bashrc")
    (run / "wandb" / "latest-run").symlink_to("run-1")  # as W&B links it: inside the folder
    (run / "wandb" / "run-1" / "gone").symlink_to(tmp_path / "missing")  # dangling, outside
    (tmp_path / "alias").symlink_to(run)  # a run folder reached through a link of the user's
    expected = [
        (run / "checkpoints", elsewhere.resolve()),
        (run / "train.log", (elsewhere / ".bashrc").resolve()),
        (run / "wandb" / "run-1" / "gone", (tmp_path / "missing").resolve()),
    ]
    assert links_leaving(run) == expected
    alias = tmp_path / "alias"
    assert links_leaving(alias) == [(alias / link.relative_to(run), to) for link, to in expected]
    (run / "checkpoints").unlink()
    (run / "train.log").unlink()
    (run / "wandb" / "run-1" / "gone").unlink()
    assert links_leaving(run) == []


def test_checkpoints_are_staged_beside_themselves_never_in_the_temporary_folder(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-tmp"))  # /tmp unusable
    path = tmp_path / "checkpoints" / "last.ckpt"
    RunCheckpointIO().save_checkpoint({"global_step": 5, "w": torch.ones(3)}, path)
    saved = torch.load(path, weights_only=True)
    assert saved["global_step"] == 5 and torch.equal(saved["w"], torch.ones(3))
    assert os.listdir(path.parent) == ["last.ckpt"]


FILL = f"{FillDiskAtEpoch.__module__}.{FillDiskAtEpoch.__name__}"


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_ends_the_run_failed_with_one_message_and_loses_nothing(
    tmp_path, tiny_bert, glue_dir
):
    kept = tmp_path / "kept"  # epoch 1's files as they were before the disk filled
    kept.mkdir()
    fill = f"+callbacks.fill={{_target_:{FILL},epoch:1,keep:{kept}}}"
    with small_disk(tmp_path / "disk") as disk:
        run = disk / "run"
        result = run_cli(*tiny_cli_overrides(tiny_bert, glue_dir), fill, f"hydra.run.dir={run}")
        output = result.stdout + result.stderr
        assert result.returncode == 1, output
        assert "Traceback" not in output
        assert output.count("No space left") == 1, output
        assert f"Cannot write {run / 'checkpoints'}" in output
        record = json.loads((run / "results.json").read_text())
        assert record["status"] == "failed"
        assert "[Errno 28] No space left on device" in record["error"]
        for name in ("last.ckpt", "best.ckpt"):
            assert (run / "checkpoints" / name).read_bytes() == (kept / name).read_bytes()
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
        temporary = [p for p in run.rglob(".*") if p.is_file() and p.name != folder_lock.LOCK_FILE]
        assert temporary == [], temporary
