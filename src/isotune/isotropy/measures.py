"""Isotropy measures of a point cloud of embeddings (N points x d dimensions).

These are the measures documented in ``docs/isotropy.md``, used to test how fine-tuning changes the
geometry of an encoder's embedding space: IsoBN's per-dimension statistics, the partition-function
isotropy I(W), the average cosine, IsoScore and IsoScore*, the covariance spectrum, and local
(per-cluster) isotropy. They need only torch, so they run inside a training callback or a
notebook alike, on any device; results come back as Python floats or CPU tensors.

Conventions:
- Everything is computed in float64 from a detached copy of the input, except ``isoscore_star``,
  which keeps the autograd graph in the input's precision so that it can serve as a regulariser.
- Bad input (not 2-D, fewer than 2 points or 2 dimensions, NaN or inf) raises ValueError. A
  measure that is undefined for valid input (IsoScore of a cloud without variance, the average
  cosine of fewer than two non-zero vectors) is NaN, so that logging never crashes on it.
- Every measure takes the points or their :class:`~isotune.isotropy.point_cloud.PointCloud`:
  ``measure_all`` computes the covariance and its eigendecompositions once and shares them.
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
    """Per-dimension standard deviations and mean |Pearson correlation| between dimensions.

    Zhou, Lin & Ren, "IsoBN" (AAAI 2021) motivate IsoBN with these two statistics of [CLS]
    vectors: a few dimensions have a much larger std, and dimensions are highly correlated.
    std_i = sqrt(mean_n (x_ni - mean_i)^2) is the biased (ddof 0) std that IsoBN itself tracks;
    rho_ij = cov_ij / (std_i std_j), and the mean of |rho_ij| over i != j equals that over i < j.
    A constant dimension (exactly equal values) has std 0 and no defined correlation: it is
    excluded from the correlations and counted in ``n_constant_dims``. With fewer than two
    non-constant dimensions ``corr_abs_mean`` is NaN.
    """
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
    """Partition-function isotropy I(W) = min_u Z(u) / max_u Z(u), Z(u) = sum_i exp(u^T x_i).

    Mu & Viswanath, "All-but-the-top" (ICLR 2018); the main measure of Rajaee & Pilehvar
    (Findings of EMNLP 2021). As in the authors' code, u ranges over the eigenvectors of X^T X of
    the points as given (not mean-centred), found by a symmetric eigensolver. An eigenvector's sign
    is arbitrary and Z(u) != Z(-u), so both u and -u are evaluated: the value does not depend on
    the solver's sign convention. log Z is a float64 log-sum-exp, so vectors of large norm cannot
    overflow; log I = min log Z - max log Z.
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
    """Mean cosine similarity over all pairs of distinct points; near 0 is isotropic.

    Ethayarajh (EMNLP 2019) estimates it from sampled pairs; the exact all-pairs mean follows from
    the sum s of the unit vectors, because |s|^2 = sum_ij cos_ij includes the N self-pairs:
    (|s|^2 - N) / (N (N - 1)), in O(N d). Zero vectors have no direction: they are excluded (N
    counts the non-zero points), and with fewer than two non-zero points the result is NaN.
    """
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
    """IsoScore in [0, 1]: the fraction of dimensions the cloud uses uniformly (1 = isotropic).

    Rudman, Gillman, Rayne & Eickhoff, "IsoScore" (Findings of ACL 2022): the variances v of the
    mean-centred cloud along its principal components (covariance eigenvalues, ddof 1) are scaled
    to length sqrt(d); the isotropy defect delta = |v - 1| / sqrt(2 (d - sqrt d)) gives
    k = (d - delta^2 (d - sqrt d))^2 / d dimensions uniformly used, and
    IsoScore = (k - 1) / (d - 1); k works out to the participation ratio of ``spectrum``. Unlike
    the average cosine and I(W) it is invariant to translation, rotation and scale. NaN for a
    cloud without variance.
    """
    variances = PointCloud.of(X).variances
    return _isoscore_from_moments(variances.sum(), variances.square().sum(), len(variances)).item()


def isoscore_star(X: Tensor, C0: Tensor | None = None, zeta: float = 0.2) -> Tensor:
    """Differentiable IsoScore* of a (mini-)batch: IsoScore of the shrunk covariance
    S = (1 - zeta) C + zeta C0, with C the batch covariance (ddof 1).

    Rudman & Eickhoff, "Stable Anisotropic Regularization" (ICLR 2024): shrinkage stabilises
    IsoScore on mini-batches with fewer points than dimensions, and the I-STAR regulariser adds
    lambda (1 - IsoScore*) to the loss. That paper takes C0 from a larger sample of the model's
    representations, and its package suggests the identity when none is at hand. Our default C0
    is the identity scaled to C's mean variance (the Ledoit-Wolf target), which keeps IsoScore*
    scale-invariant like IsoScore; zeta = 0.2 is our default, not the paper's prescription.
    zeta = 0 gives IsoScore.

    The released code takes the singular values of S. S is symmetric positive semi-definite, so
    their sum is tr(S) and their sum of squares ||S||_F^2, and IsoScore needs only those two
    (``_isoscore_from_moments``): the value is the package's without an SVD, which makes I-STAR on
    every layer's tokens cost one d x d covariance per step, and its gradient has none of the
    trouble an eigendecomposition's has with repeated eigenvalues. Computed in X's precision, at
    least float32 (float64 for integers); returns a 0-d tensor in that dtype that carries gradients.
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
    """The largest eigenvalue's share of the mean-centred covariance, in [1/d, 1] (1 = one
    direction): the anisotropy of Razzhigaev et al., "The Shape of Learning" (Findings of EACL
    2024), which their package ``llm-microscope`` computes from the singular values of the
    centred points. ``measure_all`` logs the same number as ``top1_var_ratio``. NaN for a cloud
    without variance."""
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
    """Explained-variance ratios p of the mean-centred covariance (ddof 1) and their summaries.

    Effective rank = exp(-sum p log p) (Roy & Vetterli 2007); participation ratio =
    (sum lambda)^2 / sum lambda^2. Both equal d for an isotropic cloud and 1 for a rank-one cloud.
    Rajaee & Pilehvar (2021) find that fine-tuning multiplies the elongated directions; we count
    as dominant the components whose variance exceeds ``factor`` times the mean eigenvalue.
    """
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
    """Isotropy within k-means clusters, each centred on its own mean.

    Cai, Huang, Bian & Church, "Isotropy in the Contextual Embedding Space: Clusters and Manifolds"
    (ICLR 2021): contextual embeddings form clusters, and a cloud that is anisotropic globally can
    be nearly isotropic inside each centred cluster. Clusters come from a seeded, deterministic
    torch k-means (k-means++ seeding, Lloyd iterations, see ``kmeans``); the default k = 27 is
    that of Rajaee & Pilehvar's cluster-based demo. Each cluster of at least 2 points is measured
    separately, and ``pooled`` measures the union of the centred clusters. Measuring every
    cluster costs k eigendecompositions of d x d matrices.
    """
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
    """All the scalar measures in one flat ``{prefix + name: value}`` dict, ready to log.

    Names: std_mean, std_std, std_min, std_max, std_cv, corr_abs_mean, n_constant_dims (IsoBN
    statistics); iw, log_iw (I(W)); avg_cosine; isoscore; effective_rank, participation_ratio,
    n_dominant, top1_var_ratio, top10_var_ratio (share of variance of the top 1 and top 10
    principal components). With ``local_k`` the same names, prefixed ``local_``, are added for the
    union of the centred k-means clusters (see ``local_isotropy``). The covariance and its
    eigendecompositions are computed once for all measures.
    """
    measures = measure_cloud(X, dominant_factor=dominant_factor, local_k=local_k, seed=seed)
    return {prefix + name: value for name, value in measures.scalars.items()}


@dataclass(frozen=True)
class CloudMeasures:
    """``measure_all``'s scalars with the statistics and spectrum they come from, so that a
    figure shows the same numbers without computing them again."""

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
