"""Measure the isotropy of the embedding space before training and after every validation epoch.

On a fixed probe set (a seeded subset of the dev split, the same in every epoch and in every run
with the same seed) it collects the sentence vector before the norm (``pre_norm``) and after it
(``post_norm``, the classifier's input), and optionally token vectors of chosen layers, in one
no-grad pass of the eval path (:func:`isotune.isotropy.vectors.collect_views`). Every scalar of
:func:`isotune.isotropy.measure_all` is logged as ``iso/<view>/<metric>`` with the epoch (epoch
0 = the pre-trained geometry), figures are saved under ``<output_dir>/isotropy/`` and sent to
W&B / TensorBoard, and the per-epoch values are kept in checkpoints and returned for
``results.json``. Views, settings and measures: ``docs/isotropy.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Subset

from isotune.isotropy import measure_all
from isotune.isotropy.figures import save_geometry_figure
from isotune.isotropy.vectors import SENTENCE_VIEWS, SentenceViews, collect_views

log = logging.getLogger(__name__)


class IsotropyMonitor(L.Callback):
    """Isotropy of the sentence vectors (and token vectors of ``token_layers``) per epoch.

    Args:
        probe_size: dev examples in the probe set (all of them when the split is smaller).
        seed: chooses the probe set; the run's seed by default in the config.
        token_layers: hidden-state indices (0 = embeddings, -1 = last layer) whose token vectors
            (special tokens and padding excluded) are measured too; empty: sentence level only.
        max_tokens: token vectors per layer, sampled with ``seed`` (the same tokens every epoch).
        local_k: also measure local isotropy with this many k-means clusters (None: skip).
        dominant_factor: a direction is dominant when its variance exceeds this times the mean.
        figures: save (and log) the std / correlation / spectrum figures every epoch.
        output_dir: where figures go (``<output_dir>/isotropy``).
    """

    def __init__(
        self,
        probe_size: int = 1000,
        seed: int = 0,
        token_layers: Sequence[int] = (),
        max_tokens: int = 10_000,
        local_k: int | None = None,
        dominant_factor: float = 10.0,
        figures: bool = True,
        output_dir: str | None = None,
    ) -> None:
        self.probe_size = probe_size
        self.seed = seed
        self.token_layers = tuple(token_layers)
        self.max_tokens = max_tokens
        self.local_k = local_k
        self.dominant_factor = dominant_factor
        self.figures = figures
        self.output_dir = Path(output_dir) if output_dir else None
        self.history: dict[int, dict[str, float]] = {}  # epoch -> {"iso/<view>/<metric>": value}
        self.timings: dict[int, float] = {}  # epoch -> seconds the measurement took
        self._probe: DataLoader | None = None

    # -- hooks ----------------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if 0 not in self.history:  # not again when resuming
            self._measure(trainer, module, epoch=0)

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self._measure(trainer, module, epoch=trainer.current_epoch + 1)

    def state_dict(self) -> dict:
        return {"history": self.history, "timings": self.timings}

    def load_state_dict(self, state_dict: dict) -> None:
        self.history = {int(epoch): values for epoch, values in state_dict["history"].items()}
        self.timings = {int(epoch): s for epoch, s in state_dict.get("timings", {}).items()}

    # -- measuring ------------------------------------------------------------------------------
    def probe_loader(self, trainer: L.Trainer) -> DataLoader:
        """The fixed probe set: a seeded subset of the primary dev split, shortest first."""
        if self._probe is None:
            datamodule = trainer.datamodule
            dataset = datamodule.dataset(datamodule.task.primary_split)
            generator = torch.Generator().manual_seed(self.seed)
            chosen = torch.randperm(len(dataset), generator=generator)[: self.probe_size]
            chosen = sorted(chosen.tolist(), key=lambda i: dataset.lengths[i])
            self._probe = DataLoader(
                Subset(dataset, chosen),
                batch_size=datamodule.eval_batch_size,
                collate_fn=datamodule.collate,
            )
        return self._probe

    def collect(self, trainer: L.Trainer, module: L.LightningModule) -> dict[str, Tensor]:
        """Probe vectors per view: ``pre_norm``, ``post_norm`` and ``layer<i>_tokens``."""
        special_ids = torch.tensor(trainer.datamodule.tokenizer.all_special_ids)

        def tokens(
            batch: Mapping[str, Tensor], views: SentenceViews, start: int
        ) -> dict[str, Tensor]:
            ids = batch["input_ids"]
            real = batch["attention_mask"].bool() & ~torch.isin(ids, special_ids.to(ids.device))
            return {
                f"layer{layer}_tokens": views.hidden_states[layer][real]
                for layer in self.token_layers
            }

        collected = collect_views(
            module,
            self.probe_loader(trainer),
            hidden_states=bool(self.token_layers),
            extra=tokens if self.token_layers else None,
        )
        generator = torch.Generator().manual_seed(self.seed)
        for view, points in collected.items():
            if view not in SENTENCE_VIEWS and len(points) > self.max_tokens:
                keep = torch.randperm(len(points), generator=generator)[: self.max_tokens]
                collected[view] = points[keep.sort().values]
        return collected

    def _measure(self, trainer: L.Trainer, module: L.LightningModule, epoch: int) -> None:
        if not trainer.is_global_zero:
            return  # the probe is small: one process measures it
        start = time.perf_counter()
        values: dict[str, float] = {}
        for view, points in self.collect(trainer, module).items():
            measures = measure_all(
                points, dominant_factor=self.dominant_factor, local_k=self.local_k, seed=self.seed
            )
            values.update({f"iso/{view}/{name}": value for name, value in measures.items()})
            if self.figures and view in SENTENCE_VIEWS:
                self._figure(trainer, points, view, epoch)
        self.history[epoch] = values
        self.timings[epoch] = time.perf_counter() - start
        for logger in trainer.loggers:
            logger.log_metrics({**values, "iso/epoch": epoch}, step=trainer.global_step)
        log.info(
            "Isotropy at epoch %d (%.1fs): %s",
            epoch,
            self.timings[epoch],
            ", ".join(f"{view} I(W)={values[f'iso/{view}/iw']:.3g}" for view in SENTENCE_VIEWS),
        )

    def _figure(self, trainer: L.Trainer, points: Tensor, view: str, epoch: int) -> None:
        folder = (self.output_dir or Path(trainer.default_root_dir)) / "isotropy"
        path = save_geometry_figure(
            points,
            f"{view} sentence vectors, epoch {epoch}",
            folder / f"{view}_epoch{epoch:02d}.png",
        )
        for logger in trainer.loggers:
            if hasattr(logger, "log_image"):  # W&B
                logger.log_image(
                    key=f"iso/{view}/figure", images=[str(path)], step=trainer.global_step
                )

    # -- results --------------------------------------------------------------------------------
    def summary(self, best_epoch: int | None) -> dict:
        """Pre-trained, best-epoch and final values, plus every epoch, for ``results.json``."""
        if not self.history:
            return {}
        final = max(self.history)
        return {
            "pretrained": self.history.get(0, {}),
            "best": self.history.get(best_epoch, {}) if best_epoch is not None else {},
            "final": self.history[final],
            "per_epoch": {str(epoch): values for epoch, values in sorted(self.history.items())},
            "seconds": round(sum(self.timings.values()), 2),
        }
