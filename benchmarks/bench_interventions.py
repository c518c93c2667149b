"""What each isotropy intervention adds to a training step, MiniLM on RTE at batch 16, and what
I-STAR's per-epoch Sigma_S pass costs as a share of an epoch.

Every intervention (conf/intervention) gets its own model; on each training batch all of them take
a step in turn, the order rotated (``bench_throughput.interleaved_step_seconds``), so the drift of
a shared machine cancels in the per-batch ratios over ``none``. An epoch is the training split's
batches at the median I-STAR step time, validation not counted.

    GLUE_DIR=../shared/data/glue python benchmarks/bench_interventions.py --steps 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_throughput import (
    CONF,
    conf,
    interleaved_step_seconds,
    median_ratios,
    quiet_offline_glue_dir,
    rte_datamodule,
)
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from isotune.model.classifier import GLUEClassifier
from isotune.tracking.run_names import reg_label

BASELINE = "none"
# The targets for the step-time ratio over none; batchnorm is sentence-level like isobn.
TARGETS = {"cosreg": 1.05, "istar_less": 1.15, "istar_more": 1.15}
SENTENCE_LEVEL_TARGET = 1.03
SIGMA_S_TARGET = 0.10


def intervention_configs() -> dict[str, DictConfig]:
    """The config of ``python train.py intervention=<name>`` for each option, none first."""
    names = sorted(path.stem for path in (CONF / "intervention").glob("*.yaml"))
    names.sort(key=lambda name: name != BASELINE)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return {name: compose("train", overrides=[f"intervention={name}"]) for name in names}


def build(cfg: DictConfig) -> GLUEClassifier:
    torch.manual_seed(0)
    parts = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("norm", "reg")}
    return GLUEClassifier(
        task=conf("task/rte.yaml"), model=conf("model/minilm.yaml"), optim={}, **parts
    ).train()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per intervention")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()
    glue_dir = quiet_offline_glue_dir()
    datamodule = rte_datamodule(args, glue_dir)
    configs = intervention_configs()
    models = {name: build(cfg) for name, cfg in configs.items()}
    sigma_seconds = {}
    for name, model in models.items():
        if model.regularization.shrinkage is not None:
            start = time.perf_counter()
            model.refresh_shrinkage(datamodule, epoch=0)
            sigma_seconds[name] = time.perf_counter() - start
    seconds = interleaved_step_seconds(
        models,
        lambda model, batch: model.training_loss(batch)[0],
        datamodule.train_dataloader(),
        args.warmup,
        args.steps,
    )
    ratios = median_ratios(seconds, BASELINE)

    print(
        f"\nMiniLM on RTE, batch {args.batch_size}, max length {args.max_length}, "
        f"{args.steps} timed steps interleaved, torch threads {torch.get_num_threads()}\n"
    )
    print("| intervention | norm | reg | median step (s) | step time / none | target |")
    print("|---|---|---|---|---|---|")
    for name, cfg in configs.items():
        target = "" if name == BASELINE else f"<= {TARGETS.get(name, SENTENCE_LEVEL_TARGET):.2f}"
        print(
            f"| {name} | {cfg.norm.name} | {reg_label(cfg.reg.name, cfg.reg.weight)} | "
            f"{statistics.median(seconds[name]):.3f} | {ratios[name]:.3f} | {target} |"
        )
    epoch_steps = len(datamodule.train_dataloader())
    for name, pass_seconds in sigma_seconds.items():
        epoch = epoch_steps * statistics.median(seconds[name])
        share = pass_seconds / (pass_seconds + epoch)
        reg = configs[name].reg
        print(
            f"\n{name}: Sigma_S pass {pass_seconds:.1f} s ({reg.shrinkage_points} rows at most, "
            f"from {reg.shrinkage_examples} training examples) against {epoch:.0f} s of "
            f"{epoch_steps} training steps: {100 * share:.1f}% of an epoch "
            f"(target <= {100 * SIGMA_S_TARGET:.0f}%)"
        )


if __name__ == "__main__":
    main()
