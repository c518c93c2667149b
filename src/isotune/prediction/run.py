"""One run's kept model on the dev and test sets: ``predict.py``, top to bottom.

1. read the checkpoint as data and check everything (:func:`check_inputs`) before anything is
   written: its run folder, that it is the project's and of the typed task, the data files, and
   that the output folder lies outside the run's (a run folder stays as its run left it);
2. build the model with the run's own settings (:mod:`.kept_model`) and score the dev set as
   validation does in training (the same batches, the same metrics), beside the scores the run
   recorded for these weights;
3. predict each test file in GLUE's submission format (:mod:`.glue_format`), each with a sidecar
   saying where it came from (the run, its commit, the checkpoint's sha256);
4. write ``predictions.json``: the dev scores, the recorded ones and the largest difference.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from isotune.atomic_files import write_text
from isotune.data import HUB_DATASET, GLUEDataModule, TokenizedDataset, load_split, split_file
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.file_digest import file_sha256
from isotune.model.encoders import load_tokenizer
from isotune.prediction.glue_format import SubmissionFile, submission_files, submission_text
from isotune.prediction.kept_model import KeptModel, read_kept_model
from isotune.training.hydra_callbacks import stop

log = logging.getLogger(__name__)
SUMMARY_FILE = "predictions.json"
SIDECAR_SUFFIX = ".source.json"  # beside each prediction file: <NAME>.tsv.source.json


def predict(cfg: DictConfig) -> dict[str, Any]:
    """Score the dev set and write the test predictions as ``cfg`` (``conf/predict.yaml``) says;
    return (and write) ``predictions.json``."""
    output_dir = Path(cfg.paths.output_dir)
    kept, files = check_inputs(
        cfg.ckpt_path, typed_task(cfg), cfg.paths.glue_dir, output_dir, dev=cfg.dev, test=cfg.test
    )
    return predict_run(kept, files, output_dir, cfg.paths.glue_dir, cfg.accelerator, dev=cfg.dev)


def typed_task(cfg: DictConfig) -> str | None:
    """The task typed on the command line (``task=rte`` selects ``conf/task/rte.yaml``), None
    when none was: the checkpoint's task is then the one predicted."""
    return OmegaConf.select(cfg, "task.name", default=None)


def check_inputs(
    ckpt_path: str | None,
    task: str | None,
    glue_dir: str | None,
    output_dir: Path,
    dev: bool = True,
    test: bool = True,
) -> tuple[KeptModel, list[SubmissionFile]]:
    """The checkpoint, read and checked, and the submission files to write; one
    :class:`IsotuneError` naming the fix for the first thing that would stop the run."""
    kept = read_kept_model(ckpt_path, task)
    check_outside_run_folder(output_dir, kept.run_folder)
    files = submission_files(kept.task) if test else []
    if glue_dir is not None:
        for split in kept.task.eval_splits if dev else ():
            _check_data_file(kept.task, split, glue_dir, "the dev set scored")
        for file in files:
            _check_data_file(
                file.spec, file.spec.test_split, glue_dir, f"read for {file.file_name}"
            )
    return kept, files


def check_outside_run_folder(output_dir: Path, run_folder: Path) -> None:
    if output_dir.resolve().is_relative_to(run_folder.resolve()):
        raise IsotuneError(
            f"The output folder {output_dir} lies inside the run folder {run_folder}, which "
            "stays as its run left it. Fix: leave hydra.run.dir unset (logs/predict/<stamp>/), "
            "or set it to a folder outside the run's."
        )


def _check_data_file(spec: TaskSpec, split: str, glue_dir: str, what: str) -> None:
    path = split_file(spec, split, glue_dir)
    if not path.is_file():
        raise IsotuneError(
            f"GLUE_DIR={glue_dir} has no {spec.glue_dir}/{spec.files[split]} (the {split} split "
            f"of task {spec.name}, {what}). Fix: put the official GLUE file there (the layout of "
            "GLUE's download script), or point GLUE_DIR (or paths.glue_dir) at a folder that "
            "has it; test=false scores the dev set only, dev=false predicts the test set only."
        )


def predict_run(
    kept: KeptModel,
    files: Sequence[SubmissionFile],
    output_dir: Path,
    glue_dir: str | None,
    accelerator: str = "auto",
    dev: bool = True,
) -> dict[str, Any]:
    """The dev scores and the test files of one kept model, written into ``output_dir``."""
    model = kept.build()
    tokenizer = load_tokenizer(kept.checkpoint["hyper_parameters"]["model"]["name_or_path"])
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=kept.precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    source = kept.source()
    summary: dict[str, Any] = {"source": source, "dev": None, "files": {}}
    if dev:
        summary["dev"] = dev_scores(trainer, model, kept, tokenizer, glue_dir)
    collate = DataCollatorWithPadding(tokenizer)
    for file in files:
        examples = load_split(file.spec, file.spec.test_split, glue_dir)
        dataset = TokenizedDataset(examples, file.spec, tokenizer, kept.max_length)
        loader = DataLoader(dataset, batch_size=kept.eval_batch_size, collate_fn=collate)
        batches = trainer.predict(model, dataloaders=loader)
        indices = torch.cat([index for index, _ in batches]).tolist()
        predicted = torch.cat([prediction for _, prediction in batches]).tolist()
        text = submission_text(file, zip(indices, predicted, strict=True))
        path = write_text(output_dir / file.file_name, text)
        sidecar = {
            "file": file.file_name,
            "sha256": file_sha256(path),
            "rows": len(indices),
            "test_data": _test_source(file, glue_dir),
            **source,
            "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        write_text(path.with_name(path.name + SIDECAR_SUFFIX), json.dumps(sidecar, indent=2) + "\n")
        summary["files"][file.file_name] = len(indices)
        log.info("%s: %d test predictions written to %s", file.name, len(indices), path)
    write_text(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def dev_scores(
    trainer: L.Trainer, model: Any, kept: KeptModel, tokenizer: Any, glue_dir: str | None
) -> dict[str, Any]:
    """Every dev split scored as validation scores it in training (the data module's batches,
    the module's own metrics), the run's recorded scores of these weights, and the largest
    difference between the two on the primary split."""
    task = kept.task
    datamodule = GLUEDataModule(
        task,
        tokenizer,
        glue_dir=glue_dir,
        max_length=kept.max_length,
        eval_batch_size=kept.eval_batch_size,
    )
    trainer.validate(model, datamodule=datamodule, verbose=False)
    logged = trainer.callback_metrics
    scores = {}
    for split in task.eval_splits:
        prefix = f"{task.log_prefix(split)}/"
        scores[split] = {
            key.removeprefix(prefix): float(value)
            for key, value in logged.items()
            if key.startswith(prefix)
        }
    recorded = kept.recorded_dev
    primary = scores[task.primary_split]
    shared = [key for key in primary if key in recorded]
    difference = max((abs(primary[key] - recorded[key]) for key in shared), default=None)
    for split, values in scores.items():
        log.info("dev %s: %s", split, _shown(values))
    log.info("recorded for these weights (epoch %s): %s", recorded.get("epoch"), _shown(recorded))
    return {"scores": scores, "recorded": recorded, "largest_difference": difference}


def _shown(values: Mapping[str, float]) -> str:
    return ", ".join(f"{key} {value:.6f}" for key, value in values.items() if key != "step")


def _test_source(file: SubmissionFile, glue_dir: str | None) -> dict[str, Any]:
    """The test file read, with its sha256; or the Hub data set and split."""
    spec = file.spec
    if glue_dir is None:
        return {"hub": f"{HUB_DATASET}/{spec.hub_config}", "split": spec.test_split}
    path = split_file(spec, spec.test_split, glue_dir)
    return {"path": str(path.resolve()), "sha256": file_sha256(path)}


class InputsChecked(Callback):
    """``predict.py``'s inputs checked before Hydra makes the output folder: a refused
    checkpoint, task or data file is one message, and nothing is written anywhere."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_inputs(
                config.ckpt_path,
                typed_task(config),
                config.paths.glue_dir,
                Path(str(config.hydra.run.dir)),
                dev=config.dev,
                test=config.test,
            )
        except IsotuneError as error:
            stop(str(error))
