"""Isotropy penalties added to the task loss (``task loss + weight * penalty``): I-STAR, Cor-Reg
and CosReg, each as its authors released it (per function, with the departures). A negative weight
pushes away from isotropy (I-STAR's released example uses -5).

The statistics are computed in at least float32 with autocast disabled, so a bf16 or fp16 forward
pass does not degrade a covariance, an eigendecomposition or a sum over thousands of cosines.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from isotune.isotropy import isoscore_star


def _in_float32(penalty: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Run ``penalty`` on a checked (points >= 2, dims) matrix, autocast off, in float32 or
    float64."""

    @functools.wraps(penalty)
    def checked(points: Tensor, *args, **kwargs) -> Tensor:
        if points.ndim != 2 or points.shape[0] < 2:
            raise ValueError(
                f"{penalty.__name__} needs a (points, dims) matrix of at least 2 points, got "
                f"shape {tuple(points.shape)}; flatten token states to (tokens, hidden) first."
            )
        dtype = torch.promote_types(points.dtype, torch.float32)
        with torch.autocast(device_type=points.device.type, enabled=False):
            return penalty(points.to(dtype), *args, **kwargs)

    return checked


def _inverse_norms(x: Tensor, dim: int) -> Tensor:
    """1 / the L2 norms of ``x`` along ``dim`` (kept as a size-1 dim), 0 where a norm is 0: a zero
    vector has no direction, so it gets neither a value nor a gradient. The divisor is made safe
    rather than the quotient masked, since 0/0 in an unused torch.where branch still makes NaN
    gradients."""
    norms = torch.linalg.vector_norm(x, dim=dim, keepdim=True)
    nonzero = norms > 0
    return nonzero / torch.where(nonzero, norms, torch.ones_like(norms))


@_in_float32
def istar_penalty(points: Tensor, shrinkage_cov: Tensor | None = None, zeta: float = 0.2) -> Tensor:
    """I-STAR penalty ``1 - IsoScore*(points)`` (Rudman & Eickhoff, ICLR 2024), a 0-d tensor in
    [0, 1]; IsoScore* is IsoScore of ``(1 - zeta) cov(points) + zeta Sigma_S``
    (docs/isotropy.md#isoscore-and-isoscore). The released code (``bcbi-edu/p_eickhoff_isoscore``,
    ``I-STAR/``) takes ``Sigma_S`` from up to 250,000 of the model's own points, rebuilt every
    epoch (:class:`ShrinkageCovariance`); shrinkage keeps the score informative on a mini-batch
    with fewer points than dimensions. ``shrinkage_cov=None``: ``isoscore_star``'s default target.
    """
    return 1 - isoscore_star(points, shrinkage_cov, zeta)


@_in_float32
def correg_penalty(points: Tensor) -> Tensor:
    """Cor-Reg penalty ``|| corr(points) - I ||_F``: the Frobenius norm (not its square) of the
    correlations between distinct dimensions (Zhang et al., isoIntentBERT, NAACL 2022, released
    ``utils/models.py::loss_covariance``, weight 0.04 there).

    The released code divides the covariance by the outer product of the standard deviations, so
    a constant dimension gives NaN; here a constant dimension has zero correlation with every
    other one, and the diagonal, exactly 1 for the others, is left out instead of subtracted, so
    the value is the released one wherever that is defined.
    """
    centred = points - points.mean(dim=0)
    unit = centred * _inverse_norms(centred, dim=0)
    correlation = unit.mT @ unit
    off_diagonal = correlation - torch.diag_embed(correlation.diagonal())
    return torch.linalg.matrix_norm(off_diagonal)


@_in_float32
def cosreg_penalty(points: Tensor) -> Tensor:
    """CosReg penalty: the mean cosine between distinct points, ``(sum(P P^T) - N) / N^2`` with P
    the L2-normalised points (Gao et al. 2019, as released in ``I-STAR/regularizers.py``).

    The N^2 denominator (not N (N - 1)) is the released one. ``sum(P P^T)`` is ``|sum_i p_i|^2``,
    so the value costs O(N d) instead of an N x N matrix, which matters for every token state of a
    batch. A zero vector has no direction: it is left out (N counts the non-zero points), where
    the released code returned NaN.
    """
    inverse_norms = _inverse_norms(points, dim=1)
    unit_sum = (points * inverse_norms).sum(dim=0)
    count = (inverse_norms > 0).sum()
    return (unit_sum @ unit_sum - count) / count.clamp_min(1).square()


@dataclass(frozen=True)
class Regularizer:
    """One ``reg`` option: its penalty (None for ``none``) and its default view: ``tokens``
    (token states flattened to (tokens, hidden)) or ``sentence`` (before the norm)."""

    penalty: Callable[..., Tensor] | None
    view: str | None


REGULARIZERS: dict[str, Regularizer] = {
    "none": Regularizer(penalty=None, view=None),
    "istar": Regularizer(penalty=istar_penalty, view="tokens"),  # released: every layer's tokens
    "correg": Regularizer(penalty=correg_penalty, view="sentence"),  # released: last-layer [CLS]
    "cosreg": Regularizer(penalty=cosreg_penalty, view="tokens"),  # released: last layer's tokens
}


class ShrinkageCovariance:
    """Streaming covariance (ddof 1) of up to ``max_points`` rows: I-STAR's shrinkage target.

    The released code runs the model in eval mode over training batches until it has more than
    250,000 points and takes ``np.cov`` of them. Here rows arrive in chunks through
    :meth:`update` and are folded into a float64 running mean and scatter matrix (Chan et al.'s
    pairwise update: memory O(d^2), not O(max_points d)). The chunk that crosses the budget
    contributes a seeded random subset of its rows, so a flattened (layers, tokens) chunk is not
    cut by layer; later chunks are ignored. :attr:`full` tells the caller when to stop feeding,
    so the rows should come from a random (seeded) subset of the data.
    """

    def __init__(self, num_features: int, max_points: int, seed: int = 0) -> None:
        if num_features < 1 or max_points < 2:
            raise ValueError(
                f"ShrinkageCovariance needs num_features >= 1 and max_points >= 2, got "
                f"num_features={num_features} and max_points={max_points}."
            )
        self.num_features = num_features
        self.max_points = max_points
        self._generator = torch.Generator().manual_seed(seed)
        self.num_points = 0
        self._mean: Tensor | None = None
        self._scatter: Tensor | None = None

    @property
    def full(self) -> bool:
        """True once ``max_points`` rows are in: further updates change nothing."""
        return self.num_points >= self.max_points

    @torch.no_grad()
    def update(self, rows: Tensor) -> None:
        """Fold a (rows, num_features) chunk into the statistics, within the budget."""
        if rows.ndim != 2 or rows.shape[1] != self.num_features:
            raise ValueError(
                f"ShrinkageCovariance expects rows of shape (n, {self.num_features}), got "
                f"{tuple(rows.shape)}."
            )
        room = self.max_points - self.num_points
        if room <= 0 or rows.shape[0] == 0:
            return
        if rows.shape[0] > room:
            keep = torch.randperm(rows.shape[0], generator=self._generator)[:room]
            rows = rows[keep.to(rows.device)]
        with torch.autocast(device_type=rows.device.type, enabled=False):
            self._fold(rows.to(torch.promote_types(rows.dtype, torch.float32)))

    def _fold(self, rows: Tensor) -> None:
        if not torch.isfinite(rows).all():
            raise ValueError(
                "ShrinkageCovariance got rows with NaN or inf values; a shrinkage target built "
                "from them would make every I-STAR penalty NaN."
            )
        count = rows.shape[0]
        mean = rows.mean(dim=0)
        centred = rows - mean  # centred in the rows' precision, accumulated in float64
        scatter = (centred.mT @ centred).double()
        mean = mean.double()
        if self._mean is None:
            self._mean, self._scatter = mean, scatter
        else:
            total = self.num_points + count
            delta = mean - self._mean
            self._scatter += scatter + torch.outer(delta, delta) * (self.num_points * count / total)
            self._mean += delta * (count / total)
        self.num_points += count

    def covariance(self) -> Tensor:
        """The float32 (num_features, num_features) sample covariance of the rows kept so far."""
        if self.num_points < 2:
            raise ValueError(
                f"ShrinkageCovariance has {self.num_points} row(s); a covariance needs at least 2. "
                "Feed more rows with update() before calling covariance()."
            )
        return (self._scatter / (self.num_points - 1)).float()
