"""``compile=true``: the encoder compiled by ``torch.compile`` (inductor), checked at
start.

Compiling pays where a job meets few shapes (``data.pad_buckets``) and many steps: each new
(batch, length) compiles once (after the first recompile torch marks the length dynamic), and
inductor's cache on disk serves the same graphs to the next process. Where it cannot run (no C++
compiler for inductor on the CPU, no Triton on a GPU, a torch without it) inductor fails at the
first step, deep in a traceback; the check compiles one small function on the run's device first
and stops with one message instead, before the model is trained or measured.
"""

from __future__ import annotations

import torch
from torch import nn

from isotune.errors import IsotuneError

FIX = "Fix: compile=false (the default), or install what the error names and try again."


def check_compile_runs(device: torch.device) -> None:
    """Compile and run one small function on ``device``, or one error naming why and the fix."""
    try:
        compiled = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2.0 + 1.0, fullgraph=True)
        compiled(torch.linspace(-1.0, 1.0, 8, device=device))
    except Exception as error:  # inductor's own errors are many classes, all of them final here
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise IsotuneError(
            f"compile=true: torch.compile cannot run on {device.type} here ({first}). {FIX}"
        ) from error


def compile_encoder(encoder: nn.Module, device: torch.device) -> None:
    """Compile ``encoder`` in place (its state dict and checkpoints keep their keys) after
    :func:`check_compile_runs`."""
    check_compile_runs(device)
    encoder.compile()
