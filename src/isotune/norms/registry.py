"""Normalisations of the sentence vector: none, BatchNorm, IsoBN and IterNorm whitening.

IsoBN (Zhou, Lin & Ren, AAAI 2021) rescales each dimension of the sentence vector so that dimensions
with a large standard deviation, or strongly correlated with many others, stop dominating the
classifier's input. This module follows the authors' released code (``INK-USC/IsoBN`` on GitHub):
each of its quirks is a switch whose default reproduces it, and the cases where it returned NaN or
zeros have the edge rules listed in :class:`IsoBN`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch
from torch import Tensor, nn

from isotune.norms.ranges import MOMENTUM, NON_NEGATIVE, POSITIVE, SWITCH, Range
from isotune.norms.whitening import Float32Statistics, IterNormWhitening

__all__ = ["NORMS", "IsoBN", "Norm", "build_norm", "statistics_never_updated"]

log = logging.getLogger(__name__)


class IsoBN(Float32Statistics):
    """Isotropic batch normalisation of a batch of sentence vectors ``h`` (n x d).

    Training mode first folds the detached batch into running estimates of the covariance and the
    per-dimension standard deviation; both modes then multiply ``h`` by a per-dimension scale
    ``c * a`` computed from those estimates, with no gradient through the scale:

        rho_ij = clamp(run_cov_ij / (run_std_i run_std_j), -1, 1)
        a_i    = (mean_j(rho_ij^2) * run_std_i + eps) ^ (-beta)
        c      = sqrt(trace(run_cov) / (sum_i run_cov_ii a_i^2 + eps))

    so the total variance of the running covariance is preserved. No centring, no affine.

    The statistics are float32 buffers (saved in checkpoints, unlike the released code), computed
    outside autocast and kept float32 when the module is cast (``.half()``, ``bf16-true``; see
    :class:`~isotune.norms.whitening.Float32Statistics`), so reduced precision does not degrade
    them; the output has the input's dtype. Edge rules (the released code returned NaN or zeros in
    each case):

    - a dimension with no recorded variance (zero running std, e.g. constant so far) passes
      through unchanged (factor 1) and is left out of the means and sums above (over ``j`` and in
      ``c``); so before any statistics, or after constant batches only, the layer is the identity;
    - a batch of one example carries no variance and leaves the statistics untouched;
    - a batch with a NaN or inf leaves the statistics untouched and is counted in
      ``num_batches_skipped``; a warning names the count when the layer leaves training mode
      (checked there, not per step, to avoid a host-device sync on every step);
    - ``eps`` must be positive and ``beta`` non-negative (ValueError); non-floating input is a
      TypeError, since scaling integers would silently truncate.
    """

    STATISTICS = ("run_cov", "run_std")
    OPTIONS = MappingProxyType(  # each option's range: checked here and by the config check
        dict(momentum=MOMENTUM, eps=POSITIVE, beta=NON_NEGATIVE, bias_correction=SWITCH)
    )

    def __init__(
        self,
        num_features: int,
        momentum: float = 0.05,
        eps: float = 1e-3,
        beta: float = 0.5,
        bias_correction: bool = False,
    ) -> None:
        super().__init__()
        options = dict(momentum=momentum, eps=eps, beta=beta, bias_correction=bias_correction)
        self._set_options(num_features, **options)
        # Explicit dtypes: Lightning's bf16-true init context changes the default dtype.
        self.register_buffer(
            "run_cov", torch.zeros(num_features, num_features, dtype=torch.float32)
        )
        self.register_buffer("run_std", torch.zeros(num_features, dtype=torch.float32))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.register_buffer("num_batches_skipped", torch.tensor(0, dtype=torch.long))
        self._reported_skips = 0

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, momentum={self.momentum}, eps={self.eps}, beta={self.beta}, "
            f"bias_correction={self.bias_correction}"
        )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Checkpoints written before the skip counter existed skipped nothing.
        state_dict.setdefault(f"{prefix}num_batches_skipped", torch.tensor(0, dtype=torch.long))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def train(self, mode: bool = True):
        """Leaving training mode reports newly skipped batches: one sync per phase, not per step."""
        if self.training and not mode:
            self._report_skipped_batches()
        return super().train(mode)

    def _report_skipped_batches(self) -> None:
        skipped = int(self.num_batches_skipped)
        if skipped > self._reported_skips:
            log.warning(
                "IsoBN has skipped %d training batch(es) with NaN or inf values so far; its "
                "running statistics ignore them.",
                skipped,
            )
        self._reported_skips = skipped

    def forward(self, h: Tensor) -> Tensor:
        self._check_input(h)
        with torch.no_grad(), torch.autocast(device_type=h.device.type, enabled=False):
            if self.training and h.shape[0] > 1:
                self._update_statistics(h.detach().float())
            scale = self.scale()
        return h * scale.to(h.dtype)

    def _update_statistics(self, z: Tensor) -> None:
        finite = torch.isfinite(z).all()
        centred = z - z.mean(dim=0)
        batch_std = centred.pow(2).mean(dim=0).sqrt()
        batch_cov = centred.T @ centred / z.shape[0]
        # A non-finite batch is replaced by the current statistics, making the update a no-op;
        # torch.where, not an `if` on the flag: no host-device sync on every training step.
        self.run_cov.lerp_(torch.where(finite, batch_cov, self.run_cov), self.momentum)
        self.run_std.lerp_(torch.where(finite, batch_std, self.run_std), self.momentum)
        self.num_batches_tracked += finite
        self.num_batches_skipped += ~finite

    def statistics(self) -> tuple[Tensor, Tensor]:
        """Running (covariance, std), divided by ``1 - (1 - m)^t`` when bias correction is on."""
        if not self.bias_correction:
            return self.run_cov, self.run_std
        # Tensor arithmetic, not .item(): no host-device sync on every training step.
        steps = self.num_batches_tracked.clamp_min(1).to(self.run_std.dtype)
        correction = 1.0 - (1.0 - self.momentum) ** steps
        return self.run_cov / correction, self.run_std / correction

    @torch.no_grad()
    def scale(self) -> Tensor:
        """The per-dimension factor ``c * a`` applied to the input (ones before any statistics)."""
        cov, std = self.statistics()
        variances = cov.diagonal()
        # Without recorded variance a dimension has no defined correlation and no share of the
        # total variance: it is left out of every sum and mean below, and gets the factor 1.
        varying = (std > 0) & (variances > 0)
        inv_std = torch.where(varying, std.reciprocal(), torch.zeros_like(std))
        rho = (cov * inv_std[:, None] * inv_std[None, :]).clamp_(-1.0, 1.0)
        mean_rho2 = rho.square_().sum(dim=1) / varying.sum().clamp_min(1)
        a = (mean_rho2 * std + self.eps).pow(-self.beta)
        kept = torch.where(varying, variances, torch.zeros_like(variances))
        c = torch.sqrt(kept.sum() / ((kept * a.pow(2)).sum() + self.eps))
        return torch.where(varying, c * a, torch.ones_like(a))


@dataclass(frozen=True)
class Norm:
    """One ``norm`` option: its module, built as ``module(num_features, **options)``, the range of
    each option, and the training batches its statistics learn from, so that a config that would
    leave them empty (the norm recorded, the identity applied) is refused before the model loads."""

    module: type[nn.Module]
    options: Mapping[str, Range] = field(default_factory=dict)
    min_batch_size: int = 1  # the smallest batch it folds into its statistics (one has no variance)
    smaller_batch_raises: bool = False  # a smaller training batch raises (True) or is skipped


# The one list of norms, each key the ``name:`` of ``conf/norm/<key>.yaml``; the baseline ``none``
# first, as the benchmarks list them. A new norm: docs/extending.md.
NORMS: dict[str, Norm] = {
    "none": Norm(nn.Identity),  # takes and ignores any arguments
    "batchnorm": Norm(nn.BatchNorm1d, dict(momentum=MOMENTUM, eps=POSITIVE), 2, True),  # raises
    "isobn": Norm(IsoBN, IsoBN.OPTIONS, 2),  # skips a batch of one: see IsoBN's edge rules
    "whitening": Norm(IterNormWhitening, IterNormWhitening.OPTIONS, 2),  # isotune.norms.whitening
}


def build_norm(name: str, num_features: int, **options) -> nn.Module:
    """The normalisation called ``name`` for ``num_features``-dimensional sentence vectors."""
    if name not in NORMS:
        raise ValueError(
            f"Unknown norm {name!r}. Choose one of {sorted(NORMS)} (for example norm=isobn)."
        )
    return NORMS[name].module(num_features, **options)


def statistics_never_updated(norm: nn.Module) -> bool:
    """Whether ``norm`` keeps running statistics and has folded no training batch into them.

    Such a norm ran as its initial state throughout (IsoBN and whitening: the identity), though
    the run is recorded under its name: worth a warning after training. False for norms without
    running statistics (``none``, BatchNorm without ``track_running_stats``).
    """
    tracked = getattr(norm, "num_batches_tracked", None)
    return tracked is not None and int(tracked) == 0
