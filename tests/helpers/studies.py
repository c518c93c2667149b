"""A study without trainings: its search folders as a finished search leaves them, written
directly (trials.csv, optimization_results.yaml, the best trial's report runs), for the study
report's tests that need searches with known numbers; and the study sweeper set up as Hydra sets
it up, swept in process on a launcher that writes each job's run, for the tests of its checks
before any job and of what it launches."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hydra._internal.callbacks import Callbacks
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.types import HydraContext
from omegaconf import OmegaConf

from hydra_plugins.isotune_launcher.study_sweeper import StudySweeper
from isotune.study.comparison import (
    StatedAnswer,
    across_tasks,
    arm_table,
    geometry_correlations,
    task_comparisons,
)
from isotune.study.looks_journal import next_looks
from isotune.study.preregistration import new_registration
from isotune.study.report import report_text
from isotune.study.results import ArmOutcome
from isotune.study.sequential import SequentialPlan
from isotune.study.stated import StatedTest
from isotune.study.stated_looks import (
    Looks,
    current_pairs,
    looks_from,
    stated_scores,
    task_scores,
)
from isotune.sweeps.environment import machine_provenance
from isotune.sweeps.tables import measure_key
from tests.conftest import CONF_DIR, compose_train_config
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


def looks_taken_now(
    plan: SequentialPlan, test: StatedTest, outcomes: Sequence[ArmOutcome]
) -> Looks:
    """The looks the study command would take on runs held in memory (``outcomes``), frozen in
    memory: a report's view of them, for the report's tests."""
    registration = new_registration(test, plan, "accuracy")
    runs = current_pairs(None, test, stated_scores(test, outcomes))
    frozen = next_looks(registration, [], runs, task_scores(test, outcomes))
    return looks_from(registration, tuple(frozen), test, outcomes)


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


# the smallest study a sweep runs: one trial on one tuning seed, one job at a time
SMALL_STUDY = ["hydra.sweeper.n_trials=1", "hydra.sweeper.seeds=[1]", "hydra.sweeper.n_jobs=1"]


def study_sweeper(
    tmp_path: Path, glue_dir: Path, typed: list[str], preset=()
) -> tuple[StudySweeper, list[str]]:
    """The sweeper of ``python train.py -m study=isotropy task=rte <typed>`` in ``tmp_path``,
    set up as Hydra sets it up, and the command line typed."""
    typed = ["study=isotropy", "task=rte", f"paths.log_dir={tmp_path}", *typed]
    cfg = compose_train_config([*typed, f"paths.glue_dir={glue_dir}", *preset])
    settings = OmegaConf.to_container(cfg.hydra.sweeper)
    sweeper = StudySweeper(**{k: v for k, v in settings.items() if not k.startswith("_")})
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))
    context = HydraContext(config_loader=loader, callbacks=Callbacks())
    sweeper.setup(hydra_context=context, task_function=lambda _: None, config=cfg)
    return sweeper, typed


class RecordingLauncher:
    """Hydra's launcher as the study sweeper uses it, writing each job's run as a completed
    training run of this machine's environment leaves it (reg=none scores 0.6, others 0.65, plus
    seed / 1000), and keeping the job folders it launched."""

    def __init__(self, sweep_dir: Path, score=None) -> None:
        self.sweep_dir = sweep_dir
        self.score = score or (lambda reg, seed: (0.6 if reg == "none" else 0.65) + seed / 1000)
        self.launched: list[str] = []
        self.overrides: dict[str, list[str]] = {}  # each job folder's overrides, as launched
        self.provenance = machine_provenance()

    def launch(self, jobs: list[list[str]], initial_job_idx: int) -> None:
        for overrides in jobs:
            values = dict(o.split("=", 1) for o in overrides)
            seed = int(values["seed"])
            score = self.score(values.get("reg"), seed)
            result = {**completed("minilm", "none", "rte", seed, score)}
            task_overrides = [o for o in overrides if not o.startswith("hydra.")]
            write_run(
                self.sweep_dir / values["hydra.sweep.subdir"],
                task_overrides,
                {**result, "provenance": self.provenance},
            )
            self.launched.append(values["hydra.sweep.subdir"])
            self.overrides[values["hydra.sweep.subdir"]] = overrides


def refused_study(
    tmp_path: Path,
    glue_dir: Path,
    typed: list[str],
    preset=(),
    code=1,
    patch=lambda: None,
    expect_runs=False,
) -> str:
    """Sweep ``python train.py -m study=isotropy task=rte <typed>`` (``preset``: values composed
    into the config as a preset would set them, not typed) and return what it logged as it
    stopped with exit status ``code`` before any job. ``patch`` runs after the sweeper's setup,
    whose first scan of Hydra's plugins executes their modules again (undoing a patch made
    before it)."""
    sweeper, typed = study_sweeper(tmp_path, glue_dir, typed, preset)
    patch()
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("hydra_plugins.isotune_launcher.stopping")
    logger.addHandler(handler)
    try:
        with pytest.raises(SystemExit) as stopped:
            sweeper.sweep([arg for arg in typed if not arg.lstrip("+").startswith("hydra.")])
    finally:
        logger.removeHandler(handler)
    assert stopped.value.code == code
    assert expect_runs or not list(tmp_path.rglob("results.json"))  # none but the test's own
    return "\n".join(messages)
