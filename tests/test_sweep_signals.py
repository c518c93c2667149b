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
