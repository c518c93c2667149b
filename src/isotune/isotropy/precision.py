"""float32 matrix products at full precision while a measure runs.

A training run may allow lower-precision float32 matmuls (TF32 on an Ampere or later GPU,
bf16 passes on a CPU with bf16 units, ``torch.set_float32_matmul_precision("high")`` or
``"medium"``): fine for a step, not for a measure, whose float32 products (the neighbour
search's candidates) would then round to about 1e-3 instead of 1e-7 and differ from one device
to another. The measures that multiply in float32 run inside :func:`full_precision`; the rest
compute in float64, which no such setting touches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def full_precision() -> Iterator[None]:
    """float32 matmuls at full precision inside, the caller's setting restored after."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
