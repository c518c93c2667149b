"""The ``reg`` axis of a run: what a penalty sees, and I-STAR's shrinkage target Sigma_S.

The training loss is ``task loss + weight x penalty(X)`` (:mod:`isotune.isotropy.penalties`),
with X the hidden states of ``layers`` stacked to (tokens x layers, hidden) (``tokens``; padding
only with ``include_padding``), or the sentence vector before the norm (``sentence``: after a
whitening or IsoBN norm it would be trivially isotropic). I-STAR shrinks the batch covariance
towards Sigma_S, the same view's covariance over a seeded training subset, recomputed in eval
mode at every epoch start as released (``shrinkage_sample``: a fresh subset each ``epoch``, or a
``fixed`` one so that Sigma_S changes only with the model); a buffer, so a checkpoint carries it.
Settings and defaults: ``docs/interventions.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from isotune.errors import IsotuneError
from isotune.isotropy.penalties import REGULARIZERS, ShrinkageCovariance
from isotune.model.families import hidden_state_indices
from isotune.norms.whitening import Float32Statistics
from isotune.tracking.run_names import reg_label

VIEWS = ("tokens", "sentence")
SHRINKAGE_SAMPLES = ("epoch", "fixed")  # Sigma_S's examples: drawn anew each epoch, or once
# What each penalty's value is, logged as train/reg_<name>: I-STAR's penalty is 1 - IsoScore*.
MEASURES: dict[str, tuple[str, Callable[[Tensor], Tensor]]] = {
    "istar": ("isoscore_star", lambda penalty: 1 - penalty),
    "correg": ("correlation_fro", lambda penalty: penalty),
    "cosreg": ("mean_cosine", lambda penalty: penalty),
}


class ShrinkageTarget(Float32Statistics):
    """Sigma_S as module state: saved in checkpoints, float32 under dtype casts, with the epoch
    it was computed for (-1: not yet), so a checkpoint from inside an epoch resumes with it."""

    STATISTICS = ("covariance",)

    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.register_buffer(
            "covariance", torch.zeros(num_features, num_features, dtype=torch.float32)
        )
        self.register_buffer("epoch", torch.tensor(-1, dtype=torch.long))


class Regularization(nn.Module):
    """The penalty of one ``reg`` config on a batch's encoder output, weight not applied. ``widths``
    (of each hidden state, 0 = the embeddings: :func:`~isotune.model.families.hidden_state_widths`)
    resolves ``layers``; an index the model lacks, or layers of different widths, which one X cannot
    stack, is an :class:`IsotuneError`."""

    def __init__(
        self,
        widths: Sequence[int],
        name: str = "none",
        weight: float = 0.0,
        view: str | None = None,
        layers: str | int | Sequence[int] = "last",
        include_padding: bool = False,
        zeta: float = 0.2,
        shrinkage_points: int = 50_000,
        shrinkage_examples: int = 1000,
        shrinkage_sample: str = "epoch",
        seed: int = 0,
    ) -> None:
        super().__init__()
        if name not in REGULARIZERS:
            raise IsotuneError(
                f"Unknown regularizer reg.name={name!r}; choose reg= one of {list(REGULARIZERS)}."
            )
        self.name = name
        self.weight = float(weight)
        self.penalty = REGULARIZERS[name].penalty
        self.view = view or REGULARIZERS[name].view
        self.layers = _layer_indices(layers, len(widths) - 1) if self.view == "tokens" else ()
        width = _one_width(layers, self.layers, widths) if self.layers else widths[-1]
        self.include_padding = include_padding
        self.zeta = zeta
        self.shrinkage_points = shrinkage_points
        self.shrinkage_examples = shrinkage_examples
        self.shrinkage_sample = shrinkage_sample
        self.seed = seed
        shrinks = name == "istar" and zeta > 0
        self.shrinkage = ShrinkageTarget(width) if shrinks else None

    def extra_repr(self) -> str:
        return f"{reg_label(self.name, self.weight)}, view={self.view}, layers={self.layers}"

    @property
    def active(self) -> bool:
        """Whether the loss gets a term (``reg=none`` or a weight of 0 leave it alone)."""
        return self.penalty is not None and self.weight != 0

    @property
    def needs_hidden_states(self) -> bool:
        return self.active and self.view == "tokens"

    def points(
        self, hidden_states: Sequence[Tensor], sentence: Tensor, attention_mask: Tensor
    ) -> Tensor:
        """X for one batch: (rows, hidden), from the encoder's hidden states (0 = embeddings;
        empty unless :attr:`needs_hidden_states`) or the sentence vectors before the norm."""
        if self.view == "sentence":
            return sentence
        if self.include_padding:
            return torch.cat([hidden_states[i].flatten(0, 1) for i in self.layers])
        real = attention_mask.bool()
        return torch.cat([hidden_states[i][real] for i in self.layers])

    def forward(
        self, hidden_states: Sequence[Tensor], sentence: Tensor, attention_mask: Tensor
    ) -> Tensor:
        """The penalty of the batch (a 0-d float32 tensor with gradient). I-STAR needs Sigma_S
        computed first (:meth:`refresh_shrinkage`; the LightningModule does it every epoch)."""
        points = self.points(hidden_states, sentence, attention_mask)
        if self.name != "istar":
            return self.penalty(points)
        target = self.shrinkage.covariance if self.shrinkage is not None else None
        return self.penalty(points, target, self.zeta)

    def measure(self, penalty: Tensor) -> tuple[str, Tensor]:
        """The penalty as the quantity it measures, e.g. ``("isoscore_star", 1 - penalty)``."""
        name, value = MEASURES[self.name]
        return name, value(penalty.detach())

    def needs_shrinkage(self, epoch: int) -> bool:
        """Whether Sigma_S must be computed for ``epoch`` (not if a checkpoint already holds it)."""
        return self.active and self.shrinkage is not None and int(self.shrinkage.epoch) != epoch

    def shrinkage_seed(self, epoch: int) -> int:
        """The seed of ``epoch``'s subset: the run's seed plus the epoch (``epoch`` sampling), or
        the run's seed alone (``fixed``)."""
        return self.seed + epoch if self.shrinkage_sample == "epoch" else self.seed

    def shrinkage_batches(
        self,
        dataset: Sequence,
        collate: Callable[[list], Mapping[str, Tensor]],
        batch_size: int,
        epoch: int,
    ) -> Iterator[Mapping[str, Tensor]]:
        """Batches of ``epoch``'s seeded training subset, in its random order: the rows come in
        until the budget is full, so that a prefix of them is still a random sample."""
        generator = torch.Generator().manual_seed(self.shrinkage_seed(epoch))
        chosen = torch.randperm(len(dataset), generator=generator)[: self.shrinkage_examples]
        for start in range(0, len(chosen), batch_size):
            yield collate([dataset[i] for i in chosen[start : start + batch_size].tolist()])

    @torch.no_grad()
    def refresh_shrinkage(self, rows: Iterable[Tensor], epoch: int) -> None:
        """Set Sigma_S for ``epoch`` to the covariance of the first ``shrinkage_points`` rows."""
        num_features = self.shrinkage.covariance.shape[0]
        estimate = ShrinkageCovariance(num_features, self.shrinkage_points, seed=self.seed)
        for chunk in rows:
            estimate.update(chunk)
            if estimate.full:
                break
        self.shrinkage.covariance.copy_(estimate.covariance())
        self.shrinkage.epoch.fill_(epoch)


def _layer_indices(layers: str | int | Sequence[int], num_layers: int) -> tuple[int, ...]:
    """Hidden-state indices (0 = embeddings, ``num_layers`` = last) of ``reg.layers``."""
    if layers == "all":
        return tuple(range(1, num_layers + 1))
    if layers == "last":
        return (num_layers,)
    indices = (layers,) if isinstance(layers, int) else tuple(layers)
    return hidden_state_indices(indices, num_layers, "reg.layers", also=", all or last")


def _one_width(
    layers: str | int | Sequence[int], indices: Sequence[int], widths: Sequence[int]
) -> int:
    """The width of X: the one width of the hidden states ``indices``, or one error naming
    theirs (OPT-350m's last layer, after ``project_out``, is narrower than the others)."""
    found = {widths[i] for i in indices}
    if len(found) == 1:
        return found.pop()
    by_width = {w: [i for i in indices if widths[i] == w] for w in sorted(found, reverse=True)}
    shown = "; ".join(f"{w} wide: {ids}" for w, ids in by_width.items())
    widest = by_width[max(found)]
    raise IsotuneError(
        f"reg.layers={layers} takes hidden states of different widths on this model ({shown}), "
        "which one X cannot stack: the model's last hidden state is projected to another width. "
        f"Fix: reg.layers=last, or layers of one width, e.g. 'reg.layers={widest}'."
    )
