"""How long the offline sweep tools take on a 60-run sweep folder: ``--help``, the tables and
statistics without figures, and the whole command with figures, each in a fresh interpreter.

The folder is written here: 4 norms x 3 tasks x 5 seeds, each run a results.json as training
leaves it (scores, per-epoch isotropy of both sentence views over 3 epochs) and the overrides
Hydra records. Nothing is trained.

    python benchmarks/bench_aggregate.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NORMS = ("none", "batchnorm", "isobn", "whitening")
TASKS = ("rte", "mrpc", "cola")
SEEDS = range(1, 6)
MEASURES = ("log_iw", "isoscore", "avg_cosine", "n_dominant", "n_outliers", "outliers_kept")


def write_sweep(folder: Path) -> int:
    """The 60 run folders; returns how many."""
    rng = random.Random(0)
    jobs = list(itertools.product(NORMS, TASKS, SEEDS))
    for number, (norm, task, seed) in enumerate(jobs):
        job = folder / str(number)
        (job / ".hydra").mkdir(parents=True)
        overrides = [f"norm={norm}", f"task={task}", f"seed={seed}"]
        (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
        per_epoch = {
            str(epoch): {
                f"iso/{view}/{measure}": rng.random()
                for view in ("pre_norm", "post_norm")
                for measure in MEASURES
            }
            for epoch in range(4)
        }
        score = 0.6 + 0.1 * rng.random()
        result = {
            "status": "completed",
            "error": None,
            "task": task,
            "model": "minilm",
            "norm": norm,
            "reg": "none",
            "reg_weight": 0.0,
            "adapt": "full",
            "seed": seed,
            "primary_metric": "accuracy",
            "best_epoch": 3,
            "best": {"accuracy": score, "loss": 0.6},
            "final": {"accuracy": score, "loss": 0.6},
            "isotropy": {
                "pretrained": per_epoch["0"],
                "best": per_epoch["3"],
                "per_epoch": per_epoch,
            },
            "overrides": overrides,
            "finished_at": "2026-12-01T09:00:00+00:00",
        }
        (job / "results.json").write_text(json.dumps(result))
    return len(jobs)


def seconds(code: str) -> float:
    """Wall time of ``python -c code`` in a fresh interpreter."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="median of this many runs each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sweep = Path(tmp) / "sweep"
        count = write_sweep(sweep)
        cases = {
            "python -m isotune.aggregate --help": (
                "import runpy, sys\nsys.argv = ['x', '--help']\n"
                "try:\n    runpy.run_module('isotune.aggregate', run_name='__main__')\n"
                "except SystemExit:\n    pass"
            ),
            "tables and statistics, no figures": (
                "from pathlib import Path\nfrom isotune.sweeps.aggregate import aggregate\n"
                f"result = aggregate([Path({str(sweep)!r})])\nresult.report()"
            ),
            "python -m isotune.aggregate <sweep> (figures too)": (
                "import runpy, sys\n"
                f"sys.argv = ['x', {str(sweep)!r}]\n"
                "runpy.run_module('isotune.aggregate', run_name='__main__')"
            ),
        }
        print(f"| {count}-run sweep folder | seconds (median of {args.repeats}) |")
        print("|---|---|")
        for name, code in cases.items():
            times = sorted(seconds(code) for _ in range(args.repeats))
            print(f"| {name} | {times[len(times) // 2]:.2f} |")


if __name__ == "__main__":
    main()
