"""Isotropy measures of a point cloud of embeddings (N points x d dimensions), in torch only so
that a training callback and a notebook run them alike; definitions, ranges, sources and the
NaN / ValueError rules: docs/isotropy.md#the-measures. All but ``isoscore_star`` (which keeps the
autograd graph, as a regulariser) work in float64 on a detached copy, and every one takes the
points or their ``PointCloud``, whose covariance ``measure_all`` computes once for all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from isotune.isotropy.clusters import KMEANS_MAX_ITER, centre_clusters
from isotune.isotropy.point_cloud import PointCloud, check_point_cloud


@dataclass(frozen=True)
class IsoBNStats:
    """Per-dimension spread and inter-dimension correlation, the statistics behind IsoBN."""

    std: Tensor  # (d,) per-dimension standard deviation, for histograms
    corr_abs: Tensor  # |Pearson rho_ij| for each pair i < j of non-constant dims, for histograms
    std_mean: float
    std_std: float
    std_min: float
    std_max: float
    std_cv: float  # coefficient of variation std_std / std_mean
    corr_abs_mean: float
    n_constant_dims: int


def isobn_stats(X: Tensor | PointCloud) -> IsoBNStats:
    """Per-dimension stds (ddof 0, as IsoBN tracks them) and mean |Pearson correlation| over pairs
    of non-constant dimensions: Zhou, Lin & Ren, "IsoBN" (AAAI 2021); see
    docs/isotropy.md#isobn-statistics-per-dimension-spread-and-correlation."""
    cloud = PointCloud.of(X)
    constant = cloud.data.amax(dim=0) == cloud.data.amin(dim=0)
    std = (cloud.scatter.diagonal() / cloud.n).sqrt().masked_fill(constant, 0.0)
    varying = (~constant).nonzero().squeeze(1)
    scatter = cloud.scatter[varying][:, varying]
    scale = scatter.diagonal().sqrt()
    corr = (scatter / torch.outer(scale, scale)).clamp(-1.0, 1.0)
    rows, cols = torch.triu_indices(len(varying), len(varying), offset=1, device=corr.device)
    corr_abs = corr[rows, cols].abs()
    std_mean, std_std = std.mean(), std.std(correction=0)
    return IsoBNStats(
        std=std.cpu(),
        corr_abs=corr_abs.cpu(),
        std_mean=std_mean.item(),
        std_std=std_std.item(),
        std_min=std.min().item(),
        std_max=std.max().item(),
        std_cv=(std_std / std_mean).item(),
        corr_abs_mean=corr_abs.mean().item() if len(corr_abs) else math.nan,
        n_constant_dims=int(constant.sum()),
    )


@dataclass(frozen=True)
class PartitionIsotropy:
    """I(W) in (0, 1] (1 = isotropic) and its natural log, readable when I(W) is tiny."""

    iw: float
    log_iw: float


def partition_isotropy(X: Tensor | PointCloud) -> PartitionIsotropy:
    """Partition-function isotropy I(W) = min_u Z(u) / max_u Z(u), Z(u) = sum_i exp(u^T x_i), over
    +-each eigenvector of the uncentred X^T X as in the authors' code: Mu & Viswanath (ICLR 2018),
    Rajaee & Pilehvar (Findings of EMNLP 2021); see docs/isotropy.md#iw-partition-function-isotropy.
    """
    cloud = PointCloud.of(X)
    second_moment = cloud.scatter + cloud.n * torch.outer(cloud.mean, cloud.mean)  # X^T X
    directions = torch.linalg.eigh(second_moment).eigenvectors
    centred_projections = cloud.centred @ directions  # u^T x_i = u^T (x_i - mean) + u^T mean
    shift = cloud.mean @ directions
    log_z_plus = centred_projections.logsumexp(dim=0) + shift
    log_z_minus = (-centred_projections).logsumexp(dim=0) - shift
    log_z = torch.cat([log_z_plus, log_z_minus])
    log_iw = (log_z.min() - log_z.max()).item()
    return PartitionIsotropy(iw=math.exp(log_iw), log_iw=log_iw)


def average_cosine(X: Tensor | PointCloud) -> float:
    """Exact mean cosine over all pairs of distinct non-zero points (Ethayarajh, EMNLP 2019, samples
    pairs): (|s|^2 - N) / (N (N - 1)) with s the sum of the unit vectors, in O(N d); see
    docs/isotropy.md#average-cosine."""
    cloud = PointCloud.of(X)
    norms = torch.linalg.vector_norm(cloud.data, dim=1, dtype=torch.float64)
    nonzero = norms > 0
    count = int(nonzero.sum())
    if count < 2:
        return math.nan
    weights = nonzero / norms.where(nonzero, 1.0)
    unit_sum = cloud.centred.mT @ weights + cloud.mean * weights.sum()  # x_i = centred_i + mean
    return ((unit_sum @ unit_sum - count) / (count * (count - 1))).item()


def _isoscore_from_moments(total: Tensor, total_of_squares: Tensor, d: int) -> Tensor:
    """IsoScore from the sum and the sum of squares of the d principal-component variances.

    Rudman et al. (2022, Algorithm 1) scale the variances v to length sqrt(d) and take the
    defect delta = |v_hat - 1| / sqrt(2 (d - sqrt d)). Expanding
    |v_hat - 1|^2 = 2d - 2 sqrt(d) sum(v) / |v| turns their k = (d - delta^2 (d - sqrt d))^2 / d
    into (sum v)^2 / sum v^2, the participation ratio, so IsoScore = (k - 1) / (d - 1) needs these
    two sums and no eigenvector.
    """
    return (total.square() / total_of_squares - 1) / (d - 1)


def isoscore(X: Tensor | PointCloud) -> float:
    """IsoScore in [0, 1] (1 = isotropic) of the covariance eigenvalues: Rudman, Gillman, Rayne &
    Eickhoff (Findings of ACL 2022, Algorithm 1); see docs/isotropy.md#isoscore-and-isoscore."""
    variances = PointCloud.of(X).variances
    return _isoscore_from_moments(variances.sum(), variances.square().sum(), len(variances)).item()


def isoscore_star(X: Tensor, C0: Tensor | None = None, zeta: float = 0.2) -> Tensor:
    """Differentiable IsoScore* of a (mini-)batch: IsoScore of S = (1 - zeta) C + zeta C0, C the
    batch covariance (ddof 1); Rudman & Eickhoff (ICLR 2024), see
    docs/isotropy.md#isoscore-and-isoscore. The paper takes C0 from a larger sample and its package
    suggests the identity; our default is the identity scaled to C's mean variance (Ledoit-Wolf).

    The released code takes S's singular values; S is symmetric PSD, so their sum is tr(S) and
    their sum of squares ||S||_F^2, all IsoScore needs: the package's value without an SVD, one
    d x d covariance per step, and no eigendecomposition gradient to break on repeated eigenvalues.
    In X's precision, at least float32; a 0-d tensor that carries gradients.
    """
    X = check_point_cloud(X)
    if not 0.0 <= zeta <= 1.0:
        raise ValueError(f"zeta must lie in [0, 1], got {zeta}")
    n, d = X.shape
    points = X.to(torch.promote_types(X.dtype, torch.float32))  # not PointCloud: it detaches
    centred = points - points.mean(dim=0)
    covariance = centred.mT @ centred / (n - 1)
    if C0 is None:
        C0 = covariance.diagonal().mean() * torch.eye(d, dtype=points.dtype, device=X.device)
    elif tuple(C0.shape) != (d, d):
        raise ValueError(f"C0 must have shape ({d}, {d}) to match X, got {tuple(C0.shape)}")
    shrunk = (1 - zeta) * covariance + zeta * C0.to(device=X.device, dtype=points.dtype)
    return _isoscore_from_moments(shrunk.trace(), shrunk.square().sum(), d)


def anisotropy(X: Tensor | PointCloud) -> float:
    """The largest eigenvalue's share of the covariance, in [1/d, 1] (``top1_var_ratio``): the
    anisotropy of Razzhigaev et al. (Findings of EACL 2024, package ``llm-microscope``)."""
    variances = PointCloud.of(X).variances
    return (variances[0] / variances.sum()).item()


@dataclass(frozen=True)
class Spectrum:
    """The covariance spectrum and three summaries of how many directions carry the variance."""

    variances: Tensor  # (d,) covariance eigenvalues, descending
    explained_variance_ratio: Tensor  # (d,) variances / total variance
    effective_rank: float
    participation_ratio: float
    n_dominant: int
    dominant_factor: float


def spectrum(X: Tensor | PointCloud, factor: float = 10.0) -> Spectrum:
    """Explained-variance ratios of the covariance (ddof 1), effective rank (Roy & Vetterli 2007),
    participation ratio, and the components above ``factor`` times the mean eigenvalue; see
    docs/isotropy.md#spectrum-effective-rank-participation-ratio-dominant-directions."""
    variances = PointCloud.of(X).variances
    ratio = variances / variances.sum()
    entropy = -torch.special.xlogy(ratio, ratio).sum()
    return Spectrum(
        variances=variances.cpu(),
        explained_variance_ratio=ratio.cpu(),
        effective_rank=entropy.exp().item(),
        participation_ratio=(variances.sum() ** 2 / (variances**2).sum()).item(),
        n_dominant=int((variances > factor * variances.mean()).sum()),
        dominant_factor=factor,
    )


@dataclass(frozen=True)
class LocalIsotropy:
    """k-means labels and sizes, ``measure_all`` of each centred cluster and of their union."""

    labels: Tensor  # (N,) cluster of each point
    cluster_sizes: Tensor  # (k,)
    per_cluster: dict[int, dict[str, float]]  # clusters with fewer than 2 points are left out
    pooled: dict[str, float]


def local_isotropy(
    X: Tensor,
    k: int = 27,
    seed: int = 0,
    max_iter: int = KMEANS_MAX_ITER,
    dominant_factor: float = 10.0,
) -> LocalIsotropy:
    """Isotropy within seeded k-means clusters, each centred on its own mean (Cai, Huang, Bian &
    Church, ICLR 2021; k = 27 from Rajaee & Pilehvar's demo): docs/isotropy.md#local-isotropy.
    Costs k eigendecompositions of d x d matrices."""
    centred, labels = centre_clusters(PointCloud(X).centred, k, seed, max_iter)
    sizes = torch.bincount(labels, minlength=k)
    per_cluster = {
        cluster: measure_all(centred[labels == cluster], dominant_factor=dominant_factor)
        for cluster in range(k)
        if sizes[cluster] >= 2
    }
    return LocalIsotropy(
        labels=labels.cpu(),
        cluster_sizes=sizes.cpu(),
        per_cluster=per_cluster,
        pooled=measure_all(centred, dominant_factor=dominant_factor),
    )


def measure_all(
    X: Tensor,
    prefix: str = "",
    *,
    dominant_factor: float = 10.0,
    local_k: int | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """All the scalar measures in one flat ``{prefix + name: value}`` dict, ready to log; the names
    (and ``local_<name>`` with ``local_k``) are the table of docs/isotropy.md#the-measures."""
    measures = measure_cloud(X, dominant_factor=dominant_factor, local_k=local_k, seed=seed)
    return {prefix + name: value for name, value in measures.scalars.items()}


@dataclass(frozen=True)
class CloudMeasures:
    """``measure_all``'s scalars with the statistics and spectrum a figure draws them from."""

    scalars: dict[str, float]
    stats: IsoBNStats
    spectrum: Spectrum


def measure_cloud(
    X: Tensor, *, dominant_factor: float = 10.0, local_k: int | None = None, seed: int = 0
) -> CloudMeasures:
    """What ``measure_all`` computes, unprefixed, with the IsoBN statistics and the spectrum."""
    cloud = PointCloud(X)
    stats = isobn_stats(cloud)
    partition = partition_isotropy(cloud)
    spec = spectrum(cloud, dominant_factor)
    measures = {
        "std_mean": stats.std_mean,
        "std_std": stats.std_std,
        "std_min": stats.std_min,
        "std_max": stats.std_max,
        "std_cv": stats.std_cv,
        "corr_abs_mean": stats.corr_abs_mean,
        "n_constant_dims": float(stats.n_constant_dims),
        "iw": partition.iw,
        "log_iw": partition.log_iw,
        "avg_cosine": average_cosine(cloud),
        "isoscore": isoscore(cloud),
        "effective_rank": spec.effective_rank,
        "participation_ratio": spec.participation_ratio,
        "n_dominant": float(spec.n_dominant),
        "top1_var_ratio": anisotropy(cloud),
        "top10_var_ratio": spec.explained_variance_ratio[:10].sum().item(),
    }
    if local_k is not None:
        centred, _ = centre_clusters(cloud.centred, local_k, seed)
        pooled = measure_all(centred, "local_", dominant_factor=dominant_factor)
        measures.update(pooled)
    return CloudMeasures(scalars=measures, stats=stats, spectrum=spec)
