"""Runs that failed to learn: counted per configuration and task, and set apart in the statistics.

A run failed when its best epoch did not beat its dev set's trivial predictor by the margin
(``learned``, :mod:`isotune.training.trivial`). Mixed with worse runs, failures read as a small
negative effect, so the tables and paired statistics are computed twice: over all runs and over
those that learned. A run from before the verdict counts as unknown, never as failed.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from isotune.sweeps.runs import Run
from isotune.tracking.reporting import markdown_table

COUNT_COLUMNS = ["configuration", "task", "n", "failed", "unknown"]


def learned_of(run: Run) -> bool | None:
    """True, False (failed to learn), or None: unknown (a run older than the verdict)."""
    learned = run.result.get("learned")
    return learned if isinstance(learned, bool) else None


def not_failed(scores: pd.DataFrame) -> pd.DataFrame:
    """The runs that learned, or whose verdict is unknown (``scores``: one row per run)."""
    return scores.loc[scores["learned"].map(lambda learned: learned is not False).astype(bool)]


def failure_counts(scores: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and task, in the scores' order: runs, failed runs, runs without a
    verdict."""
    verdicts = scores.groupby(["configuration", "task"], sort=False)["learned"]
    counts = verdicts.agg(
        n="size",
        failed=lambda v: int(sum(learned is False for learned in v)),
        unknown=lambda v: int(sum(learned is None for learned in v)),
    )
    return counts.reset_index()[COUNT_COLUMNS]


def failures_markdown(counts: pd.DataFrame) -> str:
    """One row per configuration and task: "k of n runs failed to learn"."""
    if counts.empty:
        return "No completed runs."
    body = [
        [r.configuration, r.task, _count(r.failed, r.n, r.unknown)]
        for r in counts.itertuples(index=False)
    ]
    return markdown_table(["configuration", "task", "failed to learn"], body)


def _count(failed: int, n: int, unknown: int) -> str:
    text = f"{failed} of {n}" + (" (all)" if failed == n else "")
    return text + (f"; {unknown} without a verdict (older runs)" if unknown else "")


def with_failures(
    paired: pd.DataFrame, counts: pd.DataFrame, baselines: Mapping[str, str], learned_only: bool
) -> pd.DataFrame:
    """Paired statistics (:func:`isotune.sweeps.comparisons.paired_statistics`) with how many runs
    of each side failed to learn (``failed``, ``baseline_failed``) and a note where every run of
    one side failed; ``learned_only``: statistics over the runs that learned, where a compared
    configuration (``baselines``: name -> its baseline's name) whose runs all failed on a task
    gets a row with n 0 that says so, instead of no row at all."""
    failed = {(r.configuration, r.task): r for r in counts.itertuples(index=False)}
    rows = paired.to_dict("records")
    if learned_only:
        present = {(row["configuration"], row["task"]) for row in rows}
        rows += [
            {
                **dict.fromkeys(paired.columns),
                **{"configuration": name, "baseline": baselines[name], "task": task, "n": 0},
            }
            for name, task in failed
            if name in baselines and (name, task) not in present
        ]
    ending = ": no difference." if learned_only else "."
    for row in rows:
        sides = [("configuration", failed.get((row["configuration"], row["task"])))]
        sides.append(("baseline", failed.get((row["baseline"], row["task"]))))
        row["failed"], row["baseline_failed"] = (count.failed if count else 0 for _, count in sides)
        notes = [
            f"{'The one run' if count.n == 1 else f'All {count.n} runs'} of the {side} failed "
            f"to learn{ending}"
            for side, count in sides
            if count is not None and count.failed == count.n
        ]
        row["note"] = " ".join([*notes, row.get("note") or ""]).strip()
    columns = [*paired.columns, "failed", "baseline_failed"]
    return pd.DataFrame(rows, columns=columns, dtype=object).astype({"n": int})
