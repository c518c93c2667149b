"""GLUE data and one's own files, one job per module: reading a split (:mod:`.reading`; one's own
CSV, TSV or JSON Lines files: their rows :mod:`.tables`, the task they decide :mod:`.own_data`),
tokenizing it (:mod:`.tokenized`), batching by length (:mod:`.batches`), and the Lightning data
module that puts them together (:mod:`.datamodule`); the task table they read (:mod:`.tasks`) and
each task's metrics (:mod:`.metrics`). The names are re-exported here: ``from isotune.data
import GLUEDataModule``.
May import: norms.
"""

from isotune.data.batches import LengthGroupedBatchSampler
from isotune.data.datamodule import GLUEDataModule
from isotune.data.reading import HUB_DATASET, Example, load_split, read_glue_tsv, split_file
from isotune.data.tokenized import TokenizedDataset, check_max_length

__all__ = [
    "HUB_DATASET",
    "Example",
    "GLUEDataModule",
    "LengthGroupedBatchSampler",
    "TokenizedDataset",
    "check_max_length",
    "load_split",
    "read_glue_tsv",
    "split_file",
]
