"""The valid ranges of options, each written once: the library (a norm's constructor, the
outlier-dimension factor) checks its arguments with :meth:`Range.require`, and the early config
check (:mod:`isotune.training.config_checks`) reads the same ranges against the config keys (a
norm's from its entry in ``NORMS``), so a value is refused in the same words before a model loads
and in a notebook, and a range changes in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from isotune.norms.values import finite_number, integer


class Range(NamedTuple):
    """What a value must satisfy (``holds``) and how to say it (``text``: "a number in (0, 1]")."""

    holds: Callable[[Any], bool]
    text: str

    def require(self, value: Any, name: str) -> None:
        """Raise ValueError naming ``name``, the range and ``value`` unless ``value`` is in it."""
        if not self.holds(value):
            raise ValueError(f"{name} must be {self.text}, got {value!r}.")


MOMENTUM = Range(lambda v: finite_number(v) and 0 < v <= 1, "a number in (0, 1]")
POSITIVE = Range(lambda v: finite_number(v) and v > 0, "a finite number > 0")
NON_NEGATIVE = Range(lambda v: finite_number(v) and v >= 0, "a finite number >= 0")
COUNT = Range(lambda v: integer(v) and v >= 1, "an integer >= 1")
SWITCH = Range(lambda v: isinstance(v, bool), "true or false")
SHARE = Range(lambda v: finite_number(v) and 0 <= v <= 1, "a number in [0, 1]")
