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


def _wait_for_both(sweep_root: Path, marker: str, process: subprocess.Popen, output: Path) -> Path:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert process.poll() is None, (
            f"the sweep ended before the jobs got there:\n{_tail(output)}"
        )
        logs = list(sweep_root.glob("*/*/train.log"))
        if len(logs) == 2 and all(marker in log.read_text() for log in logs):
            return logs[0].parent.parent
        time.sleep(0.2)
    raise AssertionError(f"the jobs never logged {marker!r}\n{_where_it_stood(sweep_root, output)}")


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else f"({path} missing)"


def _where_it_stood(sweep_root: Path, output: Path) -> str:
    """What a sweep that never got there had done: the sweep's output, each job's log, and the
    machine's busiest processes (another test's leftovers would show there)."""
    busy = sorted(
        psutil.process_iter(["pid", "cpu_times", "status", "cmdline"]),
        key=lambda p: sum(p.info["cpu_times"][:2]) if p.info["cpu_times"] else 0,
        reverse=True,
    )
    lines = [f"sweep output:\n{_tail(output)}"]
    lines += [f"{log}:\n{_tail(log, 1500)}" for log in sorted(sweep_root.glob("*/*/train.log"))]
    lines += ["processes, by CPU seconds:"] + [
        f"  {p.info['pid']} {p.info['status']} {sum(p.info['cpu_times'][:2]):.0f}s "
        f"{' '.join(p.info['cmdline'] or [])[:160]}"
        for p in busy[:15]
        if p.info["cpu_times"] and p.info["cmdline"]
    ]
    return "\n".join(lines)


def _start_sweep(arguments: list[str], tmp_path: Path, **popen) -> tuple[subprocess.Popen, Path]:
    """``train.py -m hydra/launcher=gpus hydra.launcher.n_jobs=2 <arguments>`` in ``tmp_path``,
    its output in a file there (a pipe nobody reads while it runs could fill and stall it)."""
    output = tmp_path / "sweep_output.txt"
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        "-m",
        "hydra/launcher=gpus",
        "hydra.launcher.n_jobs=2",
        "trainer.enable_progress_bar=false",
        *arguments,
    ]
    with output.open("w") as sink:
        process = subprocess.Popen(
            command,
            cwd=tmp_path,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            **popen,
        )
    return process, output


@pytest.mark.parametrize(
    ("overrides", "marker"),
    [
        # Each job its own epoch-0 pass: shared (the default), a job that starts later than the
        # other reads the first one's measures instead, and never makes that pass.
        (("callbacks.isotropy.shared_dir=null",), EPOCH_ZERO_PASS),
        (("reg=istar", "callbacks.isotropy=null"), SIGMA_S_PASS),
    ],
    ids=["epoch-0 isotropy pass", "Sigma_S pass"],
)
def test_sigterm_to_a_gpus_sweep_stops_every_job_within_a_minute(overrides, marker, tmp_path):
    process, log = _start_sweep(["seed=1,2", *overrides], tmp_path)
    try:
        sweep = _wait_for_both(tmp_path / "logs" / "multirun", marker, process, log)
        children = psutil.Process(process.pid).children()
        workers = [child for child in children if "spawn_main" in " ".join(child.cmdline())]
        assert len(workers) == 2  # (besides multiprocessing's resource tracker)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:  # nothing left behind, whatever failed
        for leftover in psutil.Process().children(recursive=True):
            leftover.kill()
    output = log.read_text()
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert not [worker.pid for worker in workers if worker.is_running()], "orphaned workers"
    assert "Traceback" not in output, output[-3000:]
    for job in ("0", "1"):
        record = json.loads((sweep / job / "results.json").read_text())
        assert (record["status"], record["interrupted_by"]) == ("interrupted", "SIGTERM"), job
    assert f"Sweep {sweep}: 0 of 2 jobs completed, 2 did not:" in output


def test_one_ctrl_c_to_a_gpus_sweep_stops_every_job_at_its_safe_point(tmp_path):
    """Ctrl-C as a terminal sends it, once, to the sweep's whole process group while both jobs
    train: each job stops at its next batch end, saved and recorded interrupted by SIGINT, no
    third job starts, and the sweep ends within the grace period with its summary and the rerun
    line, exit status 130. Before, it waited for ever on a worker that had taken the launcher's
    SIGTERM for its finished run's."""
    process, log = _start_sweep(
        # A whole epoch of RTE (78 batches), so that neither job can finish between the other's
        # start and the signal, however far apart the two start.
        ["task=rte", "seed=1,2,3", "trainer.max_epochs=1"],
        tmp_path,
        start_new_session=True,  # its own process group, as a shell's foreground job
    )
    try:
        sweep = _wait_for_both(
            tmp_path / "logs" / "multirun", "Isotropy at epoch 0 (", process, log
        )
        workers = [
            child
            for child in psutil.Process(process.pid).children()
            if "spawn_main" in " ".join(child.cmdline())
        ]
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=90)
        took = time.monotonic() - started
    finally:
        for leftover in psutil.Process().children(recursive=True):
            leftover.kill()
    output = log.read_text()
    assert process.returncode == 128 + signal.SIGINT, output[-3000:]
    assert took < 60, took  # the grace period: no worker had to be killed
    assert not [worker.pid for worker in workers if worker.is_running()], "orphaned workers"
    assert "Traceback" not in output and "killing it" not in output, output[-3000:]
    for job in ("0", "1"):
        record = json.loads((sweep / job / "results.json").read_text())
        assert (record["status"], record["interrupted_by"]) == ("interrupted", "SIGINT"), job
    assert not (sweep / "2").exists()
    assert output.count(f"Rerun them with: python -m isotune.rerun {sweep}") == 1, output[-3000:]
