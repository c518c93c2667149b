"""Every key a training run logs, named once.

The module (``train/*``, ``val/*``), the isotropy callback (``iso/*`` with ``iso/epoch``), the
training story (``params/*``), the loggers' axes and the dashboards build their keys here, so a
dashboard cannot name a key that no run logs without a test noticing
(``tests/test_dashboard_keys.py`` reads the keys of real runs' W&B files).
"""

from __future__ import annotations

# The two views of a sentence vector (isotune.model.sentence_views): the pooled vector before the
# norm, and the norm's output, the classifier's input; a key's <view> (iso/<view>/<measure>).
PRE_NORM = "pre_norm"
POST_NORM = "post_norm"
SENTENCE_VIEWS = (PRE_NORM, POST_NORM)

# The clouds of a layer profile (isotune.isotropy.layers): each layer's sentence vectors (the
# model's pooling) and a sample of its token states.
PROFILE_LEVELS = ("sentence", "tokens")
PROFILE_EPOCH, PROFILE_LAYER = "epoch", "layer"  # the columns of a profile table that place a row
# The measures a dashboard draws layer by layer, those of the callback's layer_profiles.png (of
# isotune.isotropy.layers.PROFILE_MEASURES, and at the token level the largest activation over
# the median); the callback logs more.
_PROFILE_SHOWN = ("anisotropy", "isoscore", "avg_cosine", "log_iw", "twonn", "mle_id")
DASHBOARD_PROFILE_MEASURES = {
    "sentence": _PROFILE_SHOWN,
    "tokens": (*_PROFILE_SHOWN, "massive_ratio"),
}

STEP = "trainer/global_step"  # Lightning's W&B logger adds it to every logged row
# Logged by the module with the dev scores, counted as iso/epoch is and as every epoch is counted
# here (from 1): Lightning's own "epoch" is 0 during the first epoch, so the scores of epoch N
# would sit beside the isotropy of epoch N - 1.
EPOCH = "val/epoch"
ISO_EPOCH = "iso/epoch"  # the isotropy callback's: 0 = the pre-trained model, N = after epoch N
# Lightning names a value logged with on_step and on_epoch twice: "<name>_step" and "<name>_epoch".
PER_STEP, PER_EPOCH = "_step", "_epoch"
LOSS = "loss"

# The isotropy measures a dashboard draws (of measure_cloud's and measure_outliers' scalars, and
# IsoScore*); the callback logs them all, and more (docs/isotropy.md).
DASHBOARD_MEASURES = (
    "log_iw",
    "isoscore",
    "isoscore_star",
    "avg_cosine",
    "n_dominant",
    "n_outliers",  # outlier dimensions (docs/isotropy.md)
    "outliers_kept",  # epoch 0's outlier dimensions that still are
)
# What isotune.model.adaptation.parameter_counts counts; logged once, at step 0.
PARAMETER_COUNTS = ("trainable", "total", "trainable_fraction")
# The training loss's parts (GLUEClassifier.training_loss); a regularizer adds reg_<measure>.
LOSS_TASK, LOSS_REG, REG_PREFIX = "loss_task", "loss_reg", "reg_"


def train_key(name: str) -> str:
    """``train/<name>`` as the module logs it."""
    return f"train/{name}"


def logged_per_step(key: str) -> str:
    """The key Lightning writes for a value the module logs with ``on_step=True, on_epoch=True``."""
    return key + PER_STEP


def val_key(prefix: str, metric: str) -> str:
    """``<prefix>/<metric>``: ``val/accuracy``; ``prefix`` from ``TaskSpec.log_prefix``."""
    return f"{prefix}/{metric}"


def iso_key(view: str, measure: str) -> str:
    """``iso/<view>/<measure>``: ``iso/post_norm/log_iw``."""
    return f"iso/{view}/{measure}"


def profile_key(level: str, layer: int, measure: str) -> str:
    """A layer profile's value (docs/isotropy.md, "Layer profiles"):
    ``iso/profile/<level>/layer<i>/<measure>``, ``level`` one of :data:`PROFILE_LEVELS`."""
    return f"iso/profile/{level}/layer{layer}/{measure}"


def profile_table_key(level: str) -> str:
    """The table of a level's layer profiles (W&B only), one row per epoch and layer, logged whole
    after every measurement so the run summary's copy (a custom chart's) holds every epoch."""
    return f"iso/profile/{level}/table"


def params_key(count: str) -> str:
    """``params/<count>``: ``params/trainable_fraction``."""
    return f"params/{count}"


def best_key(key: str) -> str:
    """The run summary's best-epoch value of ``key``: ``best/accuracy``, ``best/iso/...``."""
    return f"best/{key}"


def summary_of(metric: str) -> str:
    """How a score's summary is its best value: ``min`` for a loss, else ``max``."""
    return "min" if metric == LOSS or metric.endswith("_" + LOSS) else "max"


def axis_of(key: str) -> str:
    """The key that ``key`` is drawn against: ``iso/*`` against :data:`ISO_EPOCH`, the dev
    scores (``val/*``, ``val_<split>/*``) against :data:`EPOCH`, the rest against :data:`STEP`.
    W&B's ``define_metric`` and the TensorBoard logger both follow this rule."""
    prefix = key.split("/", 1)[0]
    if prefix == "iso":
        return ISO_EPOCH
    if prefix == "val" or prefix.startswith("val_"):
        return EPOCH
    return STEP
