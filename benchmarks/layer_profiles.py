"""The layer profiles of a pre-trained model on a task's dev set, as a Markdown table.

The isotropy callback's epoch 0 with ``layer_profiles=true``, without training: the model of
``conf/model/<--model>.yaml`` with a fresh head (``norm=none``), the probe of ``--probe-size``
seeded dev examples (all of RTE's 277 by default), encoded in validation's batches, then every
layer's profile (``docs/isotropy.md``, "Layer profiles") of its pooled sentence vectors and of
its token sample, and where its largest activations sit (the dev example, the token, the
dimension).

    GLUE_DIR=../shared/data/glue python benchmarks/layer_profiles.py
    GLUE_DIR=../shared/data/glue python benchmarks/layer_profiles.py --model minilm --task rte
    GLUE_DIR=../shared/data/glue python benchmarks/layer_profiles.py --repeat 5  # their cost
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch
from bench_throughput import conf, quiet_offline_glue_dir
from lightning.pytorch.plugins.precision import Precision

from isotune.callbacks.isotropy import IsotropyMonitor
from isotune.data import GLUEDataModule
from isotune.data.tasks import TaskSpec
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import load_tokenizer
from isotune.tracking.metric_keys import PROFILE_LEVELS, profile_key

COLUMNS = {
    "anisotropy": "anisotropy",
    "isoscore": "IsoScore",
    "avg_cosine": "avg cos",
    "log_iw": "log I(W)",
    "twonn": "TwoNN",
    "twonn_microscope": "TwoNN (LLM-Microscope)",
    "mle_id": "MLE",
}


def significant(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant digits, rounded once from the value itself and
    trailing zeros kept (0.780, 20.0), so that a table's digits can be read as written."""
    return f"{value:#.{digits}g}".rstrip(".").replace(".e", "e")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm", help="a preset of conf/model/")
    parser.add_argument("--task", default="rte", help="a task of conf/task/")
    parser.add_argument("--probe-size", type=int, default=1000)
    parser.add_argument("--profile-tokens", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeat", type=int, default=1, help="measure this many times: the minimum and median"
    )
    parser.add_argument(
        "--digits",
        type=int,
        default=4,
        help="significant digits of each value, trailing zeros kept (round once, from the value)",
    )
    args = parser.parse_args()
    glue_dir = quiet_offline_glue_dir()
    torch.manual_seed(args.seed)

    task_cfg, model_cfg = conf(f"task/{args.task}.yaml"), conf(f"model/{args.model}.yaml")
    tokenizer = load_tokenizer(model_cfg["name_or_path"])
    datamodule = GLUEDataModule(TaskSpec.from_config(task_cfg), tokenizer, glue_dir=glue_dir)
    model = GLUEClassifier(
        task=task_cfg, model=model_cfg, norm={"name": "none"}, optim=conf("train.yaml")["optim"]
    )
    monitor = IsotropyMonitor(
        probe_size=args.probe_size,
        seed=args.seed,
        layer_profiles=True,
        profile_tokens=args.profile_tokens,
    )
    # What the monitor reads of a trainer outside fit: the data, and float32 precision.
    trainer = SimpleNamespace(datamodule=datamodule, precision_plugin=Precision())
    start = time.perf_counter()
    capture = monitor.new_capture(datamodule, model)
    collected = monitor.collect(trainer, model, capture)
    encoded = time.perf_counter() - start
    timings = []
    for _ in range(args.repeat):  # with torch's threads, as the callback measures them
        start = time.perf_counter()
        values, massive = monitor.measure_profiles(collected, capture)
        timings.append(time.perf_counter() - start)
    layers = len(massive)
    print(
        f"{model_cfg['name_or_path']} ({args.model}, pooling {model_cfg['pooling']}), "
        f"{task_cfg['name']} {datamodule.task.primary_split}: {len(capture.captured)} examples, "
        f"{len(collected['tokens_layer0'])} tokens per layer; encoded in {encoded:.0f} s, "
        f"measured in {min(timings):.2f} s on {torch.get_num_threads()} threads"
        + (
            f" (min of {len(timings)}, median {statistics.median(timings):.2f} s)"
            if len(timings) > 1
            else ""
        )
        + "\n"
    )
    for level in PROFILE_LEVELS:
        print(f"{level}:\n")
        print("| layer | " + " | ".join(COLUMNS.values()) + " |")
        print("|---" * (len(COLUMNS) + 1) + "|")
        for layer in range(layers):
            cells = [
                f"{values[profile_key(level, layer, name)]:#.{args.digits}g}" for name in COLUMNS
            ]
            print(f"| {layer} | " + " | ".join(cells) + " |")
        print()
    print("massive activations (top 3 per layer: |value| at dev idx / token position / dim):\n")
    print("| layer | largest / median | top 3 |")
    print("|---|---|---|")
    for layer, found in enumerate(massive):
        ratio = values[profile_key("tokens", layer, "massive_ratio")]
        where = ", ".join(
            f"{significant(magnitude, args.digits)} at {idx}/{position}/{dim}"
            for magnitude, idx, position, dim in zip(
                found["magnitudes"], found["idx"], found["positions"], found["dims"], strict=True
            )
        )
        print(f"| {layer} | {significant(ratio, args.digits)} | {where} |")


if __name__ == "__main__":
    main()
