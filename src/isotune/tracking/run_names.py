"""How a run is named wherever it is shown: its configuration, the seed left out, so that tools
that aggregate seeds (W&B groups, TensorBoard's run list, sweep tables) put a configuration's runs
together. Plain strings: no W&B, Lightning or torch."""

from __future__ import annotations

from collections.abc import Sequence

# Overrides that do not change what is computed, that name a run folder, or whose effect results
# record otherwise (an intervention is its norm and reg): not part of a group or a configuration.
NOT_IN_GROUP = (
    "seed",  # and seed_init, seed_data: prefixes
    "failure.",  # the margin judging a run, recorded in its results.json
    "ckpt_path",
    "checkpoint.",  # what a run keeps of its checkpoints (a study's report runs: its models)
    "hydra.",
    "paths.",
    "trainer.enable_progress_bar",
    "logger",
    "intervention",
)


def reg_label(name: str, weight: float) -> str:
    """A regularizer with its weight, as tables and W&B groups name it: ``istar-1``, ``none``."""
    return name if name == "none" else f"{name}{float(weight):+g}"


def run_group(
    model: str, task: str, norm: str, overrides: Sequence[str] = (), reg: str = "none"
) -> str:
    """``model-task-norm[-reg]`` (``reg`` as :func:`reg_label` names it, left out when ``none``)
    plus the other overrides that change the run, seed excluded."""
    named = ("model=", "task=", "norm=", "reg=", "reg.weight=")
    extra = sorted(
        override
        for override in overrides
        if not override.startswith(named) and not override.lstrip("+~").startswith(NOT_IN_GROUP)
    )
    return "-".join([model, task, norm, *([reg] if reg != "none" else []), *extra])
