"""``trainer=cpu_bf16``: bf16 autocast on the CPU, with IsoBN's statistics, the loss, the metrics
and the isotropy measures in float32."""

from __future__ import annotations

import math

import pytest
import torch

from isotune.data import GLUEDataModule
from isotune.data.metrics import compute_scores
from isotune.data.tasks import TaskSpec
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import load_tokenizer
from isotune.training.run import train


@pytest.mark.slow
def test_tiny_cpu_bf16_run_completes_with_float32_isobn_statistics(train_config, tmp_path):
    cfg = train_config("trainer=cpu_bf16", "norm=isobn", "debug=limit")
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == ("cpu", "bf16-mixed")
    results = train(cfg)
    assert results["status"] == "completed" and results["steps"] == 8  # 2 epochs x 4 batches
    assert all(math.isfinite(value) for value in results["best"].values())
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    for name in ("run_cov", "run_std"):
        assert state[f"norm.{name}"].dtype == torch.float32 and state[f"norm.{name}"].any(), name
    assert state["norm.num_batches_tracked"].item() == 8
    assert state["head.weight"].dtype == torch.float32  # mixed precision keeps float32 weights
    final = results["isotropy"]["final"]
    assert all(math.isfinite(value) for value in final.values())
    assert 0 < final["iso/post_norm/isoscore"] <= 1


@pytest.mark.parametrize("task", ["rte", "stsb"])
def test_under_bf16_autocast_the_loss_and_metrics_are_float32(train_config, task):
    """The head computes in bf16 under autocast; the loss and the metrics' states do not."""
    torch.manual_seed(0)  # the head's draw: eight bf16 scores of another one can tie (NaN Pearson)
    cfg = train_config(f"task={task}", "norm=isobn")
    model = GLUEClassifier(task=cfg.task, model=cfg.model, norm=cfg.norm, optim=cfg.optim)
    datamodule = GLUEDataModule(
        TaskSpec.from_config(cfg.task),
        load_tokenizer(cfg.model.name_or_path),
        glue_dir=cfg.paths.glue_dir,
    )
    dataset = datamodule.dataset("validation")
    batch = datamodule.collate([dataset[i] for i in range(8)])
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        logits = model(batch)
        assert logits.dtype == torch.bfloat16
        assert model.loss(logits, batch["labels"]).dtype == torch.float32
        model.eval().validation_step(batch, 0)
    states = [
        getattr(metric, name)
        for metrics in (*model.val_metrics.values(), *model.val_losses.values())
        for metric in metrics.modules()
        for name in getattr(metric, "_defaults", {})
    ]
    floating = [state for state in states if torch.is_tensor(state) and state.is_floating_point()]
    assert floating and {state.dtype for state in floating} == {torch.float32}
    scores = compute_scores(model.val_metrics["validation"])
    assert all(math.isfinite(value) for value in scores.values())
