"""Every panel of the W&B workspace and of a sweep's report names a key, and an axis, that real
runs log: small training runs with ``logger=wandb`` offline (every intervention, and
``adapt=lora``, all with layer profiles), their keys and tables read from their ``run-*.wandb``
files. And the reader of those files on chunks that cross blocks and on a damaged file."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib

import pytest

from isotune.dashboard.layout import dashboard_sections
from isotune.dashboard.run_file import (
    BLOCK,
    FIRST,
    FULL,
    LAST,
    MAGIC,
    MIDDLE,
    RunKeys,
    records,
    run_keys,
)
from isotune.dashboard.views import view_json, workspace
from isotune.errors import IsotuneError
from isotune.tracking.metric_keys import PROFILE_LEVELS, profile_table_key
from tests.conftest import CONF_DIR
from tests.helpers.cli import run_script, tiny_cli_overrides
from tests.helpers.dashboard_check import panels, unlogged

INTERVENTIONS = sorted(path.stem for path in (CONF_DIR / "intervention").glob("*.yaml"))
OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
TWO_AT_ONCE = ("hydra/launcher=gpus", "hydra.launcher.n_jobs=2")  # CPU jobs, without GPUs


@pytest.fixture(scope="module")
def logs(tmp_path_factory, tiny_bert, glue_dir):
    """``logs/`` of a sweep over every intervention and of one lora run, all logged to W&B
    offline with layer profiles, plus the aggregate's summary run of the sweep (the report's
    figures). The sweep runs two jobs at once, on CPU (hydra/launcher=gpus): the keys a run logs
    are its own."""
    cwd = tmp_path_factory.mktemp("dashboard")
    tiny = tiny_cli_overrides(
        tiny_bert, glue_dir, "logger=wandb", "callbacks.isotropy.layer_profiles=true"
    )
    every_intervention = ["-m", f"intervention={','.join(INTERVENTIONS)}", *TWO_AT_ONCE]
    for job in (every_intervention, ["adapt=lora", "reg=istar"]):
        result = run_script("train.py", *job, *tiny, cwd=cwd, env=OFFLINE)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    (sweep,) = (cwd / "logs" / "multirun").iterdir()
    aggregate = subprocess.run(
        [sys.executable, "-m", "isotune.aggregate", str(sweep), "--wandb"],
        env={**os.environ, **OFFLINE},
        capture_output=True,
        text=True,
    )
    assert aggregate.returncode == 0, aggregate.stderr[-3000:]
    return cwd / "logs"


def keys_below(folder):
    return [run_keys(path) for path in sorted(folder.rglob("run-*.wandb"))]


@pytest.mark.slow
def test_every_workspace_panel_names_keys_and_axes_that_runs_logged(logs):
    runs = keys_below(logs)
    assert len(runs) == len(INTERVENTIONS) + 2  # the sweep, the lora run, the summary run
    view = view_json(workspace("entity", "project", dashboard_sections({"rte": "accuracy"}), "t"))
    assert (
        len(list(panels(view))) == 36
    )  # 2 scores, 2 x 7 isotropy, 2 scatters, 3 + 2 + 13 optional
    assert unlogged(view, runs) == []
    # The check sees what is missing: no run trained CoLA.
    other = view_json(
        workspace("e", "p", dashboard_sections({"cola": "matthews_correlation"}), "t")
    )
    assert "dev matthews_correlation (cola): 'val/matthews_correlation' never logged" in (
        unlogged(other, runs)
    )


@pytest.mark.slow
def test_runs_draw_isotropy_against_its_epoch_and_keep_best_values(logs):
    (run,) = keys_below(logs / "runs")
    assert run.step_metrics["iso/*"] == "iso/epoch"
    assert run.step_metrics["val/*"] == "val/epoch" and "val/epoch" in run.history
    assert {"best/accuracy", "best/iso/post_norm/log_iw", "params/trainable"} <= run.summary
    assert {"train/reg_isoscore_star_step", "iso/pre_norm/isoscore_star"} <= run.history


@pytest.mark.slow
def test_a_sweeps_report_dry_run_names_only_logged_keys(logs):
    (sweep,) = (logs / "multirun").iterdir()
    result = subprocess.run(
        [sys.executable, "-m", "isotune.dashboard", "report", str(sweep), "--dry-run"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"Dry run: wrote {sweep / 'wandb_report.json'}: the report")
    report = json.loads((sweep / "wandb_report.json").read_text())
    texts = [block["text"] for block in report["blocks"] if block["type"] == "MarkdownBlock"]
    assert "Holm-adjusted p" in texts[1]
    figures = [p for p in panels(report) if p["type"] == "MediaBrowser"]
    assert len(figures) == len(list(sweep.glob("*.png")))
    assert unlogged(report, keys_below(sweep)) == []
    profiles = [p for p in panels(report) if p["type"] == "CustomChart"]
    assert {p["query"]["summaryTable"]["tableKey"] for p in profiles} == {
        profile_table_key(level) for level in PROFILE_LEVELS
    }


def test_the_check_reads_a_profile_charts_table_and_its_columns():
    """A layer profile panel draws columns of a table in a run's summary: a table no run logged,
    or a column it lacks, is named."""
    view = view_json(workspace("e", "p", dashboard_sections({"rte": "accuracy"}), "t"))
    sentence = profile_table_key("sentence")
    runs = [
        RunKeys(history={"val/epoch"}, tables={sentence: ("epoch", "layer", "anisotropy")}),
        RunKeys(tables={sentence: ("epoch", "layer", "twonn")}),
    ]
    problems = [line for line in unlogged(view, runs) if "by layer" in line]
    assert "sentence: anisotropy by layer" not in " ".join(problems)
    assert "sentence: twonn by layer" not in " ".join(problems)
    assert f"sentence: isoscore by layer: {sentence!r} has no column 'isoscore'" in problems
    tokens = profile_table_key("tokens")
    assert f"tokens: massive_ratio by layer: table {tokens!r} not in any summary" in problems


def chunk(kind: int, data: bytes) -> bytes:
    return struct.pack("<IHB", zlib.crc32(data, zlib.crc32(bytes([kind]))), len(data), kind) + data


def test_the_reader_joins_records_across_blocks_and_refuses_a_damaged_file(tmp_path):
    big = bytes(range(256)) * 300  # 76,800 bytes: a first, a middle and a last chunk
    first = BLOCK - 7 - 7  # the block holds the file's header and the chunk's
    middle = first + BLOCK - 7
    parts = [MAGIC + b"\x00", chunk(FIRST, big[:first]), chunk(MIDDLE, big[first:middle])]
    parts += [chunk(LAST, big[middle:]), chunk(FULL, b"small")]
    path = tmp_path / "run-x.wandb"
    path.write_bytes(b"".join(parts))
    assert list(records(path)) == [big, b"small"]
    damaged = bytearray(path.read_bytes())
    damaged[100] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(IsotuneError, match="damaged"):
        list(records(path))
