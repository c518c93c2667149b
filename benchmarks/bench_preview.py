"""The preview's time against the sweep's real time (issue 70: within a factor of 1.5).

For each sweep: its preview (``hydra.sweeper.preview=true``, which times a few steps of one job
here), then the same command for real, in a scratch folder; prints the estimate, the real wall
time and their ratio (real / estimate: above 1, the preview was short). Run it on a quiet
machine: a busy one slows the real sweep and the preview's few steps differently.

    GLUE_DIR=../shared/data/glue python benchmarks/bench_preview.py
    GLUE_DIR=../shared/data/glue python benchmarks/bench_preview.py --only debug
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = {
    # issue 70's: 8 short debug jobs, one at a time, where loading, the epoch-0 probe and
    # validation outweigh the training steps
    "debug": [f"seed={','.join(map(str, range(1, 9)))}", "debug=limit", "trainer.max_epochs=1"],
    # and 2 real RTE jobs (one epoch of 78 batches each)
    "rte": ["seed=1,2", "trainer.max_epochs=1"],
}
UNITS = {"s": 1, "min": 60, "h": 3600, "days": 86400}
ESTIMATE = re.compile(r"Time: about ([\d.e+]+) (s|min|h|days) \(from ([\d.e+]+) (s|min|h|days)")


def run(arguments: list[str], folder: Path) -> tuple[float, str]:
    """``train.py -m task=rte <arguments>`` in ``folder``: its wall time and output."""
    command = [sys.executable, str(ROOT / "train.py"), "-m", "task=rte", *arguments]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return took, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SWEEPS), help="one sweep only")
    args = parser.parse_args()
    for name, arguments in SWEEPS.items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory() as scratch:
            preview_s, said = run([*arguments, "hydra.sweeper.preview=true"], Path(scratch))
            found = ESTIMATE.search(said)
            if found is None:
                raise SystemExit(f"no estimate in the preview's output:\n{said[-2000:]}")
            estimate = float(found[1]) * UNITS[found[2]]
            real, _ = run(arguments, Path(scratch))
        print(
            f"{name}: train.py -m task=rte {' '.join(arguments)}\n"
            f"  preview took {preview_s:.0f} s and estimated {estimate:.0f} s; the sweep took "
            f"{real:.0f} s: real / estimate = {real / estimate:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
