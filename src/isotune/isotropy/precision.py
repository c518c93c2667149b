"""float32 matrix products at full precision while a measure runs: a training run may allow TF32
or bf16 passes (``torch.set_float32_matmul_precision("high")``), fine for a step, but a measure's
float32 products (the neighbour search's candidates) would then round to about 1e-3, not 1e-7,
and differ from one device to another. float64 is untouched by that setting.
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
