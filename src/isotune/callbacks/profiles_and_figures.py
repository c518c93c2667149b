"""What the isotropy callback (which mixes this in) profiles and draws beyond its per-epoch
measures: with ``layer_profiles=true`` every layer's profile and where its massive activations
sit, as W&B tables every epoch and one figure of every epoch when training ends; with
``figures=true`` each epoch's geometry figure of the sentence views (``<output_dir>/isotropy/``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import lightning as L
from torch import Tensor

from isotune.atomic_files import write_bytes
from isotune.callbacks.probe_capture import ProbeCapture
from isotune.isotropy import CloudMeasures
from isotune.isotropy.figures import save_geometry_figure, save_layer_profile_figure
from isotune.isotropy.layers import layer_profile, massive_activations
from isotune.tracking.metric_keys import (
    PROFILE_EPOCH,
    PROFILE_LAYER,
    PROFILE_LEVELS,
    iso_key,
    profile_key,
    profile_table_key,
)


class ProfilesAndFigures:
    """The layer profiles and figures of the monitor's measures (its ``history``: epoch -> the
    values logged), drawn into ``output_dir`` (the trainer's folder when None)."""

    history: dict[int, dict[str, float]]
    output_dir: Path | None

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
        """The layer profiles of every epoch measured as one table per level (columns, rows), as
        :func:`~isotune.tracking.metric_keys.profile_table_key` says: a W&B line plot draws keys
        against a step, never against the layer, so the dashboard's custom charts draw these
        tables."""
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
