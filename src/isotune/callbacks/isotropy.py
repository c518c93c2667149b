"""Measure the isotropy of the embedding space before training and after every validation epoch.

On a fixed probe set (a seeded subset of the dev split, the same in every epoch and in every run
with the same seed) it measures the sentence vector before the norm (``pre_norm``) and after it
(``post_norm``, the classifier's input), and optionally token vectors of chosen layers. The
vectors come from validation itself: forward hooks on the norm (its input and output) and, when
token layers are asked for, on the encoder (hidden states requested only then) keep the probe's
rows of every dev batch, found by the examples' ``idx``. Only what validation did not encode runs
in a pass of its own, in validation's batches and at its precision: all of the probe at epoch 0
(before training), and the rest under ``limit_val_batches``, ``debug=limit`` or sharded DDP
validation. Every scalar of :func:`isotune.isotropy.measure_all`, and IsoScore* with the
library's default shrinkage target (one rule for every run, never a regularized run's own
Sigma_S), and the outlier-dimension scalars of :func:`isotune.isotropy.measure_outliers` with the
number of epoch 0's outlier dimensions still outliers, all measured on the device that encoded the
vectors (:func:`isotune.isotropy.views.measure_view`), is logged as ``iso/<view>/<metric>`` with
the epoch (epoch 0 = the pre-trained geometry); figures drawn from the same measurement are saved
under ``<output_dir>/isotropy/`` and sent to W&B; the per-epoch values and outlier dimensions
(their indices) are kept in checkpoints and returned for ``results.json``. In a sweep, epoch 0's
measures are shared by the jobs that would compute the same ones
(:mod:`isotune.callbacks.shared_pretrained`). Views, settings and measures: ``docs/isotropy.md``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from torch import Tensor, nn

from isotune.atomic_files import write_bytes
from isotune.callbacks.shared_pretrained import SharedPretrained, pretrained_key
from isotune.isotropy import OUTLIER_FACTOR, ROGUE_K, CloudMeasures, overlap
from isotune.isotropy.figures import save_geometry_figure, save_layer_profile_figure
from isotune.isotropy.layers import MASSIVE_K, layer_profile, massive_activations
from isotune.isotropy.views import measure_view
from isotune.model.adaptation import eval_mode
from isotune.model.families import hidden_state_indices, num_layers
from isotune.model.sentence_views import layer_sentence_vectors
from isotune.tracking.metric_keys import (
    ISO_EPOCH,
    POST_NORM,
    PRE_NORM,
    PROFILE_EPOCH,
    PROFILE_LAYER,
    PROFILE_LEVELS,
    SENTENCE_VIEWS,
    iso_key,
    profile_key,
    profile_table_key,
)

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


@dataclass(frozen=True)
class ProfileSampling:
    """What a capture keeps for the layer profiles: the model's ``layers`` hidden states (the
    embeddings first), ``per_example`` non-special tokens of each probe example (drawn with
    ``seed`` and the example's probe position, so the same ones every epoch), and each batch's
    ``massive_k`` tokens of largest magnitude."""

    layers: int
    per_example: int
    seed: int
    massive_k: int = MASSIVE_K


class ProbeCapture:
    """The probe's vectors, kept by forward hooks from whatever batches the module encodes.

    While attached, ``select`` names the probe examples of the next forward pass by their dev
    ``idx``; the hooks keep their rows of the norm's input (``pre_norm``) and output
    (``post_norm``) and, for ``token_layers``, their token states (special tokens and padding
    excluded). ``vectors`` returns them in probe order, whatever order the batches came in.
    ``seconds`` adds up the time spent in the hooks.
    """

    def __init__(
        self,
        probe_idx: Sequence[int],
        special_ids: Sequence[int],
        token_layers: Sequence[int],
        profile: ProfileSampling | None = None,
    ) -> None:
        self.probe_idx = torch.tensor(probe_idx)
        self.position_of = torch.full((max(probe_idx) + 1,), -1)
        self.position_of[torch.tensor(probe_idx)] = torch.arange(len(probe_idx))
        self.special_ids = torch.tensor(special_ids)
        self.token_layers = tuple(token_layers)
        self.profile = profile
        self.names = [*SENTENCE_VIEWS, *(f"layer{layer}_tokens" for layer in self.token_layers)]
        if profile is not None:
            self.names += [
                f"{kind}_layer{layer}"
                for layer in range(profile.layers)
                for kind in ("sentence", "tokens", "massive", "massive_at")
            ]
        self.captured = torch.zeros(len(probe_idx), dtype=torch.bool)
        self.seconds = 0.0
        # view -> per batch: (probe positions, vectors, token count per example or None)
        self._parts: dict[str, list[tuple[Tensor, Tensor, Tensor | None]]] = {}
        self._rows: Tensor | None = None  # rows of the next forward pass that are probe examples
        self._positions: Tensor | None = None
        self._handles: list = []
        self._module: nn.Module | None = None  # whose pooling makes a layer's sentence vectors

    def attach(self, module: nn.Module) -> None:
        """Hooks on ``module.norm`` and, for token layers or layer profiles, on
        ``module.encoder``."""
        self._module = module
        self._handles = [module.norm.register_forward_hook(self._keep_sentence_views)]
        if self.token_layers or self.profile is not None:
            encoder = module.encoder
            self._handles += [
                encoder.register_forward_pre_hook(self._request_hidden_states, with_kwargs=True),
                encoder.register_forward_hook(self._keep_tokens, with_kwargs=True),
            ]

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.select(None)

    def select(self, idx: Tensor | None) -> None:
        """The dev ``idx`` of the next forward pass's examples; None: keep nothing from it."""
        self._rows = self._positions = None
        if idx is not None:
            idx = idx.cpu()
            positions = torch.full_like(idx, -1)
            known = idx < len(self.position_of)
            positions[known] = self.position_of[idx[known]]
            rows = (positions >= 0).nonzero().squeeze(1)
            if len(rows):
                self._rows, self._positions = rows, positions[rows]

    def missing(self) -> list[int]:
        """Probe positions not captured yet."""
        return (~self.captured).nonzero().squeeze(1).tolist()

    def vectors(self) -> dict[str, Tensor]:
        """Every view's vectors as float32 where they were kept (sentence views on the device
        that encoded them, token views on the CPU), in probe order (tokens: example by example,
        each example's tokens in their order)."""
        ordered = {}
        for name in self.names:
            parts = self._parts[name]
            positions, vectors, counts = zip(*parts, strict=True)
            order = torch.cat(positions).argsort()
            vectors = torch.cat(vectors).float()
            if counts[0] is None:
                ordered[name] = vectors[order.to(vectors.device)]
            else:
                pieces = vectors.split(torch.cat(counts).tolist())
                ordered[name] = torch.cat([pieces[i] for i in order.tolist()])
        return ordered

    # -- hooks ----------------------------------------------------------------------------------
    def _keep(self, name: str, vectors: Tensor, counts: Tensor | None = None) -> None:
        if counts is not None:  # all the probe's tokens are many: off the accelerator at once
            vectors = vectors.cpu()
        self._parts.setdefault(name, []).append((self._positions, vectors.detach(), counts))

    def _keep_sentence_views(self, norm: nn.Module, inputs: tuple, output: Tensor) -> None:
        if self._rows is not None:
            start = time.perf_counter()
            rows = self._rows.to(output.device)
            self._keep(PRE_NORM, inputs[0][rows])
            self._keep(POST_NORM, output[rows])
            self.captured[self._positions] = True
            self.seconds += time.perf_counter() - start

    def _request_hidden_states(self, encoder: nn.Module, args: tuple, kwargs: dict):
        if self._rows is not None:
            return args, {**kwargs, "output_hidden_states": True}
        return None

    def _keep_tokens(self, encoder: nn.Module, args: tuple, kwargs: dict, output) -> None:
        if self._rows is not None:
            start = time.perf_counter()
            rows = self._rows.to(kwargs["input_ids"].device)
            ids, mask = kwargs["input_ids"][rows], kwargs["attention_mask"][rows]
            real = mask.bool() & ~torch.isin(ids, self.special_ids.to(ids.device))
            counts = real.sum(dim=1).cpu()
            for layer in self.token_layers:
                self._keep(f"layer{layer}_tokens", output.hidden_states[layer][rows][real], counts)
            if self.profile is not None:
                self._keep_profile(output.hidden_states, rows, mask, real)
            self.seconds += time.perf_counter() - start

    def _keep_profile(self, hidden_states, rows: Tensor, mask: Tensor, real: Tensor) -> None:
        """Each layer's pooled sentence vectors, a seeded sample of its non-special tokens (the
        same positions every epoch) and the tokens that hold the batch's largest magnitudes."""
        profile, positions = self.profile, self._positions
        chosen = torch.zeros_like(real)
        for row, (position, wanted) in enumerate(zip(positions.tolist(), real, strict=True)):
            candidates = wanted.nonzero().squeeze(1).cpu()
            generator = torch.Generator().manual_seed(profile.seed + position)
            keep = torch.randperm(len(candidates), generator=generator)[: profile.per_example]
            chosen[row, candidates[keep].to(chosen.device)] = True
        counts = chosen.sum(dim=1).cpu()
        padded = ~mask.bool()
        first = mask.argmax(dim=1)  # padding before it (left-padded families) is no position
        for layer in range(profile.layers):
            hidden = hidden_states[layer][rows]
            self._keep(f"sentence_layer{layer}", layer_sentence_vectors(self._module, hidden, mask))
            self._keep(f"tokens_layer{layer}", hidden[chosen], counts)
            # the k largest magnitudes of the batch lie in at most k tokens: its k loudest
            loudness = hidden.abs().amax(dim=2).masked_fill(padded, -1.0).flatten()
            loudest = loudness.topk(min(profile.massive_k, int(mask.sum()))).indices.cpu()
            example, token = loudest // hidden.shape[1], loudest % hidden.shape[1]
            order = example.argsort(stable=True)  # example by example, as _keep orders parts
            example, token = example[order].to(hidden.device), token[order].to(hidden.device)
            found = torch.bincount(example.cpu(), minlength=len(rows))
            self._keep(f"massive_layer{layer}", hidden[example, token], found)
            at = torch.stack([positions[example.cpu()], (token - first[example]).cpu()], dim=1)
            self._keep(f"massive_at_layer{layer}", at.float(), found)


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
        outlier_factor: a dimension is an outlier when its variance is at least this times the
            mean variance (Rudman et al. 2023: 5).
        rogue_k: the dimensions of largest contribution to the average cosine whose share is
            logged (Timkey & van Schijndel 2021: 3).
        figures: save (and log) the std / correlation / spectrum figures every epoch.
        output_dir: where figures go (``<output_dir>/isotropy``).
        layer_profiles: also measure every layer (:func:`isotune.isotropy.layers.layer_profile`
            of its pooled sentence vectors and of a token sample, and its massive activations)
            and draw every epoch's profiles when training ends (``layer_profiles.png``).
        profile_tokens: about this many non-special tokens per layer for the profiles, the same
            number from each probe example.
        shared_dir: the sweep's folder (``${hydra:sweep.dir}`` in the config). Where it exists
            (Hydra makes it before a sweep's first job; a run alone names one that does not),
            epoch 0's measures are kept in and read from its :data:`SHARED_FOLDER`, so that one
            job of the sweep measures the pre-trained model and the others with the same
            weights, probe batches and settings read its numbers. None: every run measures.
    """

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

    # -- hooks ----------------------------------------------------------------------------------
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

    # -- collecting -----------------------------------------------------------------------------
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

    # -- measuring ------------------------------------------------------------------------------
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

    def measure_profiles(
        self, collected: Mapping[str, Tensor], capture: ProbeCapture
    ) -> tuple[dict[str, float], list[dict]]:
        """Every layer's profile (:func:`~isotune.isotropy.layers.layer_profile`) of its
        sentence vectors and token sample, keyed by :func:`profile_key`, with the largest
        activation (``massive_top1``, ``massive_dim``) and its ratio to the token sample's median
        magnitude (``massive_ratio``) at the ``tokens`` level; and, per layer, where the largest
        ``massive_k`` sit (dev ``idx`` of the example, token position, dimension)."""
        values: dict[str, float] = {}
        massive = []
        layers = sum(name.startswith("sentence_layer") for name in collected)
        for layer in range(layers):
            for level in PROFILE_LEVELS:
                points = collected[f"{level}_layer{layer}"]
                measured = layer_profile(points)
                values.update({profile_key(level, layer, m): v for m, v in measured.items()})
            found = massive_activations(collected[f"massive_layer{layer}"])
            at = collected[f"massive_at_layer{layer}"][list(found.rows)].long()
            sample = collected[f"tokens_layer{layer}"].abs()
            median = sample.median().item() if sample.numel() else math.nan
            values[profile_key("tokens", layer, "massive_top1")] = found.magnitudes[0]
            values[profile_key("tokens", layer, "massive_ratio")] = found.magnitudes[0] / median
            values[profile_key("tokens", layer, "massive_dim")] = float(found.dims[0])
            massive.append(
                {
                    "magnitudes": list(found.magnitudes),
                    "idx": capture.probe_idx[at[:, 0]].tolist(),
                    "positions": at[:, 1].tolist(),
                    "dims": list(found.dims),
                }
            )
        return values, massive

    def profiles(self) -> dict[int, dict[str, dict[int, dict[str, float]]]]:
        """The layer profiles of every epoch measured: epoch -> level -> layer -> measure."""
        profiles: dict[int, dict[str, dict[int, dict[str, float]]]] = {}
        prefix = profile_key("", 0, "").split("/")[:2]
        for epoch, values in sorted(self.history.items()):
            for key, value in values.items():
                parts = key.split("/")
                if parts[:2] == prefix:
                    level, layer, measure = parts[2], int(parts[3].removeprefix("layer")), parts[4]
                    levels = profiles.setdefault(epoch, {})
                    levels.setdefault(level, {}).setdefault(layer, {})[measure] = value
        return profiles

    def profile_tables(self) -> dict[str, tuple[list[str], list[list[float]]]]:
        """The layer profiles of every epoch measured as one table per level (columns, rows):
        a row per epoch and layer, columns :data:`PROFILE_EPOCH`, :data:`PROFILE_LAYER` and the
        level's measures. Tables, because a W&B line plot draws keys against a step, never
        against the layer; the dashboard's custom charts draw these with the layer on the
        x-axis and one line per epoch, as ``layer_profiles.png``."""
        tables: dict[str, tuple[list[str], list[list[float]]]] = {}
        for epoch, levels in self.profiles().items():
            for level, layers in levels.items():
                measures = list(next(iter(layers.values())))
                columns, rows = tables.setdefault(
                    level, ([PROFILE_EPOCH, PROFILE_LAYER, *measures], [])
                )
                rows += [
                    [epoch, layer, *(found[m] for m in columns[2:])]
                    for layer, found in sorted(layers.items())
                ]
        return tables

    def _log_profile_tables(self, trainer: L.Trainer) -> None:
        """Every epoch's profiles so far, whole, as :func:`profile_table_key` tables (W&B)."""
        tables = self.profile_tables()
        for logger in trainer.loggers:
            if hasattr(logger, "log_table"):  # W&B
                for level, (columns, rows) in tables.items():
                    logger.log_table(
                        key=profile_table_key(level),
                        columns=columns,
                        data=rows,
                        step=trainer.global_step,
                    )

    def _figure(self, trainer: L.Trainer, measures: CloudMeasures, view: str, epoch: int) -> Path:
        path = save_geometry_figure(
            measures,
            f"{view} sentence vectors, epoch {epoch}",
            self._figure_folder(trainer) / f"{view}_epoch{epoch:02d}.png",
        )
        self._log_image(trainer, iso_key(view, "figure"), path)
        return path

    def _figure_copy(self, trainer: L.Trainer, shared: Path) -> Path:
        """A shared entry's figure, copied into this run's figures (the run keeps its own)."""
        return write_bytes(self._figure_folder(trainer) / shared.name, shared.read_bytes())

    def _figure_folder(self, trainer: L.Trainer) -> Path:
        return (self.output_dir or Path(trainer.default_root_dir)) / "isotropy"

    def _profile_figure(self, trainer: L.Trainer) -> None:
        path = save_layer_profile_figure(
            self.profiles(), self._figure_folder(trainer) / "layer_profiles.png"
        )
        self._log_image(trainer, "iso/profile/figure", path)

    @staticmethod
    def _log_image(trainer: L.Trainer, key: str, path: Path) -> None:
        for logger in trainer.loggers:
            if hasattr(logger, "log_image"):  # W&B
                logger.log_image(key=key, images=[str(path)], step=trainer.global_step)

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
            "outlier_dimensions": {
                "factor": self.outlier_factor,
                "per_epoch": {str(epoch): dims for epoch, dims in sorted(self.outliers.items())},
            },
            "massive_activations": {
                str(epoch): found for epoch, found in sorted(self.massive.items())
            },
            "seconds": round(sum(self.timings.values()), 2),
        }
