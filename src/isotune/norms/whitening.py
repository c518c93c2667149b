"""Group whitening of the sentence vector by Newton iterations (IterNorm); why not a ZCA, and
why groups smaller than the batch: docs/interventions.md#whitening-normwhitening.
"""

from __future__ import annotations

from types import MappingProxyType

import torch
from torch import Tensor, nn

from isotune.norms.ranges import COUNT, MOMENTUM, POSITIVE, SWITCH, Range

__all__ = ["Float32Statistics", "IterNormWhitening"]


class Float32Statistics(nn.Module):
    """A norm whose buffers named in ``STATISTICS`` stay float32 under dtype casts (``.half()``,
    Lightning's ``bf16-true``) while following device moves: running statistics averaged in
    reduced precision would lose the small updates that make them up. Its options are kept once
    their ranges in ``OPTIONS`` (which its entry in ``NORMS`` gives the config check) hold them;
    its input is a floating-point batch of shape (n, num_features)."""

    STATISTICS: tuple[str, ...] = ()
    OPTIONS: MappingProxyType[str, Range] = MappingProxyType({})

    def _set_options(self, num_features: int, **options) -> None:
        """``num_features`` and each option as attributes; ValueError naming one out of range."""
        COUNT.require(num_features, f"{type(self).__name__} num_features")
        self.num_features = num_features
        for option, valid in self.OPTIONS.items():
            valid.require(options[option], f"{type(self).__name__} {option}")
            setattr(self, option, options[option])

    def _check_input(self, h: Tensor) -> None:
        name = type(self).__name__
        if h.dim() != 2 or h.shape[1] != self.num_features:
            raise ValueError(
                f"{name} expects a batch of shape (n, {self.num_features}), got {tuple(h.shape)}."
            )
        if not h.is_floating_point():
            raise TypeError(f"{name} expects floating-point input, got {h.dtype}; use h.float().")

    def _apply(self, fn, recurse=True):
        originals = {name: self._buffers[name] for name in self.STATISTICS}
        super()._apply(fn, recurse)
        for name, original in originals.items():
            moved = self._buffers[name]
            if moved.dtype != torch.float32:
                self._buffers[name] = original.to(moved.device)
        return self


class IterNormWhitening(Float32Statistics):
    """Iterative group whitening of a batch ``h`` (n x d) (Huang, Zhou, Zhu, Liu & Shao,
    "Iterative Normalization: Beyond Standardization towards Efficient Whitening", CVPR 2019;
    released code ``huangleiBuaa/IterNorm-pytorch``, ``iterative_normalization.py``).

    The d dimensions are split into d / g consecutive groups of ``group_size`` g; in each group:

        x_c     = x - mean(x)                              (mean over the batch)
        Sigma   = x_c^T x_c / n + eps I                    (biased, as released)
        Sigma_N = Sigma / tr(Sigma)
        P_0 = I,   P_{k+1} = 1.5 P_k - 0.5 P_k^3 Sigma_N   (k < T = ``iterations``)
        W       = P_T / sqrt(tr(Sigma)),   output x_c W^T  (then weight * . + bias if ``affine``)

    P_k converges to Sigma_N^(-1/2), so W to Sigma^(-1/2): ZCA whitening, approached by products
    only, with gradient through the batch statistics. The iterates are computed in the coupled
    Newton-Schulz form, ``Y_0 = Sigma_N``, ``S_k = 1.5 I - 0.5 P_k Y_k``, ``Y_{k+1} = Y_k S_k``,
    ``P_{k+1} = S_k P_k``, equal to the formula above in exact arithmetic and as cheap: the
    released form amplifies rounding errors geometrically once it has converged (Higham,
    "Functions of Matrices", SIAM 2008, ch. 6), so on an ill-conditioned group it diverges to NaN
    within tens of iterations (about ten in float32 at condition number 2000), where the coupled
    form stays at the ZCA.

    Training mode uses the batch's mean and W and moves the running mean and running W towards
    them by ``momentum``; eval mode uses the running ones (before any training: zero mean and the
    identity, as released).

    What "whitened" means: a direction holding a share s of the group's variance leaves with
    standard deviation p_T sqrt(s), within 4% of 1 for s >= 0.05 at T=5; but the gain p_T is at
    most 1.5^T (7.6), so directions with much smaller shares are only partly rescaled: T=5
    whitens the dominant directions and damps the spread of the rest (IterNorm's trade-off; raise
    T for a closer ZCA). With n <= g the batch covariance has rank at most n - 1 < g: the batch is
    whitened within its own span only and has no variance outside it, while running W scales the
    directions no batch spans by up to 1.5^T / sqrt(tr Sigma). With g < n each group's covariance
    has full rank, so choose g below the batch size (8 for a batch of 16).

    Statistics are float32 buffers (see :class:`Float32Statistics`), computed with autocast off
    and in at least float32; the output has the input's dtype. A batch of one example in training
    mode has no covariance: it is normalised with the running statistics and leaves them
    unchanged; a batch with NaN or inf leaves them unchanged as well (its output is not finite).
    ``num_batches_tracked`` counts the batches folded in, as IsoBN's and BatchNorm's do.
    """

    STATISTICS = ("running_mean", "running_whitening")
    OPTIONS = MappingProxyType(  # each option's range: checked here and by the config check
        dict(group_size=COUNT, iterations=COUNT, eps=POSITIVE, momentum=MOMENTUM, affine=SWITCH)
    )

    def __init__(
        self,
        num_features: int,
        group_size: int,
        iterations: int = 5,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
    ) -> None:
        super().__init__()
        options = dict(group_size=group_size, iterations=iterations, eps=eps, momentum=momentum)
        self._set_options(num_features, **options, affine=affine)
        if num_features % group_size:
            raise ValueError(
                f"IterNormWhitening group_size={group_size} does not divide "
                f"num_features={num_features}; choose a divisor of {num_features} below the "
                "batch size (for example 8)."
            )
        self.num_groups = num_features // group_size
        # Explicit dtypes: Lightning's bf16-true init context changes the default dtype.
        self.register_buffer(
            "running_mean", torch.zeros(self.num_groups, group_size, dtype=torch.float32)
        )
        self.register_buffer(
            "running_whitening",
            torch.eye(group_size, dtype=torch.float32).repeat(self.num_groups, 1, 1),
        )
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, group_size={self.group_size}, iterations={self.iterations}, "
            f"eps={self.eps}, momentum={self.momentum}, affine={self.affine}"
        )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Checkpoints written before the counter existed: how many batches they folded in is
        # unknown, but whether they folded in any is not (the running mean leaves zero at once).
        mean = state_dict.get(f"{prefix}running_mean")
        if mean is not None:
            state_dict.setdefault(f"{prefix}num_batches_tracked", torch.tensor(int(mean.any())))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, h: Tensor) -> Tensor:
        self._check_input(h)
        n = h.shape[0]
        with torch.autocast(device_type=h.device.type, enabled=False):
            dtype = torch.promote_types(h.dtype, torch.float32)
            groups = h.to(dtype).reshape(n, self.num_groups, self.group_size).transpose(0, 1)
            if self.training and n > 1:
                mean, whitening = self.batch_statistics(groups)
                self._update_running_statistics(mean.detach(), whitening.detach())
            else:
                mean, whitening = self.running_mean.to(dtype), self.running_whitening.to(dtype)
            whitened = (groups - mean[:, None, :]) @ whitening.mT
            out = whitened.transpose(0, 1).reshape(n, self.num_features)
            if self.affine:
                out = out * self.weight.to(dtype) + self.bias.to(dtype)
        return out.to(h.dtype)

    def batch_statistics(self, groups: Tensor) -> tuple[Tensor, Tensor]:
        """Per-group mean (G, g) and whitening matrix W (G, g, g) of ``groups`` (G, n, g)."""
        n = groups.shape[1]
        mean = groups.mean(dim=1)
        centred = groups - mean[:, None, :]
        eye = torch.eye(self.group_size, dtype=groups.dtype, device=groups.device)
        sigma = centred.mT @ centred / n + self.eps * eye
        trace = sigma.diagonal(dim1=-2, dim2=-1).sum(dim=-1)[:, None, None]
        y = sigma / trace  # Sigma_N
        p = eye.expand_as(sigma)
        for _ in range(self.iterations):
            step = 1.5 * eye - 0.5 * p @ y
            y, p = y @ step, step @ p
        return mean, p / trace.sqrt()

    @torch.no_grad()
    def _update_running_statistics(self, mean: Tensor, whitening: Tensor) -> None:
        # torch.where, not an `if` on the flag: no host-device sync on every training step.
        finite = torch.isfinite(mean).all() & torch.isfinite(whitening).all()
        mean, whitening = mean.float(), whitening.float()
        self.running_mean.lerp_(torch.where(finite, mean, self.running_mean), self.momentum)
        self.running_whitening.lerp_(
            torch.where(finite, whitening, self.running_whitening), self.momentum
        )
        self.num_batches_tracked += finite
