"""How much of the encoder fine-tuning changes: every weight (``full``), LoRA adapters through
``peft`` (``lora``, Hu et al., ICLR 2022; the encoder stays in train mode, dropout on), or nothing
(``frozen``: the encoder in eval mode, a fixed function of the input probed through the norm).

In every mode the pooler (when ``model.pooling=pooler``), the norm and the head train, and the
norm, outside the encoder, is in train mode while training, so IsoBN's statistics update alike.
Checkpoints keep what trains (and every buffer); the fixed weights are reloaded from the
pre-trained model (:func:`drop_fixed_weights`). Options and defaults: docs/adaptation.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from torch import nn
from transformers.pytorch_utils import Conv1D

from isotune.errors import IsotuneError
from isotune.model.families import lora_target_modules

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def full(encoder: PreTrainedModel) -> None:
    """Every weight trains (an unused pooler aside: :func:`adapt_encoder`): the encoder stays as
    loaded, in train mode."""


def lora(
    encoder: PreTrainedModel,
    r: int,
    alpha: float,
    dropout: float,
    target_modules: Sequence[str] | None,
) -> None:
    """Add LoRA adapters to ``target_modules`` (:func:`lora_targets`); only they train."""
    try:
        import peft
    except ImportError as error:
        raise IsotuneError(
            "adapt=lora needs the peft package, which is not installed. Fix: pip install peft "
            "(README's set-up command installs it), or use adapt=full or adapt=frozen."
        ) from error
    targets = lora_targets(encoder, target_modules)
    # GPT-2's Conv1D keeps its weight as (in, out): peft must know, else it warns and flips it
    transposed = {isinstance(encoder.get_submodule(name), Conv1D) for name in targets}
    config = peft.LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=targets,
        bias="none",
        fan_in_fan_out=transposed == {True},
    )
    try:
        peft.inject_adapter_in_model(config, encoder)  # marks only the adapters trainable
    except ValueError as error:  # e.g. a target that is no linear layer
        raise IsotuneError(
            f"peft cannot add LoRA adapters to adapt.target_modules={list(target_modules or [])} "
            f"({error}). Fix: name linear layers, e.g. 'adapt.target_modules=[query,value]'."
        ) from error


def frozen(encoder: PreTrainedModel) -> None:
    """No encoder weight trains, and the encoder is in eval mode: its dropout is off."""
    encoder.requires_grad_(False)
    encoder.eval()


# adapt=<key> selects conf/adapt/<key>.yaml (with ``name: <key>``); its other keys are the
# function's options. The order is the tables' order.
ADAPTATIONS: dict[str, Callable[..., None]] = {"full": full, "lora": lora, "frozen": frozen}


def adapt_encoder(encoder: PreTrainedModel, adapt: Mapping, train_pooler: bool) -> str:
    """Prepare ``encoder`` in place for the mode ``adapt["name"]`` with the mode's options; the
    pooler trains (in train mode) when ``train_pooler``, and never otherwise: a pooler that the
    sentence vector does not use gets no gradient, which DDP would stop on. Returns the mode's
    name."""
    options = dict(adapt)
    name = options.pop("name")
    if name not in ADAPTATIONS:
        raise IsotuneError(f"Unknown adaptation {name!r}; use adapt=one of {list(ADAPTATIONS)}.")
    ADAPTATIONS[name](encoder, **options)
    pooler = getattr(encoder, "pooler", None)
    if train_pooler:
        pooler.requires_grad_(True).train()
    elif pooler is not None:
        pooler.requires_grad_(False)
    return name


def lora_targets(encoder: PreTrainedModel, entries: Sequence[str] | None) -> list[str]:
    """The full names of the modules LoRA adapts: those whose name is an entry or ends with
    ``.<entry>`` (peft's rule), but the pooler's, which trains whole or not at all; ``entries``
    null: the family's attention query and value projections. An entry that matches nothing is an
    error, not silently skipped (peft only complains when none matches)."""
    model_type = encoder.config.model_type
    if entries is None:
        entries = lora_target_modules(encoder.config, _linear_layers(encoder))
    names = [name for name, _ in encoder.named_modules() if name and not _in_pooler(name)]
    matched = {
        entry: [name for name in names if name == entry or name.endswith(f".{entry}")]
        for entry in entries
    }
    unmatched = [entry for entry, found in matched.items() if not found]
    if unmatched:
        raise IsotuneError(
            f"adapt.target_modules entries {unmatched} match no module of this {model_type!r} "
            "encoder (an entry matches a module whose name ends with it, e.g. query matches "
            "encoder.layer.0.attention.self.query; the pooler is never adapted). Fix: choose "
            f"among its linear layers: {_linear_layers(encoder)}."
        )
    return sorted({name for found in matched.values() for name in found})


def _in_pooler(name: str) -> bool:
    return name == "pooler" or name.startswith("pooler.")


def _linear_layers(encoder: nn.Module) -> list[str]:
    """The distinct names of the encoder's linear layers within a layer (``attention.self.query``
    for ``encoder.layer.0.attention.self.query``; GPT-2's are ``Conv1D``), for error
    messages."""
    return sorted(
        {
            re.sub(r"^.*\.\d+\.", "", name)
            for name, module in encoder.named_modules()
            if isinstance(module, (nn.Linear, Conv1D)) and not _in_pooler(name)
        }
    )


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode for a pass, then every submodule back in its own mode: a frozen
    encoder stays in eval mode while the head trains (``module.train(was_training)`` would put
    the whole model in one mode)."""
    modes = [(submodule, submodule.training) for submodule in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for submodule, mode in modes:
            submodule.training = mode


def parameter_counts(module: nn.Module) -> dict[str, int | float]:
    """Trainable parameters, all parameters (adapters included) and the trainable fraction."""
    total = sum(parameter.numel() for parameter in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    return {"trainable": trainable, "total": total, "trainable_fraction": trainable / total}


def _fixed_parameters(module: nn.Module) -> dict[str, nn.Parameter]:
    return {name: p for name, p in module.named_parameters() if not p.requires_grad}


def drop_fixed_weights(state_dict: MutableMapping, module: nn.Module) -> None:
    """Leave the weights that do not train out of a checkpoint's ``state_dict``: they are the
    pre-trained model's, which the checkpoint's hyperparameters name, so a ``lora`` or ``frozen``
    checkpoint holds only what training changed (buffers such as IsoBN's statistics stay)."""
    for name in _fixed_parameters(module):
        state_dict.pop(name, None)


def restore_fixed_weights(state_dict: MutableMapping, module: nn.Module) -> None:
    """Put back what :func:`drop_fixed_weights` left out, from ``module`` as freshly built from the
    checkpoint's hyperparameters (so with the pre-trained weights), before the state is loaded."""
    for name, parameter in _fixed_parameters(module).items():
        state_dict.setdefault(name, parameter.detach())
