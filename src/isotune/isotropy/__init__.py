"""The isotropy family: measures of an embedding cloud (torch only); the sentence views every
measurement collects (``isotune.isotropy.vectors``, shared with the analysis); and the per-epoch
callback and figures that apply them during training (``.callback``, ``.figures``).

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

__all__ = [
    "CloudMeasures",
    "IsoBNStats",
    "LocalIsotropy",
    "PartitionIsotropy",
    "Spectrum",
    "average_cosine",
    "isobn_stats",
    "isoscore",
    "isoscore_star",
    "kmeans",
    "local_isotropy",
    "measure_all",
    "measure_cloud",
    "partition_isotropy",
    "spectrum",
]
