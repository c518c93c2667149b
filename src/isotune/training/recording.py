"""A run's record as it trains, in results.json and in every checkpoint: what it fits once the
trainer is built (parameters, data, the scored dev examples' trivial predictor, provenance), the
results so far every epoch, and what its end records and says."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig

from isotune.callbacks.isotropy import IsotropyMonitor
from isotune.data import GLUEDataModule
from isotune.model.adaptation import parameter_counts
from isotune.model.classifier import GLUEClassifier
from isotune.record.checkpoint_reading import CONFIG_KEY, OVERRIDES_KEY, PROVENANCE_KEY, RECORD_KEY
from isotune.record.results import RunRecord
from isotune.record.same_run import run_config
from isotune.training.cli import run_overrides
from isotune.training.run_provenance import run_provenance
from isotune.training.trivial import TrivialScore, failure_record, trivial_score

log = logging.getLogger(__name__)


class RecordEveryEpoch(L.Callback):
    """Rewrites results.json every epoch end, so that a job killed without a chance to record its
    end (SIGKILL) is told from a slow one by ``updated_at``, and keeps it (with the resolved config,
    overrides and provenance) in every checkpoint, so a lost results.json is rebuilt on resume. It
    holds the run's model and trainer from :meth:`start` on, for the end to judge."""

    def __init__(self, record: RunRecord, cfg: DictConfig) -> None:
        self.record = record
        self.cfg = cfg
        self.margin = cfg.failure.margin
        self.config = run_config(cfg)
        self.overrides = run_overrides()
        self.provenance: dict[str, Any] = {}
        self.trivial: TrivialScore | None = None
        self.model: GLUEClassifier | None = None
        self.trainer: L.Trainer | None = None

    def start(
        self,
        model: GLUEClassifier,
        datamodule: GLUEDataModule,
        trainer: L.Trainer,
        warnings: list[str],
    ) -> dict[str, int | float]:
        """Record what the run fits once its trainer is built (``warnings``: its data's, logged
        here) and its provenance; return its parameter counts. The trivial predictor is of the
        examples validation scores: under ``limit_val_batches`` (debug=limit) the longest few,
        whose majority need not be the whole split's."""
        self.model, self.trainer = model, trainer
        parameters = parameter_counts(model)
        for warning in warnings:
            log.warning(warning)
        self.record.update(parameters=parameters, data=datamodule.data_record(), warnings=warnings)
        log.info(
            "adapt=%s: %d of %d parameters train (%.3g%%)",
            model.adaptation,
            parameters["trainable"],
            parameters["total"],
            100 * parameters["trainable_fraction"],
        )
        split = model.task.primary_split
        scored = scored_examples(datamodule, split, trainer)
        labels = datamodule.dataset(split).labels
        self.trivial = trivial_score(model.task, [labels[i] for i in scored]) if scored else None
        self.record.update(
            dev_examples={"scored": len(scored), "of": len(labels)},
            **(failure_record(self.trivial, self.margin, {}) if self.trivial else {}),
        )
        self.provenance = run_provenance(self.cfg, model, trainer)
        self.record.note_provenance(self.provenance)
        return parameters

    def outcome(self) -> dict[str, Any]:
        """Best-epoch and final dev metrics, whether the best beat the trivial predictor by the
        margin, isotropy, history and step count, as far as they exist."""
        model, trainer = self.model, self.trainer
        history = model.history if model is not None else []
        best = model.best_epoch() if model is not None else None
        callbacks = trainer.callbacks if trainer is not None else []
        monitor = next((c for c in callbacks if isinstance(c, IsotropyMonitor)), None)
        trivial = self.trivial
        return {
            "best_epoch": best["epoch"] if best else None,
            "best": _metrics_only(best) if best else {},
            **(failure_record(trivial, self.margin, best or {}) if trivial is not None else {}),
            "final": _metrics_only(history[-1]) if history else {},
            "history": history,
            "isotropy": monitor.summary(best["epoch"] if best else None) if monitor else {},
            "steps": trainer.global_step if trainer is not None else 0,
            "best_checkpoint": best_checkpoint(trainer),
        }

    def on_train_epoch_end(self, trainer: L.Trainer, module: GLUEClassifier) -> None:
        self.record.update(**self.outcome())

    def on_save_checkpoint(self, trainer: L.Trainer, module: GLUEClassifier, checkpoint: dict):
        """The record so far, as JSON data (what results.json holds), to rebuild it from."""
        checkpoint[CONFIG_KEY] = self.config
        checkpoint[OVERRIDES_KEY] = self.overrides
        checkpoint[PROVENANCE_KEY] = self.provenance
        checkpoint[RECORD_KEY] = json.loads(json.dumps(self.record.results, default=str))


def scored_examples(datamodule: GLUEDataModule, split: str, trainer: L.Trainer) -> list[int]:
    """The examples of ``split`` that validation scores, in index order: on each process, the
    first batches of its share of the length-sorted batches (:meth:`GLUEDataModule.eval_batches`)
    that the trainer's ``limit_val_batches`` keeps, by Lightning's rule (an int: that many
    batches; a fraction: that share, rounded down). All of them by default; under ``debug=limit``
    (2 batches) the longest 2 x ``data.eval_batch_size``."""
    limit, processes = trainer.limit_val_batches, trainer.world_size
    scored = []
    for rank in range(processes):
        batches = list(datamodule.eval_batches(split, processes, rank))
        kept = min(len(batches), limit) if isinstance(limit, int) else int(len(batches) * limit)
        scored += [index for batch in batches[:kept] for index in batch]
    return sorted(scored)


def best_checkpoint(trainer: L.Trainer | None) -> str | None:
    """The path of the monitored checkpoint (best.ckpt), not of the every-epoch last.ckpt."""
    callbacks = trainer.checkpoint_callbacks if trainer is not None else []
    monitored = [callback for callback in callbacks if callback.monitor is not None]
    best = monitored[0].best_model_path if monitored else ""
    return best if best and Path(best).is_file() else None  # checkpoint.keep=none removes it


def summary_line(results: dict[str, Any]) -> str:
    """The run's outcome in one line: the best dev score, the trivial predictor's, the verdict."""
    metric, trivial = results["primary_metric"], results.get("trivial")
    best = results["best"].get(metric)
    shown = "none" if best is None else f"{best:.4f} (epoch {results['best_epoch']})"
    if trivial is None:  # limit_val_batches=0: no dev example scored
        return f"Best dev {metric}: {shown}; no dev example scored, so no verdict"
    verdict = {True: "learned", False: "FAILED TO LEARN", None: "no verdict"}[results["learned"]]
    return (
        f"Best dev {metric}: {shown}; {trivial['predictor']}: {trivial['score']:.4f}; "
        f"{verdict} (margin {results['margin']:g})"
    )


def _metrics_only(entry: dict[str, float]) -> dict[str, float]:
    return {key: value for key, value in entry.items() if key not in ("epoch", "step")}
