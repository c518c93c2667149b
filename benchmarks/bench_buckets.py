"""How many (batch, length) shapes a run meets per epoch, and how much extra padding it pays
for them, with each batch padded to its longest example (today) or to buckets (data.pad_buckets).

A GPU plans kernels once per new shape (docs/performance.md: about 0.3 s each for cuDNN attention
on an H200); on the CPU the padded tokens are the compute. Per task and padding, over one training
epoch (batches of data.batch_size, length-grouped, as a run draws them) and one pass over the dev
splits (data.eval_batch_size): the distinct shapes, and padded tokens over real tokens. Nothing
is trained; the tokenizer is MiniLM's (the default model's).

    GLUE_DIR=../shared/data/glue python benchmarks/bench_buckets.py
    GLUE_DIR=../shared/data/glue python benchmarks/bench_buckets.py --tasks rte sst2
"""

from __future__ import annotations

import argparse
import logging
import os

from bench_throughput import conf

from isotune.data import GLUEDataModule
from isotune.data.padding import padded_length
from isotune.data.tasks import TaskSpec
from isotune.model.encoders import load_tokenizer

MAX_LENGTH = conf("train.yaml")["data"]["max_length"]
PADDINGS = {  # name -> data.pad_buckets
    "exact (today)": None,
    "multiples of 8": list(range(8, MAX_LENGTH + 1, 8)),
    "multiples of 16": list(range(16, MAX_LENGTH + 1, 16)),
    "multiples of 32": list(range(32, MAX_LENGTH + 1, 32)),
    "[64,128]": [64, MAX_LENGTH],
}


def shapes_and_padding(datamodule: GLUEDataModule, buckets: list[int] | None) -> tuple[int, float]:
    """Distinct (batch, length) shapes of one training epoch and one dev pass, and padded tokens
    over real ones, with each batch padded as ``buckets`` says (None: to its longest)."""
    shapes, padded, real = set(), 0, 0
    splits = [("train", datamodule.train_dataloader().batch_sampler)]
    splits += [(split, datamodule.eval_batches(split)) for split in datamodule.task.eval_splits]
    for split, batches in splits:
        lengths = datamodule.dataset(split).lengths
        for batch in batches:
            longest = max(lengths[i] for i in batch)
            length = longest if buckets is None else padded_length(longest, buckets, MAX_LENGTH)
            shapes.add((len(batch), length))
            padded += len(batch) * length
            real += sum(lengths[i] for i in batch)
    return len(shapes), padded / real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["rte", "mrpc", "stsb", "cola", "sst2"])
    args = parser.parse_args()
    logging.disable(logging.INFO)
    data = conf("train.yaml")["data"]
    tokenizer = load_tokenizer(conf("model/minilm.yaml")["name_or_path"])
    print("| task | padding | shapes per epoch (train + dev) | padded / real tokens |")
    print("|---|---|---|---|")
    for name in args.tasks:
        datamodule = GLUEDataModule(
            TaskSpec.from_config(conf(f"task/{name}.yaml")),
            tokenizer,
            glue_dir=os.environ.get("GLUE_DIR"),
            max_length=MAX_LENGTH,
            batch_size=data["batch_size"],
            eval_batch_size=data["eval_batch_size"],
        )
        for padding, buckets in PADDINGS.items():
            shapes, ratio = shapes_and_padding(datamodule, buckets)
            print(f"| {name} | {padding} | {shapes} | {ratio:.3f} |", flush=True)


if __name__ == "__main__":
    main()
