"""Search folders of a study as a finished search leaves them, written directly (trials.csv,
optimization_results.yaml, the best trial's report runs): the study report's tests need searches
with known numbers, not trainings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import yaml

from isotune.study.comparison import (
    StatedAnswer,
    across_tasks,
    arm_table,
    geometry_correlations,
    task_comparisons,
)
from isotune.study.report import report_text
from isotune.study.results import ArmOutcome
from isotune.sweeps.tables import measure_key
from tests.helpers.fake_runs import completed, write_run


def write_search(
    folder: Path,
    task: str,
    trial_values: Mapping[int, float],
    report: Mapping[int, float | None],
    best_params: Mapping[str, float],
    isoscore: float = 0.2,
) -> None:
    """A finished search in ``folder``: each trial (number -> value) complete on tuning seeds 1
    and 2 (both at its value), the best trial's runs on the report seeds (seed -> score; None: a
    run that failed), each report run's IsoScore ``isoscore`` + score and average cosine
    1 - score at the best epoch."""
    rows = [
        {"trial": n, "state": "COMPLETE", "value": v, "seed": s, "score": v, "learned": True,
         "job_status": "completed", "job_dir": str(folder / f"trial-{n:03d}/seed-{s}")}
        for n, v in trial_values.items()
        for s in (1, 2)
    ]  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "trials.csv", index=False)
    best = max(trial_values, key=trial_values.get)
    record = {
        "best_params": dict(best_params),
        "best_value": trial_values[best],
        "best_trial": best,
    }
    (folder / "optimization_results.yaml").write_text(yaml.safe_dump(record))
    chosen = [f"{key}={value}" for key, value in best_params.items()]
    for seed, score in report.items():
        job_dir = folder / "report" / f"trial-{best:03d}" / f"seed-{seed}"
        if score is None:
            write_run(job_dir, [*chosen, f"seed={seed}"], {"status": "failed", "error": "NaN loss"})
            continue
        result = completed("minilm", "none", task, seed, score)
        result["isotropy"]["final"] = {  # the study reads the geometry at the last epoch
            measure_key("isoscore"): isoscore + score,
            measure_key("avg_cosine"): 1 - score,
        }
        write_run(job_dir, [*chosen, f"seed={seed}"], result)


def study_report_text(
    outcomes: Sequence[ArmOutcome], baseline: str = "none", answer: StatedAnswer | None = None
) -> str:
    """The study report's text of ``outcomes`` (a score to maximize) and its stated test's
    ``answer``, its tables computed as :func:`isotune.study.report.write_study_report` computes
    them, no file written (nor figure drawn)."""
    return report_text(
        outcomes,
        baseline,
        True,
        arm_table(outcomes),
        task_comparisons(outcomes, baseline),
        across_tasks(outcomes, baseline),
        geometry_correlations(outcomes),
        answer,
    )
