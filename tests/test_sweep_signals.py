"""A signal to a ``hydra/launcher=gpus`` sweep reaches every job, whatever it is doing: within a
minute no worker is alive and every job is recorded ``interrupted`` by that signal, also a job in
its epoch-0 isotropy pass or in I-STAR's Sigma_S pass (the packaged MiniLM on real RTE, so that
those passes last seconds)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.cli import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("GLUE_DIR"), reason="GLUE_DIR is not set (real RTE)"),
]

EPOCH_ZERO_PASS = "Isotropy at epoch 0: encoding the probe"
SIGMA_S_PASS = "I-STAR: Sigma_S for epoch 1"


def _wait_for_both(sweep_root: Path, marker: str, process: subprocess.Popen) -> Path:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert process.poll() is None, "the sweep ended before the jobs got there"
        logs = list(sweep_root.glob("*/*/train.log"))
        if len(logs) == 2 and all(marker in log.read_text() for log in logs):
            return logs[0].parent.parent
        time.sleep(0.2)
    raise AssertionError(f"the jobs never logged {marker!r}")


@pytest.mark.parametrize(
    ("overrides", "marker"),
    [((), EPOCH_ZERO_PASS), (("reg=istar", "callbacks.isotropy=null"), SIGMA_S_PASS)],
    ids=["epoch-0 isotropy pass", "Sigma_S pass"],
)
def test_sigterm_to_a_gpus_sweep_stops_every_job_within_a_minute(overrides, marker, tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "-m",
            "hydra/launcher=gpus",
            "hydra.launcher.n_jobs=2",
            "seed=1,2",
            "trainer.enable_progress_bar=false",
            *overrides,
        ],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        sweep = _wait_for_both(tmp_path / "logs" / "multirun", marker, process)
        children = psutil.Process(process.pid).children()
        workers = [child for child in children if "spawn_main" in " ".join(child.cmdline())]
        assert len(workers) == 2  # (besides multiprocessing's resource tracker)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:  # nothing left behind, whatever failed
        for leftover in psutil.Process().children(recursive=True):
            leftover.kill()
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert not [worker.pid for worker in workers if worker.is_running()], "orphaned workers"
    assert "Traceback" not in output, output[-3000:]
    for job in ("0", "1"):
        record = json.loads((sweep / job / "results.json").read_text())
        assert (record["status"], record["interrupted_by"]) == ("interrupted", "SIGTERM"), job
    assert f"Sweep {sweep}: 0 of 2 jobs completed, 2 did not:" in output


@pytest.mark.xfail(
    reason="issue 70, open: failed once in the full CI run of 2026-12-07 (passed alone, 55 s); "
    "its cause not yet found",
    strict=False,
)
def test_one_ctrl_c_to_a_gpus_sweep_stops_every_job_at_its_safe_point(tmp_path):
    """Ctrl-C as a terminal sends it, once, to the sweep's whole process group while both jobs
    train: each job stops at its next batch end, saved and recorded interrupted by SIGINT, no
    third job starts, and the sweep ends within the grace period with its summary and the rerun
    line, exit status 130. Before, it waited for ever on a worker that had taken the launcher's
    SIGTERM for its finished run's."""
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "-m",
            "hydra/launcher=gpus",
            "hydra.launcher.n_jobs=2",
            "task=rte",
            "seed=1,2,3",
            "debug=limit",
            "trainer.max_epochs=1",
            "trainer.enable_progress_bar=false",
        ],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell's foreground job
    )
    try:
        sweep = _wait_for_both(tmp_path / "logs" / "multirun", "Isotropy at epoch 0 (", process)
        workers = [
            child
            for child in psutil.Process(process.pid).children()
            if "spawn_main" in " ".join(child.cmdline())
        ]
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=90)
        took = time.monotonic() - started
    finally:
        for leftover in psutil.Process().children(recursive=True):
            leftover.kill()
    assert process.returncode == 128 + signal.SIGINT, output[-3000:]
    assert took < 60, took  # the grace period: no worker had to be killed
    assert not [worker.pid for worker in workers if worker.is_running()], "orphaned workers"
    assert "Traceback" not in output and "killing it" not in output, output[-3000:]
    for job in ("0", "1"):
        record = json.loads((sweep / job / "results.json").read_text())
        assert (record["status"], record["interrupted_by"]) == ("interrupted", "SIGINT"), job
    assert not (sweep / "2").exists()
    assert output.count(f"Rerun them with: python -m isotune.rerun {sweep}") == 1, output[-3000:]
