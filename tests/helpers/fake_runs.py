"""Run folders as a training run leaves them, written directly: the sweep tools' tests need
folders with known numbers, not trainings."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

PRETRAINED_IW = 0.01


def write_run(job_dir: Path, overrides: list[str], result: dict) -> None:
    """A job directory as a training run leaves it: Hydra's record and results.json."""
    (job_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job_dir / "results.json").write_text(json.dumps({**result, "overrides": overrides}))


def write_multirun(sweep_dir: Path, sweep_overrides: list[str]) -> None:
    """The multirun.yaml of a basic sweeper's sweep of ``sweep_overrides`` (``seed=1,2``)."""
    basic = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
    multirun = {"hydra": {"sweeper": {"_target_": basic}, "overrides": {"task": sweep_overrides}}}
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "multirun.yaml").write_text(yaml.safe_dump(multirun))


def completed(model, norm, task, seed, score, finished_at="2026-11-30T09:00:00") -> dict:
    return {
        "status": "completed",
        "error": None,
        "task": task,
        "model": model,
        "norm": norm,
        "seed": seed,
        "primary_metric": "accuracy",
        "best_epoch": 2,
        "best": {"accuracy": score, "loss": 0.5},
        "final": {"accuracy": score - 0.01, "loss": 0.6},
        "isotropy": {
            "pretrained": {"iso/cls/iw": PRETRAINED_IW},
            "best": {"iso/cls/iw": score / 10},  # any value that differs by seed
        },
        "finished_at": finished_at,
    }


def ended_early(model, norm, task, seed, status="failed", trivial=0.5) -> dict:
    """A run that ended without a score (``failed``, or ``interrupted``: not ended for good),
    as training leaves it after validation set up: its settings and its dev set's trivial
    score (majority class accuracy ``trivial``)."""
    return {
        "status": status,
        "error": "NonFiniteLossError: loss became nan at step 12" if status == "failed" else None,
        "task": task,
        "model": model,
        "norm": norm,
        "seed": seed,
        "primary_metric": "accuracy",
        "trivial": {"predictor": "majority class", "metric": "accuracy", "score": trivial},
        "updated_at": "2026-11-30T08:00:00+00:00",
    }
