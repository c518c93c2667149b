"""What counts as an integer and as a number, for the checks of configs and of data files alike.

Python's own tests are too loose for either: ``True`` is an ``int``, and ``nan`` and ``inf`` are
``float``s that compare as no number should.
"""

from __future__ import annotations

import math
from typing import Any


def integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
