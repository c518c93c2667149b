"""A job run by a warm ``gpus`` worker (after another job in the same process) gives the same
numbers as the same job in a fresh process, bit for bit: nothing a job leaves behind (seeded
generators, torch's threads, cached kernels, the shared epoch-0 measures) changes the next one."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import run_cli, tiny_cli_overrides

COMPARED = ("history", "best", "final", "best_epoch", "steps")


def numbers(results: dict) -> str:
    """Every metric of a run's results.json as JSON (NaN equal to NaN), timings left out."""
    isotropy = {k: v for k, v in results["isotropy"].items() if k != "seconds"}
    return json.dumps([{k: results[k] for k in COMPARED}, isotropy], sort_keys=True)


@pytest.mark.slow
def test_a_job_in_a_warm_worker_equals_it_in_a_fresh_process(tiny_bert, glue_dir, tmp_path):
    overrides = tiny_cli_overrides(tiny_bert, glue_dir, f"paths.log_dir={tmp_path}")
    launcher = ("hydra/launcher=gpus", "hydra.launcher.n_jobs=1")
    # seed 2 first, then seed 1 in the same (now warm) worker
    swept = run_cli("-m", *launcher, "seed=2,1", *overrides, env={"CUDA_VISIBLE_DEVICES": ""})
    assert swept.returncode == 0, swept.stderr
    fresh = run_cli("seed=1", *overrides)
    assert fresh.returncode == 0, fresh.stderr
    (sweep,) = (tmp_path / "multirun").iterdir()
    warm = json.loads((sweep / "1" / "results.json").read_text())
    (alone,) = (json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/results.json"))
    assert warm["seed"] == alone["seed"] == 1
    assert numbers(warm) == numbers(alone)
