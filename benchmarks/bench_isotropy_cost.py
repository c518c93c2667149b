"""What the isotropy callback costs: its per-epoch measurement against one training epoch.

The default run (MiniLM on RTE, batch 16, max length 128) trains one full epoch with the callback
at its defaults (probe of up to 1000 dev examples, figures on); the table gives the epoch's time
without the measurement, the measurement's time, and their ratio (target: at most 5%).

    GLUE_DIR=../shared/data/glue python benchmarks/bench_isotropy_cost.py
"""

from __future__ import annotations

import argparse
import tempfile
import time

import lightning as L
from bench_throughput import conf, quiet_offline_glue_dir

from isotune.data import GLUEDataModule
from isotune.encoders import load_tokenizer
from isotune.isotropy.callback import IsotropyMonitor
from isotune.module import GLUEClassifier
from isotune.tasks import TaskSpec


class EpochClock(L.Callback):
    """Wall time of the first training epoch, its validation (and the callback's work) included."""

    def on_train_epoch_start(self, trainer, module):
        self.start = time.perf_counter()

    def on_train_epoch_end(self, trainer, module):
        self.seconds = time.perf_counter() - self.start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--norm", default="isobn")
    parser.add_argument("--probe-size", type=int, default=1000)
    parser.add_argument("--limit-train-batches", type=float, default=1.0)
    args = parser.parse_args()
    glue_dir = quiet_offline_glue_dir()

    task_cfg, model_cfg = conf("task/rte.yaml"), conf("model/minilm.yaml")
    datamodule = GLUEDataModule(
        TaskSpec.from_config(task_cfg), load_tokenizer(model_cfg["name_or_path"]), glue_dir=glue_dir
    )
    model = GLUEClassifier(
        task=task_cfg,
        model=model_cfg,
        norm=conf(f"norm/{args.norm}.yaml"),
        optim=conf("train.yaml")["optim"],
    )
    with tempfile.TemporaryDirectory() as output_dir:
        monitor = IsotropyMonitor(probe_size=args.probe_size, output_dir=output_dir)
        clock = EpochClock()
        L.Trainer(
            accelerator="cpu",
            max_epochs=1,
            limit_train_batches=args.limit_train_batches,
            num_sanity_val_steps=0,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[monitor, clock],
        ).fit(model, datamodule=datamodule)
    measure = monitor.timings[1]
    epoch = clock.seconds - measure
    print(f"MiniLM on RTE, norm={args.norm}, probe {args.probe_size} examples, figures on\n")
    print("| epoch (train + validation) | isotropy measurement | cost |")
    print("|---|---|---|")
    print(f"| {epoch:.1f} s | {measure:.2f} s | {100 * measure / epoch:.1f}% (target <= 5%) |")
    print(f"\n(the pre-training measurement at epoch 0 took {monitor.timings[0]:.2f} s)")


if __name__ == "__main__":
    main()
