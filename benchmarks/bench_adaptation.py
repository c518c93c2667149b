"""Train-step time, peak memory and checkpoint size of adapt=lora and adapt=frozen against
adapt=full, MiniLM on RTE at batch 16 (norm=none, each mode at its own learning rate).

Step times: the three modes take turns on the same batches, in a rotating order, and each mode's
time is divided by full's on the same batch (the median of these ratios is reported), as
bench_throughput.py does for the norms: the drift of a shared machine cancels. Memory: each mode
trains in a fresh process; its peak resident memory during the steps (Linux's VmHWM, reset once
the model and batches are ready) is reported, and how far that rises above the memory at the
reset: gradients, optimizer state and activations. Checkpoint: the tensors a checkpoint of the
mode stores (weights after drop_fixed_weights, and the optimizer state).

    GLUE_DIR=../shared/data/glue python benchmarks/bench_adaptation.py --steps 20
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import statistics
from pathlib import Path

import torch
from bench_throughput import conf, interleaved_step_seconds, median_ratios, quiet_offline_glue_dir

from isotune.data import GLUEDataModule
from isotune.data.tasks import TaskSpec
from isotune.model.adaptation import ADAPTATIONS, parameter_counts
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import load_tokenizer

MODES = tuple(ADAPTATIONS)  # full first: the reference


def build(mode: str, args, glue_dir: str) -> tuple[GLUEClassifier, torch.optim.Optimizer, list]:
    """The model as ``adapt=<mode>`` builds it (in its own train/eval modes), AdamW at the
    mode's learning rate over what trains, and the first training batches."""
    task_cfg, model_cfg = conf("task/rte.yaml"), conf("model/minilm.yaml")
    adapt = conf(f"adapt/{mode}.yaml")
    lr = adapt.get("optim", {}).get("lr", conf("train.yaml")["optim"]["lr"])
    datamodule = GLUEDataModule(
        TaskSpec.from_config(task_cfg),
        load_tokenizer(model_cfg["name_or_path"]),
        glue_dir=glue_dir,
        max_length=args.max_length,
        batch_size=args.batch_size,
        seed=0,
    )
    datamodule.setup("fit")
    batches = iter(datamodule.train_dataloader())
    torch.manual_seed(0)
    model = GLUEClassifier(
        task=task_cfg, model=model_cfg, norm=conf("norm/none.yaml"), optim={}, adapt=adapt["adapt"]
    )
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    return model, optimizer, [next(batches) for _ in range(args.warmup + args.steps)]


def train_step(model: GLUEClassifier, optimizer: torch.optim.Optimizer, batch: dict) -> None:
    model.loss(model(batch), batch["labels"]).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def checkpoint_megabytes(model: GLUEClassifier, optimizer: torch.optim.Optimizer) -> float:
    """Tensors a checkpoint stores: the weights the model keeps, and the optimizer state."""
    checkpoint = {"state_dict": model.state_dict()}
    model.on_save_checkpoint(checkpoint)
    tensors = [*checkpoint["state_dict"].values()]
    tensors += [t for state in optimizer.state.values() for t in state.values() if t.dim() > 0]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def step_seconds_and_sizes(args, glue_dir: str) -> tuple[dict[str, list[float]], dict]:
    """Seconds of each timed step of each mode, the modes taking turns on the same batches, and
    each mode's parameter counts and checkpoint size."""
    built = {mode: build(mode, args, glue_dir) for mode in MODES}
    seconds = interleaved_step_seconds(
        {mode: model for mode, (model, _, _) in built.items()},
        lambda model, batch: model.loss(model(batch), batch["labels"]),
        built[MODES[0]][2],  # every mode's batches are the same (seed 0)
        args.warmup,
        args.steps,
        optimizers={mode: optimizer for mode, (_, optimizer, _) in built.items()},
    )
    sizes = {
        mode: {**parameter_counts(model), "checkpoint_mb": checkpoint_megabytes(model, optimizer)}
        for mode, (model, optimizer, _) in built.items()
    }
    return seconds, sizes


def _kilobytes(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))


def peak_memory(mode: str, args, glue_dir: str) -> dict[str, float]:
    """In a fresh process: resident memory when training starts and its peak during the steps
    (MiB)."""
    quiet_offline_glue_dir()
    model, optimizer, batches = build(mode, args, glue_dir)
    Path("/proc/self/clear_refs").write_text("5")  # the peak restarts from the current size
    before = _kilobytes("VmRSS")
    for batch in batches:
        train_step(model, optimizer, batch)
    peak = _kilobytes("VmHWM")
    return {"before": before / 1024, "peak": peak / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()
    glue_dir = quiet_offline_glue_dir()
    seconds, sizes = step_seconds_and_sizes(args, glue_dir)
    ratios = median_ratios(seconds, MODES[0])
    spawn = multiprocessing.get_context("spawn")
    memory = {}
    for mode in MODES:
        with spawn.Pool(1) as pool:  # a fresh process per mode: its peak is its own
            memory[mode] = pool.apply(peak_memory, (mode, args, glue_dir))
    print(
        f"\nMiniLM on RTE, batch {args.batch_size}, max length {args.max_length}, "
        f"{args.steps} timed steps per mode after {args.warmup}, interleaved; "
        f"torch threads {torch.get_num_threads()}\n"
    )
    print(
        "| adapt | trainable parameters | step s (median) | step time vs full | peak MiB | "
        "training adds MiB | vs full | checkpoint MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    added = {mode: memory[mode]["peak"] - memory[mode]["before"] for mode in MODES}
    for mode in MODES:
        share = 100 * sizes[mode]["trainable_fraction"]
        print(
            f"| {mode} | {sizes[mode]['trainable']:,} ({share:.2g}%)"
            f" | {statistics.median(seconds[mode]):.3f} | {ratios[mode]:.3f}"
            f" | {memory[mode]['peak']:.0f}"
            f" | {added[mode]:.0f} | {added[mode] / added['full']:.3f}"
            f" | {sizes[mode]['checkpoint_mb']:.3g} |"
        )


if __name__ == "__main__":
    main()
