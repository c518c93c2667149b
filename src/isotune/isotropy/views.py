"""Every scalar the isotropy callback logs of one view of the probe, measured on the device that
encoded it, in float64: a GPU gives the CPU's numbers to float64 rounding (1e-6 relative is what
the tests and the GPU check hold it to). IsoScore* too: a float32 covariance (TF32 on a GPU) would
make it the one number that depends on the device. No Lightning: a notebook measures as the
callback does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from isotune.isotropy.measures import CloudMeasures, isoscore_star, measure_cloud
from isotune.isotropy.outliers import OUTLIER_FACTOR, ROGUE_K, OutlierMeasures, measure_outliers


@dataclass(frozen=True)
class ViewMeasures:
    """One view's measures: the cloud's (for its figure), its outlier and rogue dimensions, and
    the flat scalars a run logs (``measure_all``'s, ``isoscore_star`` and the outliers')."""

    cloud: CloudMeasures
    outliers: OutlierMeasures
    scalars: dict[str, float]


def measure_view(
    points: Tensor,
    *,
    dominant_factor: float = 10.0,
    local_k: int | None = None,
    seed: int = 0,
    outlier_factor: float = OUTLIER_FACTOR,
    rogue_k: int = ROGUE_K,
) -> ViewMeasures:
    """The measures of ``points`` (N x d) on their own device; ``rogue_k`` at most d."""
    cloud = measure_cloud(points, dominant_factor=dominant_factor, local_k=local_k, seed=seed)
    found = measure_outliers(points, outlier_factor, min(rogue_k, points.shape[1]))
    scalars = {
        **cloud.scalars,
        "isoscore_star": isoscore_star(points.detach().to(torch.float64)).item(),
        **found.scalars,
    }
    return ViewMeasures(cloud=cloud, outliers=found, scalars=scalars)
