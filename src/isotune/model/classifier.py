"""The fine-tuning model: encoder -> sentence vector -> norm -> dropout -> linear head.

The sentence vector is the object of study: :meth:`GLUEClassifier.sentence_vector` gives it before
the norm, and ``self.norm`` turns it into the classifier's input, so isotropy callbacks can look at
both sides of the normalisation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import Precision
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
from torchmetrics import MeanMetric
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from isotune.data.metrics import build_metrics, compute_scores, predictions
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError, NonFiniteLossError
from isotune.model.adaptation import (
    adapt_encoder,
    drop_fixed_weights,
    eval_mode,
    restore_fixed_weights,
)
from isotune.model.encoders import load_encoder
from isotune.model.families import (
    FAMILIES,
    default_dropout,
    family_of,
    head_pooling,
    hidden_size,
    hidden_state_widths,
    takes_token_types,
)
from isotune.model.regularization import Regularization
from isotune.norms.registry import build_norm
from isotune.tracking.metric_keys import (
    EPOCH,
    LOSS,
    LOSS_REG,
    LOSS_TASK,
    REG_PREFIX,
    train_key,
    val_key,
)

if TYPE_CHECKING:
    from isotune.data import GLUEDataModule

log = logging.getLogger(__name__)

POOLINGS = ("pooler", "cls", "mean", "last")
ENCODER_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# optim.schedule after the warmup: (optimizer, warmup steps, total steps) -> scheduler
SCHEDULES = {
    "linear": get_linear_schedule_with_warmup,
    "constant": lambda optimizer, warmup, _: get_constant_schedule_with_warmup(optimizer, warmup),
}


class GLUEClassifier(L.LightningModule):
    """Fine-tunes a Hugging Face encoder on one GLUE task with a normalised sentence vector. Args
    mirror the config groups as plain mappings, so a checkpoint's hyperparameters rebuild the same
    model."""

    def __init__(
        self,
        task: Mapping,
        model: Mapping,
        norm: Mapping,
        optim: Mapping,
        reg: Mapping | None = None,
        adapt: Mapping | None = None,
        select_epoch: str = "best",
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)  # training.run_loggers logs the whole config
        self.task = TaskSpec.from_config(task)
        self.select_epoch = select_epoch  # isotune.training.epoch_choice
        pooling = model.get("pooling")
        if pooling is not None and pooling not in POOLINGS:
            raise IsotuneError(
                f"Unknown pooling {pooling!r}; use model.pooling=one of {list(POOLINGS)}, or null "
                "for what the family's own classifier reads."
            )
        self.encoder = load_encoder(model["name_or_path"])
        self.encoder.train()  # from_pretrained returns eval mode; Lightning keeps modes as found
        config = self.encoder.config
        # null: what the family's Hugging Face classifier reads (a decoder's: its last token)
        self.pooling = pooling or head_pooling(family_of(config, "what it pools"), config)
        self._check_pooler(model["name_or_path"])
        width = hidden_size(config)
        norm_options = dict(norm)
        try:
            self.norm = build_norm(norm_options.pop("name"), width, **norm_options)
        except ValueError as error:
            raise IsotuneError(
                f"norm={norm['name']} does not fit {model['name_or_path']} (hidden size "
                f"{width}): {error} Set it with norm.<option>=<value>."
            ) from error
        # The loss regularizer (reg=none: the task loss alone); reg.layers checked against the model
        self.regularization = Regularization(hidden_state_widths(config), **dict(reg or {}))
        dropout = model.get("dropout")
        self.dropout = nn.Dropout(default_dropout(config) if dropout is None else dropout)
        # token_type_ids go to the encoder only where they reach a segment embedding (None: a
        # family the table does not know gets what its tokenizer gives)
        uses_token_types = takes_token_types(config)
        self.encoder_inputs = tuple(
            key
            for key in ENCODER_INPUTS
            if key != "token_type_ids" or uses_token_types is not False
        )
        self.head = nn.Linear(width, self.task.num_labels)
        nn.init.normal_(self.head.weight, std=getattr(config, "initializer_range", 0.02))
        nn.init.zeros_(self.head.bias)
        # What of the encoder trains (adapt=full when absent: checkpoints older than the option);
        # after the head's initialisation, so that full fine-tuning draws the same numbers as ever.
        self.adaptation = adapt_encoder(
            self.encoder, adapt or {"name": "full"}, train_pooler=self.pooling == "pooler"
        )
        self.optim = dict(optim)
        self.val_metrics = nn.ModuleDict(
            {
                split: build_metrics(self.task.metrics, self.task.num_labels)
                for split in self.task.eval_splits
            }
        )
        self.val_losses = nn.ModuleDict({split: MeanMetric() for split in self.task.eval_splits})
        # Dev scores of the primary split after each epoch; saved in checkpoints, read by results.
        self.history: list[dict[str, float]] = []

    def _check_pooler(self, name_or_path: str) -> None:
        """``pooling=pooler`` needs a pooler layer; one that pre-training did not train (RoBERTa,
        MPNet) trains from where it starts, which the log says once."""
        if self.pooling != "pooler":
            return
        config = self.encoder.config
        family = FAMILIES.get(config.model_type)
        if getattr(self.encoder, "pooler", None) is None:
            head = (
                f" ({family.name}'s own classifier reads {head_pooling(family, config)})"
                if family
                else ""
            )
            raise IsotuneError(
                f"{name_or_path} has no pooler layer{head}; use model.pooling=cls, mean or last."
            )
        if family is not None and not family.trained_pooler:
            log.info(
                "model.pooling=pooler: %s checkpoints carry no pooler trained in pre-training; "
                "it trains from its initial weights (the family's own classifier reads %s).",
                family.name,
                head_pooling(family, config),
            )

    def encode(self, batch: Mapping[str, Tensor], output_hidden_states: bool = False):
        """The encoder's output for a batch (with every layer's states when asked)."""
        inputs = {key: batch[key] for key in self.encoder_inputs if key in batch}
        return self.encoder(**inputs, output_hidden_states=output_hidden_states)

    def pool(self, output, attention_mask: Tensor) -> Tensor:
        """The sentence vector (n x d) from an encoder output, before the normalisation.

        ``last`` reads the last real token, the rightmost position the attention mask keeps,
        with right or left padding alike, as decoders' Hugging Face classifiers do (they find it
        from ``pad_token_id`` in the input ids; with the pad token set to the end-of-sequence
        token, only the mask tells a real end from padding). ``cls`` reads the first real token
        likewise (:func:`first_token`): position 0 is padding on the families that pad left."""
        if self.pooling == "pooler":
            return output.pooler_output
        hidden = output.last_hidden_state
        if self.pooling == "cls":
            return first_token(hidden, attention_mask)
        if self.pooling == "last":
            positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
            last = (positions * attention_mask).argmax(dim=1)
            return hidden[torch.arange(len(hidden), device=hidden.device), last]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)

    def sentence_vector(self, batch: Mapping[str, Tensor]) -> Tensor:
        """The pooled sentence vector (n x d), before the normalisation."""
        return self.pool(self.encode(batch), batch["attention_mask"])

    def classify(self, sentence: Tensor) -> Tensor:
        """Logits from sentence vectors before the norm: norm -> dropout -> head."""
        return self.head(self.dropout(self.norm(sentence)))

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        """Logits (n x num_labels; one score per example for regression)."""
        return self.classify(self.sentence_vector(batch))

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        if self.task.is_regression:
            return F.mse_loss(logits.squeeze(-1).float(), labels.float())
        return F.cross_entropy(logits.float(), labels)

    def training_loss(self, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """The loss to minimise, and its parts to log: the task loss and, with a regularizer,
        its weighted penalty and the quantity the penalty measures (e.g. ``reg_isoscore_star``).
        The encoder returns every layer's states only when the regularizer needs them."""
        reg = self.regularization
        output = self.encode(batch, output_hidden_states=reg.needs_hidden_states)
        sentence = self.pool(output, batch["attention_mask"])
        task_loss = self.loss(self.classify(sentence), batch["labels"])
        if not reg.active:
            return task_loss, {LOSS_TASK: task_loss}
        penalty = reg(output.hidden_states, sentence, batch["attention_mask"])
        measure, value = reg.measure(penalty)
        term = reg.weight * penalty
        parts = {LOSS_TASK: task_loss, LOSS_REG: term, REG_PREFIX + measure: value}
        return task_loss + term, parts

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        loss, parts = self.training_loss(batch)
        self.log_dict({train_key(k): v for k, v in parts.items()}, on_step=True, on_epoch=True)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"The training loss became {loss.item()} at step {self.global_step} "
                f"(epoch {self.current_epoch}). Stopped instead of training on garbage. Try a "
                "lower optim.lr, gradient clipping (trainer.gradient_clip_val) or full precision."
            )
        self.log(train_key(LOSS), loss, on_step=True, on_epoch=True, prog_bar=True)
        self.log(train_key("lr"), self.lr_schedulers().get_last_lr()[0], on_step=True)
        return loss

    def decayed(self, parameter: nn.Parameter) -> bool:
        """Whether weight decay pulls ``parameter`` towards 0: only the matrices (2-D and up)
        outside the sentence vector's norm. Told by where a parameter lives and its shape, never by
        a list of classes, so a new norm's gain (or IterNorm's affine weight) is exempt without
        being named: every parameter of ``self.norm``, and every 1-D gain or bias anywhere (a
        LayerNorm's, the head's), as Hugging Face and nanoGPT exempt them."""
        in_norm = any(parameter is own for own in self.norm.parameters())
        return parameter.dim() >= 2 and not in_norm

    def configure_optimizers(self):
        """AdamW with linear warmup, then ``optim.schedule``; weight decay only where
        :meth:`decayed` says; fused or foreach as :meth:`fused_adamw` says."""
        parameters = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {
                "params": [p for p in parameters if self.decayed(p)],
                "weight_decay": self.optim["weight_decay"],
            },
            {"params": [p for p in parameters if not self.decayed(p)], "weight_decay": 0.0},
        ]
        fused = self.fused_adamw(parameters)
        optimizer = torch.optim.AdamW(
            groups,
            lr=self.optim["lr"],
            eps=self.optim["adam_eps"],
            betas=tuple(self.optim["betas"]),
            fused=fused or None,
            foreach=None if fused else True,
        )
        total_steps = self.trainer.estimated_stepping_batches
        if not math.isfinite(total_steps):
            raise IsotuneError(
                "Set trainer.max_epochs or trainer.max_steps: the schedule needs an end."
            )
        scheduler = SCHEDULES[self.optim.get("schedule", "linear")](
            optimizer, math.ceil(self.optim["warmup_ratio"] * total_steps), int(total_steps)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    def fused_adamw(self, parameters: list[nn.Parameter]) -> bool:
        """Whether AdamW runs as one fused kernel (``optim.fused``). ``auto`` (the default): where
        torch has the kernel for the parameters' device (CUDA, as Hugging Face's ``Trainer`` since
        torch 2.8; this CPU too: 0.13x of foreach's step, benchmarks/bench_optimizer.py), except
        under float16's gradient scaler, whose clipping needs the gradients unscaled before the
        step. ``true`` insists (one error where it cannot run), ``false`` keeps foreach."""
        choice = self.optim.get("fused", "auto")  # as record.same_run continues older runs
        if choice not in ("auto", True, False):
            raise IsotuneError(
                f"optim.fused={choice!r} is none of auto, true, false. Fix: optim.fused=auto "
                "(fused where torch has the kernel), true or false (foreach)."
            )
        if choice is False:
            return False
        devices = {parameter.device.type for parameter in parameters}
        runs_here = devices <= set(_get_fused_kernels_supported_devices())  # as AdamW checks
        plugin = getattr(self._trainer, "precision_plugin", None)  # none outside a Trainer
        scaler = getattr(plugin, "scaler", None)
        if choice == "auto":
            return runs_here and scaler is None
        if not runs_here or scaler is not None:
            why = "a float16 gradient scaler" if runs_here else f"parameters on {sorted(devices)}"
            raise IsotuneError(
                f"optim.fused=true: torch's fused AdamW cannot run here ({why}). Fix: "
                "optim.fused=auto (fused where it can run) or optim.fused=false."
            )
        return True

    def configure_gradient_clipping(
        self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        """Lightning's mixed precision refuses to clip for an optimizer that unscales gradients in
        its own step (fused AdamW), which only a float16 gradient scaler needs: under bf16 there
        is no scaler, so the gradients are clipped as at full precision."""
        plugin = self.trainer.precision_plugin
        if gradient_clip_val and getattr(plugin, "scaler", True) is None:
            Precision.clip_gradients(
                plugin, optimizer, gradient_clip_val, gradient_clip_algorithm or "norm"
            )
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_train_epoch_start(self) -> None:
        if self.regularization.needs_shrinkage(self.current_epoch):
            self.refresh_shrinkage(self.trainer.datamodule, self.current_epoch)

    @torch.no_grad()
    def refresh_shrinkage(self, datamodule: GLUEDataModule, epoch: int) -> None:
        """I-STAR's Sigma_S for ``epoch`` from the model as it stands, in eval mode, over the
        regularizer's seeded training subset; every submodule gets its mode back afterwards."""
        reg = self.regularization
        log.info("I-STAR: Sigma_S for epoch %d from the training subset", epoch + 1)
        batches = reg.shrinkage_batches(
            datamodule.dataset("train"), datamodule.collate, datamodule.eval_batch_size, epoch
        )
        with eval_mode(self):
            reg.refresh_shrinkage((self._regularized_points(batch) for batch in batches), epoch)

    def _regularized_points(self, batch: Mapping[str, Tensor]) -> Tensor:
        batch = {key: value.to(self.device) for key, value in batch.items()}
        output = self.encode(batch, output_hidden_states=self.regularization.view == "tokens")
        sentence = self.pool(output, batch["attention_mask"])
        return self.regularization.points(output.hidden_states, sentence, batch["attention_mask"])

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int, dataloader_idx: int = 0):
        split = self.task.eval_splits[dataloader_idx]
        logits = self(batch)
        self.val_losses[split].update(self.loss(logits, batch["labels"]), weight=len(logits))
        self.val_metrics[split].update(predictions(logits), batch["labels"])

    def on_validation_epoch_end(self) -> None:
        for split in self.task.eval_splits:
            scores = compute_scores(self.val_metrics[split])
            scores[LOSS] = float(self.val_losses[split].compute())
            self.val_metrics[split].reset()
            self.val_losses[split].reset()
            prefix = self.task.log_prefix(split)
            self.log_dict({val_key(prefix, name): value for name, value in scores.items()})
            fitting = self.trainer.state.fn == "fit" and not self.trainer.sanity_checking
            if split == self.task.primary_split and fitting:  # not for trainer.validate()
                self._record_epoch(scores)

    def _record_epoch(self, scores: dict[str, float]) -> None:
        self.history.append({"epoch": self.current_epoch + 1, "step": self.global_step, **scores})
        self.log(EPOCH, float(self.current_epoch + 1))  # the dev scores' axis
        primary = self.task.primary_metric
        best = max(entry[primary] for entry in self.history)
        self.log(
            val_key(self.task.log_prefix(self.task.primary_split), f"{primary}_best"),
            best,
            prog_bar=True,
        )

    def best_epoch(self) -> dict[str, float] | None:
        """The history entry the run reports: the one with the best primary dev metric (the
        earliest one on ties), or the last one under ``select_epoch=last``."""
        if not self.history:
            return None
        if self.select_epoch == "last":
            return self.history[-1]
        return max(self.history, key=lambda entry: entry[self.task.primary_metric])

    def predict_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> tuple[Tensor, Tensor]:
        """(example index, predicted class id or score) for leaderboard-format test predictions."""
        return batch["idx"], predictions(self(batch))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["isotune_history"] = self.history
        drop_fixed_weights(checkpoint["state_dict"], self)  # lora, frozen: only what trains

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.history = list(checkpoint.get("isotune_history", []))
        restore_fixed_weights(checkpoint["state_dict"], self)  # the pre-trained weights
        own = self.state_dict().keys()
        stray = sorted(
            {
                name.partition(".lora_")[0]
                for name in checkpoint["state_dict"]
                if ".lora_" in name and name not in own
            }
        )
        if stray:
            raise IsotuneError(
                f"The checkpoint holds LoRA adapters on modules this model does not adapt "
                f"({len(stray)}, e.g. {stray[0]}). With adapt.target_modules=null, LoRA adapted "
                "query, key and value of BERT and RoBERTa before isotune took each family's "
                "attention query and value projections (docs/training.md#model-families); "
                "such a checkpoint cannot be rebuilt now. Fix: train it again, with "
                "'adapt.target_modules=[query,key,value]' to repeat the old setting."
            )


def model_from_checkpoint(checkpoint: Mapping[str, Any], file: Path) -> GLUEClassifier:
    """The model a checkpoint read as data (from ``file``, by
    :func:`isotune.record.kept_checkpoint.read_kept_checkpoint`) holds, on the CPU: its
    hyperparameters build it, then its weights and history load, as Lightning's
    ``load_from_checkpoint`` would, without a second read of the file."""
    try:
        hyperparameters = dict(checkpoint["hyper_parameters"])
        model = GLUEClassifier(**hyperparameters)
        model.on_load_checkpoint(checkpoint)
        model.load_state_dict(checkpoint["state_dict"])
        return model
    except IsotuneError:
        raise  # e.g. the pre-trained encoder it names is not available
    except (OSError, RuntimeError, KeyError, TypeError, ValueError) as error:
        reason = str(error).strip().split(". ")[0][:200]  # torch's messages run on for lines
        raise IsotuneError(
            f"Cannot read {file} as a checkpoint written by train.py "
            f"({type(error).__name__}: {reason}). Is it from this project?"
        ) from error


def first_token(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Each example's state at the first position its attention mask keeps (n x d): position 0
    with right padding, after the padding on families that pad left (Llama, Gemma)."""
    first = attention_mask.argmax(dim=1)
    return hidden[torch.arange(len(hidden), device=hidden.device), first]
