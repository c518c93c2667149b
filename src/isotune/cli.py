"""What the Hydra entry points (train.py, analyze.py) share: user errors without a traceback."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from isotune.errors import IsotuneError

log = logging.getLogger("isotune")


@contextmanager
def user_errors_reported(cfg: DictConfig) -> Iterator[None]:
    """Turn an :class:`IsotuneError` into one log message, and print the output directory.

    A single run then exits with status 1; in a sweep the error is re-raised so that the job is
    marked failed while the other jobs go on.
    """
    try:
        yield
    except IsotuneError as error:
        log.error("%s", error)
        if HydraConfig.get().mode == RunMode.RUN:
            sys.exit(1)
        raise
    log.info("Output directory: %s", cfg.paths.output_dir)
