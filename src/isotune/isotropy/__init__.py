"""The isotropy family: measures of an embedding cloud and of its outlier dimensions (torch only);
the sentence views every measurement collects (``isotune.sentence_views``, shared with the
analysis); and the per-epoch callback and figures that apply them during training (``.callback``,
``.figures``).

The measures are re-exported here, so ``from isotune.isotropy import measure_all`` works without
importing Lightning. Formulas, sources and caveats: ``docs/isotropy.md``.
"""

from isotune.isotropy.measures import (
    CloudMeasures,
    IsoBNStats,
    LocalIsotropy,
    PartitionIsotropy,
    Spectrum,
    average_cosine,
    isobn_stats,
    isoscore,
    isoscore_star,
    kmeans,
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
    "ROGUE_K",
    "CloudMeasures",
    "IsoBNStats",
    "LocalIsotropy",
    "OutlierDimensions",
    "OutlierMeasures",
    "Overlap",
    "PartitionIsotropy",
    "RogueDimensions",
    "Spectrum",
    "average_cosine",
    "cosine_contributions",
    "dimension_variances",
    "isobn_stats",
    "isoscore",
    "isoscore_star",
    "kmeans",
    "local_isotropy",
    "measure_all",
    "measure_cloud",
    "measure_outliers",
    "outlier_dimensions",
    "outliers_from_variances",
    "overlap",
    "partition_isotropy",
    "rogue_dimensions",
    "spectrum",
]
