"""Library (no Lightning, no Hydra): the isotropy of an embedding cloud (:mod:`.point_cloud`),
measured (its measures and outlier dimensions, :mod:`.measures`, :mod:`.outliers`, within k-means
:mod:`.clusters`, its intrinsic dimension, :mod:`.dimension`, layer by layer, :mod:`.layers`, drawn
by :mod:`.figures`), restored after the fact (:mod:`.enhance`) and penalised in training
(:mod:`.penalties`).

The measures are re-exported here, so ``from isotune.isotropy import measure_all`` works without
importing Lightning. Formulas, sources and caveats: ``docs/isotropy.md``.
May import: norms.
"""

from isotune.isotropy.clusters import kmeans
from isotune.isotropy.dimension import mle_dimension, twonn, twonn_microscope
from isotune.isotropy.layers import (
    PROFILE_MEASURES,
    MassiveActivations,
    layer_profile,
    massive_activations,
)
from isotune.isotropy.measures import (
    CloudMeasures,
    IsoBNStats,
    LocalIsotropy,
    PartitionIsotropy,
    Spectrum,
    anisotropy,
    average_cosine,
    isobn_stats,
    isoscore,
    isoscore_star,
    local_isotropy,
    measure_all,
    measure_cloud,
    partition_isotropy,
    spectrum,
)
from isotune.isotropy.outliers import (
    OUTLIER_FACTOR,
    ROGUE_K,
    OutlierDimensions,
    OutlierMeasures,
    Overlap,
    RogueDimensions,
    cosine_contributions,
    dimension_variances,
    measure_outliers,
    outlier_dimensions,
    outliers_from_variances,
    overlap,
    rogue_dimensions,
)

__all__ = [
    "OUTLIER_FACTOR",
    "PROFILE_MEASURES",
    "ROGUE_K",
    "CloudMeasures",
    "IsoBNStats",
    "LocalIsotropy",
    "MassiveActivations",
    "OutlierDimensions",
    "OutlierMeasures",
    "Overlap",
    "PartitionIsotropy",
    "RogueDimensions",
    "Spectrum",
    "anisotropy",
    "average_cosine",
    "cosine_contributions",
    "dimension_variances",
    "isobn_stats",
    "isoscore",
    "isoscore_star",
    "kmeans",
    "layer_profile",
    "local_isotropy",
    "massive_activations",
    "measure_all",
    "measure_cloud",
    "measure_outliers",
    "mle_dimension",
    "outlier_dimensions",
    "outliers_from_variances",
    "overlap",
    "partition_isotropy",
    "rogue_dimensions",
    "spectrum",
    "twonn",
    "twonn_microscope",
]
