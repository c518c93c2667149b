"""Lightning's "💡 Tip:" lines (install litlogger, litmodels), printed at every run's start, kept
off the console and the job logs: a user of isotune cannot act on them (its runs log to CSV,
TensorBoard or W&B, and keep their checkpoints themselves), and a sweep repeated them for every
job. Dropped by their words alone, so every other line Lightning logs stays."""

from __future__ import annotations

import logging

# The loggers Lightning's rank_zero_info writes through (lightning.pytorch's and fabric's).
RANK_ZERO_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
)
ADVERTISED = ("litlogger", "litmodels")


class AdvertisingTips(logging.Filter):
    """Refuses a record that is a tip to install one of :data:`ADVERTISED`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("Tip:" in message and any(name in message for name in ADVERTISED))


def silence_lightning_tips() -> None:
    """Put the filter on Lightning's loggers, once however often called."""
    for name in RANK_ZERO_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, AdvertisingTips) for f in logger.filters):
            logger.addFilter(AdvertisingTips())
