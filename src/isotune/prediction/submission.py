"""A GLUE submission from a sweep or a study: each task's chosen run predicts the test set, and
the files go into one folder and a zip for the server (``python -m isotune.submission``).

The chosen run (:data:`STUDY_RULE`, :data:`SWEEP_RULE`) is the best dev score's seed of the
chosen arm's tuned configuration (a study) or of the configuration with the best median (other
folders), which makes that dev score optimistic; the server's test score is not. A chosen run
that kept no model is named with the command that trains it again keeping one; a task of one's
own data is skipped with a line saying so. Every input is checked before any file is written.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from isotune.atomic_files import write_atomically, write_text
from isotune.data.glue_format import ALL_FILES, FILE_NAMES
from isotune.data.tasks import task_kind
from isotune.errors import IsotuneError
from isotune.prediction.run import SUMMARY_FILE, check_inputs, predict_run
from isotune.record.debug_runs import debug_description, debug_line
from isotune.record.kept_checkpoint import command_keeping_a_model
from isotune.record.results import RESULTS_FILE
from isotune.study.results import read_study
from isotune.sweeps.comparisons import Configuration, Configurations, baseline_values
from isotune.sweeps.runs import Run, find_sweeps, load_runs, search_parts

ZIP_FILE = "submission.zip"
RECORD_FILE = "submission.json"
STUDY_RULE = (
    "study arm {arm}: its tuned configuration on the held-out report seeds; the seed whose run "
    "has the best dev score (ties: the lowest seed)"
)
SWEEP_RULE = (
    "the configuration with the best median dev score over its seeds, then its seed with the "
    "best dev score (ties: the lowest seed)"
)


@dataclass(frozen=True)
class Chosen:
    """A task's chosen run: its folder and record, its configuration's name and dev score."""

    task: str
    job_dir: Path
    result: dict[str, Any]
    configuration: str
    score: float

    @property
    def checkpoint(self) -> Path | None:
        """Its best.ckpt, looked for in its own folder (a folder moved elsewhere still has it);
        None where the run kept no model."""
        recorded = self.result.get("best_checkpoint")
        file = self.job_dir / "checkpoints" / Path(recorded).name if recorded else None
        return file if file is not None and file.is_file() else None

    @property
    def seed(self) -> Any:
        return self.result.get("seed")

    @property
    def own_data(self) -> bool:
        """Whether its task is one of your own data (``task=files``): as its run's config says
        (``.hydra/config.yaml``), else its overrides, else a task GLUE's server does not score."""
        config = self.job_dir / ".hydra" / "config.yaml"
        if config.is_file():
            task = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("task") or {}
            return task_kind(task).own_data
        return "task=files" in (self.result.get("overrides") or ()) or self.task not in FILE_NAMES


def choose_runs(folder: Path, arm: str | None = None) -> tuple[list[Chosen], str]:
    """Each task's chosen run in ``folder`` and the rule that chose it (module docstring)."""
    folder = Path(folder)
    if not folder.is_dir() or not any(folder.rglob(RESULTS_FILE)):
        raise IsotuneError(
            f"{folder} holds no run (no {RESULTS_FILE} in it or below it). Fix: pass the folder "
            "of a sweep (logs/multirun/<sweep>), a search (logs/search/<search>) or a study "
            "(logs/study/<study>)."
        )
    study = read_study(folder)
    if study is not None:
        return _study_choices(folder, study, arm), STUDY_RULE.format(arm=arm or study.baseline)
    if arm is not None:
        raise IsotuneError(
            f"--arm {arm} chooses an arm of a study, but {folder} is not a study's folder (its "
            "multirun.yaml is not the study sweeper's). Fix: drop --arm, or pass the study's "
            "folder."
        )
    return _sweep_choices(folder), SWEEP_RULE


def _study_choices(folder: Path, study: Any, arm: str | None) -> list[Chosen]:
    """The chosen arm's best held-out run of each task; a study's records name their runs
    relative to the study folder, so that a carried folder still finds them."""
    arms = sorted({outcome.arm for outcome in study.outcomes})
    chosen_arm = arm or study.baseline
    if chosen_arm not in arms:
        raise IsotuneError(
            f"The study has no arm {chosen_arm!r}; its arms are {', '.join(arms)}. Fix: --arm "
            "<one of them> (the baseline arm by default)."
        )
    choices = []
    for outcome in study.outcomes:
        scored = [run for run in outcome.held_out if run.score is not None]
        if outcome.arm != chosen_arm or not scored:
            continue
        best = max(scored, key=lambda run: (run.score if study.maximize else -run.score, -run.seed))
        job_dir = folder / best.job_dir
        record = Run.read(job_dir / RESULTS_FILE).result
        name = " ".join(f"{key}={value}" for key, value in outcome.best_params.items())
        choices.append(Chosen(outcome.task, job_dir, record, name, best.score))
    return choices


def _sweep_choices(folder: Path) -> list[Chosen]:
    runs = [run for run in search_parts(load_runs(folder), find_sweeps(folder)) if run.completed]
    configurations = Configurations.of((Configuration.of(run) for run in runs), baseline_values())
    groups: dict[tuple[str, Configuration], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.field("task"), Configuration.of(run)), []).append(run)
    choices = []
    for task in sorted({task for task, _ in groups}):
        candidates = {config: rs for (t, config), rs in groups.items() if t == task}
        config = max(candidates, key=lambda c: statistics.median(map(_score, candidates[c])))
        best = max(candidates[config], key=lambda run: (_score(run), -int(run.field("seed"))))
        name = configurations.name(config)
        choices.append(Chosen(task, best.job_dir, best.result, name, _score(best)))
    return choices


def _score(run: Run) -> float:
    return float(run.field("best")[run.field("primary_metric")])


def write_submission(
    folder: Path,
    out: Path,
    glue_dir: str | None,
    arm: str | None = None,
    accelerator: str = "auto",
) -> dict[str, Any]:
    """Choose, check everything, then predict each chosen run into ``out`` and zip the files;
    return (and write) ``submission.json``."""
    choices, rule = choose_runs(folder, arm)
    predicting, untrained = [], []
    skipped = [chosen for chosen in choices if chosen.own_data]
    for chosen in choices:
        if chosen.own_data:
            continue
        if chosen.checkpoint is None:
            untrained.append(chosen)
            continue
        try:
            kept, files = check_inputs(
                str(chosen.checkpoint), chosen.task, glue_dir, out, dev=False
            )
        except IsotuneError as error:
            raise IsotuneError(
                f"The chosen {chosen.task} run in {chosen.job_dir}: {error}"
            ) from None
        predicting.append((chosen, kept, files))
    if not predicting:
        raise IsotuneError(_nothing_to_predict(folder, untrained, skipped))
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    predicted = {}  # predictions.json: each task's, as predict.py writes one
    for chosen, kept, files in predicting:
        predicted[chosen.task] = predict_run(kept, files, out, glue_dir, accelerator, dev=False)
        written.update({file.name: chosen.task for file in files})
    write_text(out / SUMMARY_FILE, json.dumps(predicted, indent=2) + "\n")
    with_files = [name for name in ALL_FILES if name in written]
    write_atomically(out / ZIP_FILE, partial(_zip, out, with_files))
    record = {
        "folder": str(Path(folder).resolve()),
        "rule": rule,
        "chosen": [_described(chosen) for chosen, _, _ in predicting],
        "kept_no_model": [
            {**_described(chosen), "train_again": command_keeping_a_model(chosen.result)}
            for chosen in untrained
        ],
        "skipped": [{**_described(chosen), "why": _why_skipped(chosen.task)} for chosen in skipped],
        "files": with_files,
        "lacking": [name for name in ALL_FILES if name not in written],
        "debug": debug_line([debug_description(chosen.result) for chosen in choices]),
        "zip": str(out / ZIP_FILE),
    }
    write_text(out / RECORD_FILE, json.dumps(record, indent=2) + "\n")
    return record


def _zip(out: Path, names: Sequence[str], file: Any) -> None:
    """The submission's files at the zip's root, as the server takes them (no sidecars)."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in names:
            archive.write(out / f"{name}.tsv", arcname=f"{name}.tsv")


def _described(chosen: Chosen) -> dict[str, Any]:
    return {
        "task": chosen.task,
        "run": str(chosen.job_dir),
        "configuration": chosen.configuration,
        "seed": chosen.seed,
        "dev_score": chosen.score,
    }


def _why_skipped(task: str) -> str:
    return (
        f"task {task} is your own data (task=files), which GLUE's server does not score; its "
        f"run writes its test predictions (predictions/{task}.tsv) with "
        "write_test_predictions=true and data.test_file=..., and python predict.py "
        "ckpt_path=<run>/checkpoints/best.ckpt test_file=<file> predicts any file later"
    )


def _nothing_to_predict(
    folder: Path, untrained: Sequence[Chosen], skipped: Sequence[Chosen]
) -> str:
    if skipped and not untrained:
        return (
            f"{folder} holds no GLUE task to submit: "
            + "; ".join(_why_skipped(chosen.task) for chosen in skipped)
            + ". Fix: pass the folder of runs on GLUE's tasks."
        )
    if not untrained:
        return (
            f"{folder} holds no completed run to submit (failed, interrupted or unfinished "
            "runs only). Fix: complete its runs (python -m isotune.rerun <folder>), then try again."
        )
    return (
        f"The runs chosen in {folder} kept no model to predict with (checkpoint.keep=none, as a "
        "study's runs do). Fix: train each again keeping its best model, then predict with "
        "python predict.py ckpt_path=<its folder>/checkpoints/best.ckpt:\n"
        + "\n".join(f"  {c.task}: {command_keeping_a_model(c.result)}" for c in untrained)
    )


def report_text(record: dict[str, Any]) -> str:
    """What the command prints: the rule, each task's run, what is lacking, the zip."""
    lines = [f"Each task's run: {record['rule']}."]
    if record["debug"]:
        lines.append(record["debug"])
    for chosen in record["chosen"]:
        lines.append(
            f"  {chosen['task']}: {chosen['configuration']} seed {chosen['seed']} (dev "
            f"{chosen['dev_score']:.4f}), {chosen['run']}"
        )
    for chosen in record["kept_no_model"]:
        lines.append(
            f"  {chosen['task']}: its chosen run {chosen['run']} (seed {chosen['seed']}) kept no "
            f"model (checkpoint.keep=none); to submit it, train exactly that run again keeping "
            f"one: {chosen['train_again']}, then python predict.py "
            "ckpt_path=<its folder>/checkpoints/best.ckpt"
        )
    for chosen in record["skipped"]:
        lines.append(f"  {chosen['task']}: skipped, {chosen['why']}")
    if record["lacking"]:
        lines.append(
            f"Lacking (no run predicted them; GLUE's server wants all {len(ALL_FILES)} files in "
            f"a submission): {', '.join(record['lacking'])}."
        )
    lines.append(f"Wrote {', '.join(record['files'])} and {record['zip']}.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m isotune.submission",
        description="GLUE's submission files (and a zip) from each task's chosen run of a sweep "
        "or study folder, with a sidecar per file saying where it came from.",
    )
    parser.add_argument("folder", type=Path, help="a sweep, search or study folder")
    parser.add_argument("--arm", help="a study's arm to submit (default: its baseline arm)")
    parser.add_argument(
        "--out", type=Path, help="output folder (default: logs/submission/<date>_<time>)"
    )
    parser.add_argument(
        "--glue-dir",
        default=os.environ.get("GLUE_DIR"),
        help="GLUE in the official layout (default: $GLUE_DIR; unset: the Hugging Face Hub)",
    )
    parser.add_argument("--accelerator", default="auto", help="Lightning's: auto, cpu, gpu")
    args = parser.parse_args(argv)
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    out = args.out or Path("logs") / "submission" / stamp
    try:
        record = write_submission(args.folder, out, args.glue_dir, args.arm, args.accelerator)
    except IsotuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(report_text(record))
    return 0
