"""The IsoBN paper's pictures of an embedding space (per-dimension std, correlations, spectrum)
and the layer profiles of every epoch, drawn from measures already computed.

matplotlib's object API on the headless Agg canvas (no display, no pyplot state), so figures are
drawn on servers and in worker processes; a fixed layout, as ``tight_layout`` measured every tick
label and took as long as the drawing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from isotune.atomic_files import save_figure
from isotune.isotropy import CloudMeasures, IsoBNStats


def correlation_matrix(stats: IsoBNStats) -> Tensor:
    """|correlation| between all pairs of dimensions, from the pairs ``stats`` keeps: 1 on the
    diagonal, 0 in the rows and columns of constant dimensions (which have no correlation)."""
    dims = len(stats.std)
    varying = (stats.std > 0).nonzero().squeeze(1)
    rows, cols = torch.triu_indices(len(varying), len(varying), offset=1)
    matrix = torch.zeros(dims, dims, dtype=stats.corr_abs.dtype)
    matrix[varying[rows], varying[cols]] = stats.corr_abs
    matrix += matrix.mT.clone()
    matrix[varying, varying] = 1.0
    return matrix


def geometry_figure(measures: CloudMeasures, title: str) -> Figure:
    """Histogram of per-dimension std, heatmap of |correlation| between dimensions, eigenvalues."""
    stats, variances = measures.stats, measures.spectrum.variances
    figure = Figure(figsize=(15, 4.2))
    FigureCanvasAgg(figure)
    figure.subplots_adjust(left=0.05, right=0.97, bottom=0.13, top=0.82, wspace=0.3)
    std_axis, corr_axis, spectrum_axis = figure.subplots(1, 3)
    figure.suptitle(title)
    std_axis.hist(stats.std.numpy(), bins=50, color="tab:blue")
    std_axis.set(
        title=f"per-dimension std (cv {stats.std_cv:.2f})", xlabel="std", ylabel="dimensions"
    )
    image = corr_axis.imshow(
        correlation_matrix(stats).numpy(), cmap="viridis", vmin=0.0, vmax=1.0, interpolation="none"
    )
    corr_axis.set(
        title=f"|correlation| between dimensions (mean {stats.corr_abs_mean:.3f})",
        xlabel="dimension",
        ylabel="dimension",
    )
    figure.colorbar(image, ax=corr_axis, fraction=0.046)
    ranks = torch.arange(1, len(variances) + 1)
    spectrum_axis.semilogy(ranks.numpy(), variances.clamp_min(1e-12).numpy(), color="tab:red")
    spectrum_axis.set(title="covariance eigenvalues", xlabel="component", ylabel="variance")
    return figure


def save_geometry_figure(measures: CloudMeasures, title: str, path: Path) -> Path:
    """Draw :func:`geometry_figure` into a PNG file."""
    return save_figure(geometry_figure(measures, title), path, dpi=80)


# The titles of the measures a layer-profile figure draws (layer_profile's, and the largest
# activation's ratio to the median).
PROFILE_TITLES = {
    "anisotropy": "anisotropy",
    "isoscore": "IsoScore",
    "avg_cosine": "average cosine",
    "log_iw": "log I(W)",
    "twonn": "TwoNN dimension",
    "mle_id": "MLE dimension",
    "massive_ratio": "max |h| / median",
}


def _measures_held(profiles: Mapping[int, Mapping[str, Mapping[int, Mapping]]], level: str):
    """The measures of PROFILE_TITLES that some layer of ``level`` has a value of, in its order."""
    held = {
        measure
        for epochs in profiles.values()
        for values in epochs.get(level, {}).values()
        for measure, value in values.items()
        if value is not None
    }
    return tuple(measure for measure in PROFILE_TITLES if measure in held)


def layer_profile_figure(profiles: Mapping[int, Mapping[str, Mapping[int, Mapping]]]) -> Figure:
    """One panel per measure a level holds (rows: the levels; no panel left empty), the layer on
    the x-axis, one line per epoch (``profiles``: epoch -> level -> layer -> measure -> value)."""
    levels = list(dict.fromkeys(level for epochs in profiles.values() for level in epochs))
    shown = {level: _measures_held(profiles, level) for level in levels}
    columns = max((len(measures) for measures in shown.values()), default=1)
    figure = Figure(figsize=(3.2 * columns, 3.2 * max(len(levels), 1)))
    FigureCanvasAgg(figure)
    figure.subplots_adjust(left=0.04, right=0.99, bottom=0.1, top=0.88, wspace=0.35, hspace=0.5)
    axes = figure.subplots(max(len(levels), 1), columns, squeeze=False)
    colours = matplotlib.colormaps["viridis"].resampled(max(len(profiles), 2))
    for row, level in enumerate(levels):
        for axis in axes[row][len(shown[level]) :]:
            axis.set_visible(False)
        for axis, measure in zip(axes[row], shown[level], strict=False):
            for number, (epoch, by_level) in enumerate(sorted(profiles.items())):
                layers = sorted(by_level.get(level, {}))
                points = [(i, by_level[level][i].get(measure)) for i in layers]
                points = [(i, value) for i, value in points if value is not None]
                if points:
                    x, y = zip(*points, strict=True)
                    axis.plot(x, y, marker=".", color=colours(number), label=f"epoch {epoch}")
            axis.set(title=f"{level}: {PROFILE_TITLES[measure]}", xlabel="layer (0 = embeddings)")
    if profiles:
        axes[0][0].legend(fontsize=7)
    figure.suptitle("Layer profiles (epoch 0 = pre-trained)")
    return figure


def save_layer_profile_figure(profiles: Mapping, path: Path) -> Path:
    """Draw :func:`layer_profile_figure` into a PNG file."""
    return save_figure(layer_profile_figure(profiles), path, dpi=80)
