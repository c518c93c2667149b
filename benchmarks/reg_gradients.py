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
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from bench_interventions import build, intervention_configs
from bench_throughput import quiet_offline_glue_dir, rte_datamodule
from omegaconf import OmegaConf

from isotune.model.classifier import GLUEClassifier
from isotune.tracking.metric_keys import LOSS_REG, LOSS_TASK
from isotune.tracking.run_names import reg_label


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8, help="training batches measured")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument(
        "--override",
        nargs="*",
        default=[],
        help="key=value settings for every preset with a regularizer, e.g. reg.layers=last",
    )
    args = parser.parse_args()
    presets = {}  # presets whose penalties differ only in weight (istar_less, istar_more): one row
    for name, cfg in intervention_configs().items():
        if cfg.reg.name != "none":
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(args.override))
            if cfg.reg.weight == 0:
                parser.error(
                    f"--override reg.weight={cfg.reg.weight} leaves {name} no penalty to measure; "
                    "give any non-zero weight (the ratios are per unit weight) or leave it out"
                )
            penalty = OmegaConf.to_container(cfg.reg, resolve=True)
            penalty.pop("weight")
            presets.setdefault(json.dumps(penalty, sort_keys=True), []).append((name, cfg))
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
