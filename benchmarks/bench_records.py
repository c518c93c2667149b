"""What one save of ``csv/metrics.csv`` costs as the file grows: milliseconds per save with 1e2,
1e4 and 1e5 rows already logged (a run that logs every step of a large task reaches 1e5).

For each size, a metrics.csv of that many rows (the columns of a training run's rows) is written
into a temporary run folder, the run's CSV logger opens it as a resumed run does, and one row is
logged and saved ``--saves`` times; the median save is reported. Run it on the code to measure;
for an earlier commit, put that commit's ``src`` first on the path:

    python benchmarks/bench_records.py
    git archive b3054a3 src | tar -x -C /tmp/before && \\
        PYTHONPATH=/tmp/before/src python benchmarks/bench_records.py
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path

import isotune
from isotune.record.csv_logging import RunCSVLogger

COLUMNS = ("epoch", "step", "train/loss", "train/lr", "val/accuracy", "val/loss")


def row(step: int) -> dict[str, float]:
    return {"epoch": step // 1000, "train/loss": 0.5 + step % 7 / 10, "train/lr": 5e-5}


def ms_per_save(rows: int, saves: int) -> float:
    """The median save, in milliseconds, with ``rows`` rows already in metrics.csv."""
    with tempfile.TemporaryDirectory() as folder:
        csv_dir = Path(folder) / "csv"
        csv_dir.mkdir()
        with (csv_dir / "metrics.csv").open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=sorted(COLUMNS))
            writer.writeheader()
            writer.writerows({**row(step), "step": step} for step in range(rows))
            file.flush()
            os.fsync(file.fileno())  # on disk before timing: each save syncs only its own rows
        logger = RunCSVLogger(save_dir=folder, name="csv", version="")
        times = []
        for step in range(rows, rows + saves):
            logger.log_metrics(row(step), step=step)
            start = time.perf_counter()
            logger.save()
            times.append(time.perf_counter() - start)
        return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saves", type=int, default=20, help="saves timed per size")
    parser.add_argument("--rows", type=int, nargs="+", default=[100, 10_000, 100_000])
    args = parser.parse_args()
    print(f"isotune from {Path(isotune.__file__).parent}")
    for rows in args.rows:
        print(f"{rows:>7} rows: {ms_per_save(rows, args.saves):8.2f} ms per save")


if __name__ == "__main__":
    main()
