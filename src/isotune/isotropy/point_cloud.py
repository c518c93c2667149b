"""A point cloud of embeddings (N points x d dimensions), checked once and mean-centred in float64,
with its second moments computed once on demand: the measures evaluated together (``measure_all``,
a layer's profile) share them rather than each computing the covariance again.
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

_SELF_PRODUCT_BLOCKS = 4


def check_point_cloud(X: Tensor) -> Tensor:
    """``X`` as a floating tensor, after checking that it is a finite (points, dims) matrix."""
    X = torch.as_tensor(X)
    if not X.is_floating_point():
        X = X.to(torch.float64)
    shape = tuple(X.shape)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D (points, dims) tensor, got shape {shape}")
    if shape[0] < 2 or shape[1] < 2:
        raise ValueError(f"need at least 2 points and 2 dimensions, got shape {shape}")
    if not torch.isfinite(X).all():
        raise ValueError(f"the point cloud of shape {shape} contains NaN or inf values")
    return X


def _self_product(x: Tensor) -> Tensor:
    """x^T x, computed block row by block row from the diagonal rightwards and mirrored: torch
    exposes no BLAS syrk, and skipping the lower blocks saves 3/8 of the flops of a full matmul."""
    dim = x.shape[1]
    block = -(-dim // _SELF_PRODUCT_BLOCKS)
    product = x.new_empty(dim, dim)
    for start in range(0, dim, block):
        stop = min(start + block, dim)
        upper = x[:, start:stop].mT @ x[:, start:]
        product[start:stop, start:] = upper
        product[start:, start:stop] = upper.mT
    return product


class PointCloud:
    """A validated point cloud, mean-centred in float64 (``centred``), its second moments on
    demand."""

    def __init__(self, X: Tensor):
        self.data = check_point_cloud(X).detach()
        self.n, self.dim = self.data.shape
        self.centred = self.data.to(torch.float64, copy=True)
        self.mean = self.centred.mean(dim=0)
        self.centred -= self.mean  # in place on our own copy: one pass fewer over N x d

    @classmethod
    def of(cls, X: Tensor | PointCloud) -> PointCloud:
        """``X``'s cloud: ``X`` itself when it is one already, its moments computed or not."""
        return X if isinstance(X, cls) else cls(X)

    @cached_property
    def scatter(self) -> Tensor:
        """Xc^T Xc of the mean-centred points: (N - 1) times the covariance."""
        return _self_product(self.centred)

    @cached_property
    def variances(self) -> Tensor:
        """Covariance eigenvalues (ddof 1), descending; rounding negatives are clipped to 0."""
        return torch.linalg.eigvalsh(self.scatter / (self.n - 1)).flip(0).clamp(min=0)
