"""AdamW's step on this machine, fused against foreach (torch's default), on MiniLM's trainable
parameters with random gradients: the median step time of each, interleaved, and their ratio.

Hugging Face's ``Trainer`` uses fused AdamW on CUDA (``adamw_torch_fused``); isotune does too
(``optim.fused=auto``) and keeps foreach on the CPU unless this measures fused faster there.

    python benchmarks/bench_optimizer.py --steps 30
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_throughput import conf

from isotune.model.encoders import load_encoder


def step_seconds(optimizer: torch.optim.Optimizer) -> float:
    start = time.perf_counter()
    optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    encoder = load_encoder(conf("model/minilm.yaml")["name_or_path"])
    parameters = [p for p in encoder.parameters() if p.requires_grad]
    generator = torch.Generator().manual_seed(0)
    for parameter in parameters:
        parameter.grad = torch.randn(parameter.shape, generator=generator) * 1e-3
    optim = conf("train.yaml")["optim"]
    settings = {"lr": optim["lr"], "eps": optim["adam_eps"], "betas": tuple(optim["betas"])}
    optimizers = {
        "foreach": torch.optim.AdamW(parameters, foreach=True, **settings),
        "fused": torch.optim.AdamW(parameters, fused=True, **settings),
    }
    for optimizer in optimizers.values():  # the moments allocated before timing
        optimizer.step()
    times = {name: [] for name in optimizers}
    for _ in range(args.steps):
        for name, optimizer in optimizers.items():
            times[name].append(step_seconds(optimizer))
    medians = {name: statistics.median(found) for name, found in times.items()}
    count = sum(p.numel() for p in parameters)
    print(f"AdamW step over {count:,} parameters, {torch.get_num_threads()} threads:")
    for name, median in medians.items():
        print(f"  {name}: {1000 * median:.1f} ms (median of {args.steps})")
    print(f"  fused / foreach: {medians['fused'] / medians['foreach']:.3f}")


if __name__ == "__main__":
    main()
