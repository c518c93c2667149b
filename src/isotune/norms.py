"""Normalisations of the sentence vector: none, BatchNorm and IsoBN.

IsoBN (Zhou, Lin & Ren, AAAI 2021) rescales each dimension of the sentence vector so that dimensions
with a large standard deviation, or strongly correlated with many others, stop dominating the
classifier's input. This module follows the authors' released code exactly (see
``shared/docs/isobn.md``); each of its quirks is a switch whose default reproduces it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["NORMS", "IsoBN", "build_norm"]


class IsoBN(nn.Module):
    """Isotropic batch normalisation of a batch of sentence vectors ``h`` (n x d).

    Training mode first folds the detached batch into running estimates of the covariance and the
    per-dimension standard deviation; both modes then multiply ``h`` by a per-dimension scale
    ``c * a`` computed from those estimates, with no gradient through the scale:

        rho_ij = clamp(run_cov_ij / (run_std_i run_std_j), -1, 1)
        a_i    = (mean_j(rho_ij^2) * run_std_i + eps) ^ (-beta)
        c      = sqrt(trace(run_cov) / (sum_i run_cov_ii a_i^2 + eps))

    so the total variance of the running covariance is preserved. No centring, no affine.

    The statistics are float32 buffers (saved in checkpoints, unlike the released code) and are
    computed outside autocast, so mixed precision does not degrade them. A batch of one example
    carries no variance and leaves the statistics untouched; before any statistics exist the
    layer is the identity (the released code returned NaN there).
    """

    def __init__(
        self,
        num_features: int,
        momentum: float = 0.05,
        eps: float = 1e-3,
        beta: float = 0.5,
        bias_correction: bool = False,
    ) -> None:
        super().__init__()
        if num_features < 1:
            raise ValueError(f"IsoBN needs num_features >= 1, got {num_features}.")
        if not 0.0 < momentum <= 1.0:
            raise ValueError(f"IsoBN momentum must be in (0, 1], got {momentum}.")
        self.num_features = num_features
        self.momentum = momentum
        self.eps = eps
        self.beta = beta
        self.bias_correction = bias_correction
        self.register_buffer("run_cov", torch.zeros(num_features, num_features))
        self.register_buffer("run_std", torch.zeros(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, momentum={self.momentum}, eps={self.eps}, beta={self.beta}, "
            f"bias_correction={self.bias_correction}"
        )

    def forward(self, h: Tensor) -> Tensor:
        if h.dim() != 2 or h.shape[1] != self.num_features:
            raise ValueError(
                f"IsoBN expects a batch of shape (n, {self.num_features}), got {tuple(h.shape)}."
            )
        with torch.no_grad(), torch.autocast(device_type=h.device.type, enabled=False):
            if self.training and h.shape[0] > 1:
                self._update_statistics(h.detach().float())
            scale = self.scale()
        return h * scale.to(h.dtype)

    def _update_statistics(self, z: Tensor) -> None:
        centred = z - z.mean(dim=0)
        batch_std = centred.pow(2).mean(dim=0).sqrt()
        batch_cov = centred.T @ centred / z.shape[0]
        self.run_cov.lerp_(batch_cov, self.momentum)
        self.run_std.lerp_(batch_std, self.momentum)
        self.num_batches_tracked += 1

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
        # A dimension with zero std (constant so far) has no defined correlation: count it as 0.
        inv_std = torch.where(std > 0, std.reciprocal(), torch.zeros_like(std))
        rho = (cov * inv_std[:, None] * inv_std[None, :]).clamp_(-1.0, 1.0)
        a = (rho.square_().mean(dim=1) * std + self.eps).pow(-self.beta)
        variances = cov.diagonal()
        c = torch.sqrt(variances.sum() / ((variances * a.pow(2)).sum() + self.eps))
        return torch.where(self.num_batches_tracked > 0, c * a, torch.ones_like(a))


NORMS: dict[str, type[nn.Module]] = {
    "none": nn.Identity,
    "batchnorm": nn.BatchNorm1d,
    "isobn": IsoBN,
}


def build_norm(name: str, num_features: int, **options) -> nn.Module:
    """The normalisation called ``name`` for ``num_features``-dimensional sentence vectors."""
    if name not in NORMS:
        raise ValueError(
            f"Unknown norm {name!r}. Choose one of {sorted(NORMS)} (for example norm=isobn)."
        )
    if name == "none":
        return nn.Identity()
    return NORMS[name](num_features, **options)
