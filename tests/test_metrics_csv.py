"""metrics.csv costs the same to save at any length (its rows are appended, the file is not
rewritten), keeps every earlier row through a new column, a full disk and a kill mid-row, and
never writes through a symlink."""

from __future__ import annotations

import csv
import errno
import os

import pytest

from isotune.atomic_files import append_bytes
from isotune.record.csv_logging import RunCSVLogger
from tests.helpers.disks import small_disk


def rows(folder) -> list[dict[str, str]]:
    with (folder / "csv" / "metrics.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def logger_in(folder) -> RunCSVLogger:
    return RunCSVLogger(save_dir=str(folder), name="csv", version="")


def test_saves_append_rows_without_rewriting_the_file(tmp_path):
    logger = logger_in(tmp_path)
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.save()
    path = tmp_path / "csv" / "metrics.csv"
    inode = path.stat().st_ino  # an atomic rewrite replaces the file (a new inode)
    for step in range(1, 5):
        logger.log_metrics({"train/loss": 1.0 / (step + 1)}, step=step)
        logger.save()
    assert path.stat().st_ino == inode
    assert [row["step"] for row in rows(tmp_path)] == ["0", "1", "2", "3", "4"]


def test_a_new_column_rewrites_the_file_whole_with_every_earlier_row(tmp_path):
    logger = logger_in(tmp_path)
    logger.log_metrics({"train/loss": 0.5}, step=0)
    logger.save()
    logger.log_metrics({"val/accuracy": 0.75, "epoch": 0}, step=1)
    logger.save()
    logger.log_metrics({"train/loss": 0.25}, step=2)
    logger.save()
    assert rows(tmp_path) == [
        {"epoch": "", "step": "0", "train/loss": "0.5", "val/accuracy": ""},
        {"epoch": "0", "step": "1", "train/loss": "", "val/accuracy": "0.75"},
        {"epoch": "", "step": "2", "train/loss": "0.25", "val/accuracy": ""},
    ]


def test_a_row_cut_short_by_a_kill_is_dropped_when_the_run_continues(tmp_path):
    logger = logger_in(tmp_path)
    for step in range(3):
        logger.log_metrics({"train/loss": 1.0}, step=step)
    logger.save()
    path = tmp_path / "csv" / "metrics.csv"
    with path.open("a") as file:
        file.write("3,0.")  # SIGKILL in the middle of an append
    resumed = logger_in(tmp_path)  # the next attempt, in the same folder
    resumed.log_metrics({"train/loss": 0.5}, step=3)
    resumed.save()
    assert [(row["step"], row["train/loss"]) for row in rows(tmp_path)] == [
        ("0", "1.0"),
        ("1", "1.0"),
        ("2", "1.0"),
        ("3", "0.5"),
    ]


def test_an_append_that_fails_midway_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"step\n0\n")
    write = os.write

    def part_then_killed(descriptor, data):
        write(descriptor, bytes(data[:2]))
        raise KeyboardInterrupt  # a kill's exception in the middle of the row

    monkeypatch.setattr(os, "write", part_then_killed)
    with pytest.raises(KeyboardInterrupt):
        append_bytes(path, b"1,0.5\n")
    monkeypatch.undo()
    assert path.read_bytes() == b"step\n0\n"


def test_an_append_never_writes_through_a_symlink(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("theirs\n")
    (tmp_path / "metrics.csv").symlink_to(target)
    with pytest.raises(OSError):
        append_bytes(tmp_path / "metrics.csv", b"1\n")
    assert target.read_text() == "theirs\n"


def test_a_full_disk_at_a_save_keeps_the_rows_and_writes_them_once_there_is_room(tmp_path):
    with small_disk(tmp_path / "disk", size="1m") as disk:
        logger = logger_in(disk)
        logger.log_metrics({"train/loss": 1.0}, step=0)
        logger.save()
        before = (disk / "csv" / "metrics.csv").read_bytes()
        filler = disk / "filler"
        with filler.open("wb") as file:  # the tmpfs full to its last page
            free = os.statvfs(disk)
            os.posix_fallocate(file.fileno(), 0, free.f_bavail * free.f_frsize)
        with pytest.raises(OSError) as raised:
            for step in range(1, 100_000):  # until the page the rows fill runs out
                logger.log_metrics({"train/loss": 0.25}, step=step)
                logger.save()
        assert raised.value.errno == errno.ENOSPC
        assert raised.value.filename == str(disk / "csv" / "metrics.csv")
        kept = (disk / "csv" / "metrics.csv").read_bytes()
        assert kept.startswith(before) and kept.endswith(b"\n")  # whole rows, earlier ones kept
        filler.unlink()
        logger.save()  # the rows that did not fit are still pending
        steps = [int(row["step"]) for row in rows(disk)]
        assert steps == list(range(len(steps))) and len(steps) > 2
