"""The problem lines the early config check reports for a command line's overrides."""

from __future__ import annotations

import pytest

from isotune.errors import IsotuneError
from isotune.training.config_checks import check_train_config
from tests.conftest import compose_train_config


def problems(*overrides: str) -> list[str]:
    """The problem lines reported for ``python train.py <overrides>``."""
    with pytest.raises(IsotuneError) as raised:
        check_train_config(compose_train_config(list(overrides)))
    header, *lines = str(raised.value).splitlines()
    assert header.startswith("Invalid config values; set each on the command line (key=value)")
    return lines
