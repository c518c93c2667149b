"""Measure the isotropy of the embedding space before training and after every validation epoch.

On a fixed, seeded probe subset of the dev split it measures the sentence vector before the norm
(``pre_norm``) and after it (``post_norm``, the classifier's input), and optionally token vectors
of chosen layers. The vectors come from validation itself (forward hooks, :mod:`.probe_capture`);
only what validation did not encode runs in a pass of its own (all of the probe at epoch 0, the
rest under ``limit_val_batches``, ``debug=limit`` or sharded validation). Measures are logged as
``iso/<view>/<metric>`` with the epoch (0 = the pre-trained geometry), with IsoScore* at the
library's default shrinkage target (one rule for every run, never a regularized run's own
Sigma_S); figures go under ``<output_dir>/isotropy/`` (:mod:`.profiles_and_figures`); per-epoch
values are kept in checkpoints and ``results.json``. Epoch 0 is shared within a sweep
(:mod:`isotune.callbacks.shared_pretrained`). Views, settings and measures: ``docs/isotropy.md``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch
from torch import Tensor

from isotune.callbacks.probe_capture import ProbeCapture, ProfileSampling
from isotune.callbacks.profiles_and_figures import ProfilesAndFigures
from isotune.callbacks.shared_pretrained import SharedPretrained, pretrained_key
from isotune.isotropy import OUTLIER_FACTOR, ROGUE_K, overlap
from isotune.isotropy.views import measure_view
from isotune.model.adaptation import eval_mode
from isotune.model.families import hidden_state_indices, num_layers
from isotune.tracking.metric_keys import ISO_EPOCH, SENTENCE_VIEWS, iso_key

log = logging.getLogger(__name__)

SHARED_FOLDER = ".pretrained_isotropy"  # under the sweep's folder: epoch 0's shared measures


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread for the measures: on the sentence views two threads gain nothing, and
    with more busy threads than cores (a sweep's parallel jobs) the thread pool's barriers made
    them 10x slower, 100x on first use. A 10,000-token view pays: 1.2 s instead of 0.8 s."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class IsotropyMonitor(ProfilesAndFigures, L.Callback):
    """Isotropy of the sentence vectors (and token vectors of ``token_layers``) per epoch. Each
    argument is a key of ``conf/callbacks/isotropy`` (docs/isotropy.md's settings table).
    ``shared_dir``: the sweep's folder; where it exists (a run alone names one that does not), one
    job measures epoch 0 into its :data:`SHARED_FOLDER` and the others with the same weights, probe
    batches and settings read its numbers; None: every run measures."""

    def __init__(
        self,
        probe_size: int = 1000,
        seed: int = 0,
        token_layers: Sequence[int] = (),
        max_tokens: int = 10_000,
        local_k: int | None = None,
        dominant_factor: float = 10.0,
        outlier_factor: float = OUTLIER_FACTOR,
        rogue_k: int = ROGUE_K,
        figures: bool = True,
        output_dir: str | None = None,
        layer_profiles: bool = False,
        profile_tokens: int = 2000,
        shared_dir: str | None = None,
    ) -> None:
        self.probe_size = probe_size
        self.seed = seed
        self.token_layers = tuple(token_layers)
        self.max_tokens = max_tokens
        self.local_k = local_k
        self.dominant_factor = dominant_factor
        self.outlier_factor = outlier_factor
        self.rogue_k = rogue_k
        self.figures = figures
        self.output_dir = Path(output_dir) if output_dir else None
        self.layer_profiles = layer_profiles
        self.profile_tokens = profile_tokens
        self.shared_dir = Path(shared_dir) if shared_dir else None
        self.history: dict[int, dict[str, float]] = {}  # epoch -> {"iso/<view>/<metric>": value}
        self.timings: dict[int, float] = {}  # epoch -> seconds the measurement took
        self.outliers: dict[int, dict[str, list[int]]] = {}  # epoch -> {view: outlier dimensions}
        self.massive: dict[int, list[dict]] = {}  # epoch -> per layer: where its largest sit
        self._probe: list[int] | None = None
        self._capture: ProbeCapture | None = None  # attached during a measured validation

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        """Token layers the encoder has (its family's layer count), or one error before fitting."""
        layer_count = num_layers(module.encoder.config)
        hidden_state_indices(self.token_layers, layer_count, "callbacks.isotropy.token_layers")

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if 0 not in self.history and trainer.is_global_zero:  # not again when resuming
            self.measure_pretrained(trainer, module)

    def measure_pretrained(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """Epoch 0: the probe encoded by the pre-trained model and measured, or, in a sweep, the
        numbers another job measured with the same weights, probe batches and settings."""
        capture = self.new_capture(trainer.datamodule, module)
        shared = self.shared_measures()
        if shared is None:
            log.info("Isotropy at epoch 0: encoding the probe with the pre-trained model")
            self._measure(trainer, module, capture, epoch=0)
            return
        start = time.perf_counter()
        key = self.pretrained_key(trainer, module, capture)
        found = shared.read(key)
        if found is None:
            log.info("Isotropy at epoch 0: encoding the probe with the pre-trained model")
            figures = self._measure(trainer, module, capture, epoch=0)
            shared.write(key, self.history[0], self.outliers[0], self.massive.get(0, []), figures)
            return
        self.history[0], self.outliers[0] = found["values"], found["outliers"]
        if self.layer_profiles:
            self.massive[0] = found["massive"]
        for view, path in found["figures"].items():
            self._log_image(trainer, iso_key(view, "figure"), self._figure_copy(trainer, path))
        self.timings[0] = time.perf_counter() - start
        self._publish(trainer, 0, f"read from {shared.folder / key}, measured by another job")

    def shared_measures(self) -> SharedPretrained | None:
        """Where this run shares epoch 0's measures: None outside a sweep (module doc)."""
        if self.shared_dir is None or not self.shared_dir.is_dir():
            return None
        return SharedPretrained(self.shared_dir / SHARED_FOLDER)

    def pretrained_key(
        self, trainer: L.Trainer, module: L.LightningModule, capture: ProbeCapture
    ) -> str:
        """What epoch 0's numbers depend on, hashed (:func:`pretrained_key`): the weights the
        probe pass runs through (the encoder and the norm, as initialised), the padded batches
        it encodes and every setting of the measures."""
        weights = {
            f"{part}.{name}": tensor
            for part in ("encoder", "norm")
            for name, tensor in getattr(module, part).state_dict().items()
        }
        settings = {
            "probe_idx": capture.probe_idx.tolist(),
            "special_ids": capture.special_ids.tolist(),
            "pooling": module.pooling,
            "encoder_inputs": list(module.encoder_inputs),
            # the seed draws only token samples and k-means' start (the probe is probe_idx)
            "seed": self.seed if self.token_layers or self.local_k or self.layer_profiles else None,
            "token_layers": list(self.token_layers),
            "max_tokens": self.max_tokens,
            "local_k": self.local_k,
            "dominant_factor": self.dominant_factor,
            "outlier_factor": self.outlier_factor,
            "rogue_k": self.rogue_k,
            "figures": self.figures,
            "layer_profiles": self.layer_profiles,
            "profile_tokens": self.profile_tokens,
            "precision": str(trainer.precision),
            "device": module.device.type,
            "torch": torch.__version__,
        }
        return pretrained_key(weights, self.probe_batches(trainer, capture), settings)

    def on_validation_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        fitting = trainer.state.fn == "fit" and not trainer.sanity_checking
        if fitting and trainer.is_global_zero:  # the probe is small: one process measures it
            self._capture = self.new_capture(trainer.datamodule, module)
            self._capture.attach(module)

    def on_validation_batch_start(
        self,
        trainer: L.Trainer,
        module: L.LightningModule,
        batch: Mapping[str, Tensor],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._capture is not None:
            task = trainer.datamodule.task
            primary = task.eval_splits[dataloader_idx] == task.primary_split
            self._capture.select(batch["idx"] if primary else None)

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        capture, self._capture = self._capture, None
        if capture is not None:
            capture.detach()
            self._measure(trainer, module, capture, epoch=trainer.current_epoch + 1)

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """The layer profiles of every epoch in one figure (drawn once: 2 s of matplotlib)."""
        if self.figures and self.layer_profiles and trainer.is_global_zero:
            self._profile_figure(trainer)

    def on_exception(self, trainer: L.Trainer, module: L.LightningModule, exception) -> None:
        if self._capture is not None:
            self._capture.detach()
            self._capture = None

    def state_dict(self) -> dict:
        return {
            "history": self.history,
            "timings": self.timings,
            "outliers": self.outliers,
            "massive": self.massive,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self.history = {int(epoch): values for epoch, values in state_dict["history"].items()}
        self.timings = {int(epoch): s for epoch, s in state_dict.get("timings", {}).items()}
        self.outliers = {int(epoch): dims for epoch, dims in state_dict.get("outliers", {}).items()}
        self.massive = {int(epoch): found for epoch, found in state_dict.get("massive", {}).items()}

    def probe_indices(self, datamodule) -> list[int]:
        """The fixed probe set: seeded positions in the primary dev split, shortest first (ties
        in split order: a probe of the whole split is the same for every seed, and so are its
        measures, which a sweep's seeds then share)."""
        if self._probe is None:
            dataset = datamodule.dataset(datamodule.task.primary_split)
            generator = torch.Generator().manual_seed(self.seed)
            chosen = torch.randperm(len(dataset), generator=generator)[: self.probe_size]
            self._probe = sorted(chosen.tolist(), key=lambda i: (dataset.lengths[i], i))
        return self._probe

    def new_capture(self, datamodule, module: L.LightningModule) -> ProbeCapture:
        """An empty capture of the probe set (not attached)."""
        dataset = datamodule.dataset(datamodule.task.primary_split)
        probe = self.probe_indices(datamodule)
        profile = None
        if self.layer_profiles:
            profile = ProfileSampling(
                layers=num_layers(module.encoder.config) + 1,
                per_example=math.ceil(self.profile_tokens / len(probe)),
                seed=self.seed,
            )
        return ProbeCapture(
            [dataset[i]["idx"] for i in probe],
            datamodule.tokenizer.all_special_ids,
            self.token_layers,
            profile,
        )

    @torch.no_grad()
    def encode_missing(
        self, trainer: L.Trainer, module: L.LightningModule, capture: ProbeCapture
    ) -> int:
        """Encode the probe examples ``capture`` lacks as validation does: in eval mode, at the
        trainer's validation precision, each in its validation batch (the same padding, so on
        the CPU the same float32 vectors bit for bit). Returns how many were missing."""
        missing = len(capture.missing())
        batches = self.probe_batches(trainer, capture)
        capture.attach(module)
        try:
            with eval_mode(module), trainer.precision_plugin.val_step_context():
                for batch in batches:
                    batch = {key: value.to(module.device) for key, value in batch.items()}
                    capture.select(batch["idx"])
                    module(batch)
        finally:
            capture.detach()
        return missing

    def probe_batches(self, trainer: L.Trainer, capture: ProbeCapture) -> list[dict[str, Tensor]]:
        """The probe examples ``capture`` lacks, as validation pads them (each in its validation
        batch, only its rows kept), on the CPU."""
        missing = set(capture.missing())
        if not missing:
            return []
        datamodule = trainer.datamodule
        dataset = datamodule.dataset(datamodule.task.primary_split)
        probe = self.probe_indices(datamodule)
        wanted = {probe[position] for position in missing}
        batches = []
        for indices in datamodule.eval_batches(datamodule.task.primary_split):  # all ranks'
            rows = [row for row, index in enumerate(indices) if index in wanted]
            if rows:
                padded = datamodule.collate([dataset[index] for index in indices])
                batches.append({key: value[rows] for key, value in padded.items()})
        return batches

    def collect(
        self, trainer: L.Trainer, module: L.LightningModule, capture: ProbeCapture | None = None
    ) -> dict[str, Tensor]:
        """Probe vectors per view (``pre_norm``, ``post_norm``, ``layer<i>_tokens``): those
        ``capture`` holds, the rest encoded apart (all of them without a capture), on the
        module's device, where they are measured (:mod:`isotune.isotropy.views`)."""
        if capture is None:
            capture = self.new_capture(trainer.datamodule, module)
        self.encode_missing(trainer, module, capture)
        collected = capture.vectors()
        generator = torch.Generator().manual_seed(self.seed)
        for view in (f"layer{layer}_tokens" for layer in self.token_layers):
            points = collected[view]
            if len(points) > self.max_tokens:
                keep = torch.randperm(len(points), generator=generator)[: self.max_tokens]
                points = points[keep.sort().values]
            collected[view] = points.to(module.device)  # the sample is measured where it runs
        return collected

    def _measure(
        self, trainer: L.Trainer, module: L.LightningModule, capture: ProbeCapture, epoch: int
    ) -> dict[str, Path]:
        """Measure the probe's vectors (those ``capture`` holds and the rest), record and log
        them; returns the figures drawn, by view."""
        start = time.perf_counter() - capture.seconds  # the hooks' time during validation counts
        from_validation = int(capture.captured.sum())
        values: dict[str, float] = {}
        outliers: dict[str, list[int]] = {}
        figures: dict[str, Path] = {}
        collected = self.collect(trainer, module, capture)
        views = (*SENTENCE_VIEWS, *(f"layer{layer}_tokens" for layer in self.token_layers))
        if self.layer_profiles:
            # With the threads training runs with, not one: the token samples' neighbour searches
            # are large matmuls that two quiet cores halve (14 MiniLM clouds: 0.92-1.23 s against
            # 1.55-1.57 s), and a launcher running jobs side by side gives each its share already
            profiles, self.massive[epoch] = self.measure_profiles(collected, capture)
            values.update(profiles)
        with one_thread():
            for view, points in ((view, collected[view]) for view in views):
                measured = measure_view(
                    points,
                    dominant_factor=self.dominant_factor,
                    local_k=self.local_k,
                    seed=self.seed,
                    outlier_factor=self.outlier_factor,
                    rogue_k=self.rogue_k,
                )
                outliers[view] = list(measured.outliers.outliers.indices)
                pretrained = self.outliers.get(0, outliers)[view]  # epoch 0 compares with itself
                scalars = {
                    **measured.scalars,
                    "outliers_kept": float(len(overlap(pretrained, outliers[view]).kept)),
                }
                values.update({iso_key(view, name): value for name, value in scalars.items()})
                if self.figures and view in SENTENCE_VIEWS:
                    figures[view] = self._figure(trainer, measured.cloud, view, epoch)
        self.history[epoch] = values
        self.outliers[epoch] = outliers
        self.timings[epoch] = time.perf_counter() - start
        self._publish(
            trainer,
            epoch,
            f"{len(capture.captured)} probe examples, {from_validation} of them read from the "
            "validation pass, the rest encoded for the probe",
        )
        return figures

    def _publish(self, trainer: L.Trainer, epoch: int, source: str) -> None:
        """An epoch's values to the loggers (and the profile tables so far) and the log."""
        values = self.history[epoch]
        for logger in trainer.loggers:
            logger.log_metrics({**values, ISO_EPOCH: epoch}, step=trainer.global_step)
        if self.layer_profiles:
            self._log_profile_tables(trainer)
        log.info(
            "Isotropy at epoch %d (%.1fs, %s): %s",
            epoch,
            self.timings[epoch],
            source,
            ", ".join(f"{view} I(W)={values[iso_key(view, 'iw')]:.3g}" for view in SENTENCE_VIEWS),
        )

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
            "outlier_dimensions": {
                "factor": self.outlier_factor,
                "per_epoch": {str(epoch): dims for epoch, dims in sorted(self.outliers.items())},
            },
            "massive_activations": {
                str(epoch): found for epoch, found in sorted(self.massive.items())
            },
            "seconds": round(sum(self.timings.values()), 2),
        }
