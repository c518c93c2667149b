"""Validate ``analyze.py``'s config before the checkpoint and the two encoders load.

An analysis loads a fine-tuned model and its pre-trained twin and runs both over the dev set
before its first statement; a bad value typed on the command line (``seed=-3``,
``local.folds=1``, ``data.dev_examples=0``) would otherwise fail minutes in, inside numpy or
scikit-learn, with an error that names neither key nor value. Every problem is listed in one
message, in the words of the training check (:mod:`isotune.training.config_checks`).
"""

from __future__ import annotations

from omegaconf import DictConfig

from isotune.analysis.directions import MATRICES
from isotune.analysis.single_dimension import SEARCHES
from isotune.norms.ranges import COUNT, NON_NEGATIVE, POSITIVE, SHARE
from isotune.norms.values import integer
from isotune.training.config_checks import (
    SEED_RANGE,
    Rules,
    count_or_null,
    raise_problems,
    rule_problems,
    valid_seed,
)

COUNT_OR_ALL = (count_or_null, "null (all of it) or an integer >= 1")
COMPONENTS = (lambda v: integer(v) and v >= 0, "an integer >= 0 (0: centring only)")

RULES: Rules = (
    ("seed", valid_seed, SEED_RANGE),
    ("data.max_length", count_or_null, "null (the fine-tuning run's) or an integer >= 1"),
    ("data.eval_batch_size", *COUNT),
    ("data.dev_examples", *COUNT_OR_ALL),
    ("data.train_examples", *COUNT_OR_ALL),
    ("data.frequency_examples", *COUNT_OR_ALL),
    ("tokens.max_tokens", *COUNT),
    ("isotropy.dominant_factor", *POSITIVE),
    ("directions.k", *COUNT),
    ("directions.threshold", *SHARE),
    ("directions.matrices", lambda v: v in MATRICES, f"one of {list(MATRICES)}"),
    ("local.frequency_buckets", lambda v: integer(v) and v >= 2, "an integer >= 2"),
    ("local.n_clusters", *COUNT),
    # scikit-learn's StratifiedKFold needs two folds at least
    ("local.folds", lambda v: integer(v) and v >= 2, "an integer >= 2"),
    ("local.max_points", *COUNT),
    ("outliers.factor", *POSITIVE),
    ("outliers.top_dims", *COUNT),
    ("outliers.search", lambda v: v in SEARCHES, f"one of {list(SEARCHES)}"),
    ("enhance.abtt_components", *COMPONENTS),
    ("enhance.n_clusters", *COUNT),
    ("enhance.cluster_components", *COMPONENTS),
    ("verdict.metric_tolerance", *NON_NEGATIVE),
    ("verdict.local_change", *NON_NEGATIVE),
    ("verdict.outlier_survival", *SHARE),
    ("verdict.one_dimension_share", *SHARE),
)


def check_analyze_config(cfg: DictConfig) -> None:
    """Raise one :class:`~isotune.errors.IsotuneError` listing every value in ``cfg`` outside
    its valid range."""
    raise_problems(rule_problems(cfg, RULES))
