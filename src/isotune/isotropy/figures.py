"""The IsoBN paper's pictures of an embedding space: per-dimension std, correlations, spectrum.

Plain matplotlib (headless ``Agg`` backend), so figures are drawn on machines without a display
and in worker processes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from torch import Tensor

from isotune.isotropy import isobn_stats, spectrum


def geometry_figure(X: Tensor, title: str) -> plt.Figure:
    """Histogram of per-dimension std, heatmap of |correlation| between dimensions, eigenvalues."""
    X = X.detach().double().cpu()
    stats = isobn_stats(X)
    variances = spectrum(X).variances
    correlation = torch.nan_to_num(torch.corrcoef(X.T)).abs()

    figure, (std_axis, corr_axis, spectrum_axis) = plt.subplots(1, 3, figsize=(15, 4.2))
    figure.suptitle(title)
    std_axis.hist(stats.std.numpy(), bins=50, color="tab:blue")
    std_axis.set(
        title=f"per-dimension std (cv {stats.std_cv:.2f})", xlabel="std", ylabel="dimensions"
    )
    image = corr_axis.imshow(correlation.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
    corr_axis.set(
        title=f"|correlation| between dimensions (mean {stats.corr_abs_mean:.3f})",
        xlabel="dimension",
        ylabel="dimension",
    )
    figure.colorbar(image, ax=corr_axis, fraction=0.046)
    ranks = torch.arange(1, len(variances) + 1)
    spectrum_axis.semilogy(ranks.numpy(), variances.clamp_min(1e-12).numpy(), color="tab:red")
    spectrum_axis.set(title="covariance eigenvalues", xlabel="component", ylabel="variance")
    figure.tight_layout()
    return figure


def save_geometry_figure(X: Tensor, title: str, path: Path) -> Path:
    """Draw :func:`geometry_figure` into a PNG file and free it."""
    figure = geometry_figure(X, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path
