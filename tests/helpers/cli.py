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


def start_script(script: str, *args: str, **popen) -> subprocess.Popen:
    """``python <repository>/<script> <args>`` from the repository, offline, not waited for."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / script), *args],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        **popen,
    )


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python train.py <args>`` from the repository."""
    return run_script("train.py", *args, env=env, timeout=300)


def tiny_cli_overrides(tiny_bert: Path, glue_dir: Path, *more: str) -> list[str]:
    """The tiny test encoder on the fixture data for a few batches, as command-line overrides."""
    return [
        f"model.name_or_path={tiny_bert}",
        "model.pooling=cls",
        f"paths.glue_dir={glue_dir}",
        "debug=limit",
        "callbacks.isotropy.figures=false",
        "trainer.enable_progress_bar=false",
        *more,
    ]


def sweep_with_a_bad_job(
    tiny_bert: Path, glue_dir: Path, cwd: Path, *launcher: str
) -> tuple[subprocess.CompletedProcess, str, Path]:
    """``python train.py -m seed=1,abc ...`` (job 1's seed is not an integer) from ``cwd`` with
    ``launcher``'s overrides: the result, its whole output and the sweep folder."""
    result = run_script(
        "train.py", "-m", "seed=1,abc", *launcher, *tiny_cli_overrides(tiny_bert, glue_dir), cwd=cwd
    )
    (sweep,) = (cwd / "logs" / "multirun").iterdir()
    return result, result.stdout + result.stderr, sweep
