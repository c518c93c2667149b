"""Run the project's entry points as a user does: a real subprocess, offline, output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_script(
    script: str,
    *args: str,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """``python <repository>/<script> <args>`` from ``cwd``, offline (HF_HUB_OFFLINE=1)."""
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python train.py <args>`` from the repository."""
    return run_script("train.py", *args, env=env, timeout=300)
