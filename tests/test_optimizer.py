"""AdamW fused where torch has the kernel (optim.fused=auto), foreach on request, refused where
asked for and impossible; gradients still clipped under bf16 with the fused step."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest
import torch

from isotune.errors import IsotuneError
from tests.helpers.classifiers import tiny_model_and_data


class GradientNorms(L.Callback):
    """The gradients' total norm each optimizer step used (read after it: clipped, not yet
    zeroed)."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_train_start(self, trainer, module) -> None:
        trainer.optimizers[0].register_step_post_hook(self._record)

    def _record(self, optimizer, args, kwargs) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]]
        norms = [g.norm() for g in grads if g is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack(norms))))


def fit_two_steps(train_config, *overrides: str, precision: str = "32-true", clip: float = 1.0):
    cfg = train_config("trainer.max_epochs=1", *overrides)
    model, datamodule = tiny_model_and_data(cfg)
    norms = GradientNorms()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=0,
        precision=precision,
        gradient_clip_val=clip,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[norms],
    )
    trainer.fit(model, datamodule=datamodule)
    return trainer.optimizers[0], norms.norms


@pytest.mark.parametrize(("choice", "fused"), [("auto", True), ("true", True), ("false", False)])
def test_fused_where_torch_has_the_kernel_unless_asked_not_to(train_config, choice, fused):
    optimizer, _ = fit_two_steps(train_config, f"optim.fused={choice}")
    assert bool(optimizer.defaults["fused"]) is fused
    assert bool(optimizer.defaults["foreach"]) is not fused


def test_under_bf16_the_fused_step_still_clips_the_gradients(train_config):
    optimizer, norms = fit_two_steps(train_config, precision="bf16-mixed", clip=1e-3)
    assert optimizer.defaults["fused"]
    assert len(norms) == 2 and max(norms) <= 1e-3 * 1.01


def test_fused_true_under_a_float16_scaler_is_refused_naming_the_fix(train_config):
    cfg = train_config("optim.fused=true")
    model, _ = tiny_model_and_data(cfg)
    model._trainer = SimpleNamespace(precision_plugin=SimpleNamespace(scaler=object()))
    parameters = list(model.parameters())
    with pytest.raises(IsotuneError, match=r"optim.fused=true: .*a float16 gradient scaler"):
        model.fused_adamw(parameters)
    model.optim["fused"] = "auto"
    assert model.fused_adamw(parameters) is False  # auto: foreach under the scaler


def test_a_fused_value_that_is_no_choice_is_refused(train_config):
    cfg = train_config("optim.fused=yes")
    model, _ = tiny_model_and_data(cfg)
    with pytest.raises(IsotuneError, match=r"optim.fused='yes' is none of auto, true, false"):
        model.fused_adamw(list(model.parameters()))
