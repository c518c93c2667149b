"""How hard each regularizing intervention pulls against the task loss: the gradient of its
penalty beside the task loss's, MiniLM on RTE at batch 16, at the pre-trained model.

AdamW scales every parameter's step by that parameter's own gradient history, so what decides
where the steps go is the *direction* of the summed gradient, and over many steps its consistent
part: AdamW's first moment averages the batches' gradients, and a gradient that points the same
way on every batch survives the averaging while one that changes from batch to batch does not.
This prints, per preset of conf/intervention with a regularizer, over the encoder's parameters
(the penalty moves nothing else; the task loss also moves the head, which is left out):

- the median over training batches of ``||grad penalty|| / ||grad task loss||`` and of the cosine
  between the two: how the two compare on one batch;
- the same ratio for the gradients averaged over the batches, and the weight at which the weighted
  penalty's averaged gradient equals the task loss's (``1 / ratio``): a preset whose ``|weight|``
  lies far above it trains mostly on the penalty, whatever the scales of the two losses.

    export GLUE_DIR=../shared/data/glue
    python benchmarks/reg_gradients.py --batches 16
    python benchmarks/reg_gradients.py --batches 16 --override reg.layers=last  # I-STAR: last layer
    python benchmarks/reg_gradients.py --override reg.zeta=0  # I-STAR's presets: only they have it
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import yaml
from bench_interventions import build, intervention_configs
from bench_throughput import quiet_offline_glue_dir, rte_datamodule
from omegaconf import DictConfig, OmegaConf

from isotune.errors import IsotuneError
from isotune.model.classifier import GLUEClassifier
from isotune.tracking.metric_keys import LOSS_REG, LOSS_TASK
from isotune.tracking.run_names import reg_label
from isotune.training.config_checks import check_train_config


def gradient(loss: torch.Tensor, parameters: list[torch.Tensor]) -> torch.Tensor:
    """The gradient of ``loss`` over ``parameters``, flattened into one vector."""
    grads = torch.autograd.grad(loss, parameters, retain_graph=True, allow_unused=True)
    return torch.cat(
        [
            (g if g is not None else torch.zeros_like(p)).flatten()
            for g, p in zip(grads, parameters, strict=True)
        ]
    )


def task_and_penalty_gradients(model: GLUEClassifier, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of the task loss and of the unweighted penalty over the encoder, one batch:
    the training step's own loss parts (``GLUEClassifier.training_loss``), the penalty's term
    divided by its weight."""
    parameters = [p for p in model.encoder.parameters() if p.requires_grad]
    _, parts = model.training_loss(batch)
    penalty = parts[LOSS_REG] / model.regularization.weight
    return gradient(parts[LOSS_TASK], parameters), gradient(penalty, parameters)


def count(text: str) -> int:
    """An argparse type: an integer >= 1 (0 batches average nothing, 0 examples batch nothing)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def measured_presets(overrides: list[str]) -> dict[str, list[tuple[str, DictConfig]]]:
    """The presets of conf/intervention with a regularizer, by penalty: presets whose penalties
    differ only in weight (istar_less, istar_more) share one row. Each ``reg.<key>=<value>`` of
    ``overrides`` goes to the presets whose penalty has that key (``reg.zeta`` to I-STAR's), and
    each config is checked as train.py checks it. Raises :class:`IsotuneError` naming a bad
    override and its fix."""
    configs = {name: cfg for name, cfg in intervention_configs().items() if cfg.reg.name != "none"}
    for override in overrides:
        key, equals, _ = override.partition("=")
        if not equals or not key.startswith("reg."):
            raise IsotuneError(
                f"--override {override}: give key=value settings of the penalty, reg.<key>="
                "<value> (the models measured take nothing else from the config; the data has "
                "--batch-size and --max-length), e.g. --override reg.layers=last"
            )
        try:
            setting = OmegaConf.from_dotlist([override])
        except yaml.YAMLError as error:
            raise IsotuneError(
                f"--override {override}: the value is not YAML ({error.problem}). Fix: write "
                "it as train.py takes it, e.g. reg.layers=[1,2]"
            ) from None
        takers = {name: cfg for name, cfg in configs.items() if key[4:] in cfg.reg}
        if not takers:
            keys = sorted({f"reg.{option}" for cfg in configs.values() for option in cfg.reg})
            raise IsotuneError(
                f"--override {override}: no preset's penalty has {key}. Fix: one of "
                f"{', '.join(keys)}"
            )
        for name, cfg in takers.items():
            configs[name] = OmegaConf.merge(cfg, setting)
    presets: dict[str, list[tuple[str, DictConfig]]] = {}
    for name, cfg in configs.items():
        check_train_config(cfg)
        if cfg.reg.weight == 0:
            raise IsotuneError(
                f"--override reg.weight={cfg.reg.weight} leaves {name} no penalty to measure; "
                "give any non-zero weight (the ratios are per unit weight) or leave it out"
            )
        penalty = OmegaConf.to_container(cfg.reg, resolve=True)
        penalty.pop("weight")
        presets.setdefault(json.dumps(penalty, sort_keys=True), []).append((name, cfg))
    return presets


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=count, default=8, help="training batches measured")
    parser.add_argument(
        "--batch-size", type=count, default=16, help="examples per training batch (the runs': 16)"
    )
    parser.add_argument(
        "--max-length", type=count, default=128, help="tokens per example (the runs': 128)"
    )
    parser.add_argument(
        "--override",
        nargs="*",
        default=[],
        help="reg.<key>=<value> settings, each for the presets whose penalty has that key, e.g. "
        "reg.layers=last or reg.zeta=0.3 (I-STAR's)",
    )
    args = parser.parse_args()
    try:
        presets = measured_presets(args.override)
    except IsotuneError as error:
        parser.error(str(error))
    datamodule = rte_datamodule(args, quiet_offline_glue_dir())
    print(
        f"\nMiniLM on RTE, batch {args.batch_size}, max length {args.max_length}, the pre-trained "
        f"model, medians over {args.batches} training batches; overrides: "
        f"{' '.join(args.override) or 'none'}\n"
    )
    print(
        "| intervention | reg | penalty view | grad penalty / grad task, per batch | cosine | "
        "the same, batch-averaged | balancing weight |"
    )
    print("|---|---|---|---|---|---|---|")
    for named in presets.values():
        cfg = named[0][1]
        model = build(cfg)
        if model.regularization.shrinkage is not None:
            model.refresh_shrinkage(datamodule, epoch=0)
        ratios, cosines, task_sum, penalty_sum = [], [], 0.0, 0.0
        for index, batch in enumerate(datamodule.train_dataloader()):
            if index == args.batches:
                break
            task, penalty = task_and_penalty_gradients(model, batch)
            ratios.append((penalty.norm() / task.norm()).item())
            cosines.append(torch.nn.functional.cosine_similarity(penalty, task, dim=0).item())
            task_sum, penalty_sum = task_sum + task, penalty_sum + penalty
        averaged = (penalty_sum.norm() / task_sum.norm()).item()
        view = cfg.reg.view + (f" ({cfg.reg.layers})" if cfg.reg.view == "tokens" else "")
        print(
            f"| {', '.join(name for name, _ in named)} | "
            f"{', '.join(reg_label(c.reg.name, c.reg.weight) for _, c in named)} | {view} | "
            f"{statistics.median(ratios):.3g} | {statistics.median(cosines):+.3f} | "
            f"{averaged:.3g} | {1 / averaged:.3g} |"
        )


if __name__ == "__main__":
    main()
