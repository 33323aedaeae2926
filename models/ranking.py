"""RankEncoder rank vectors (Eq. 2-3), their similarity, and the Eq. 7 serving blend.

Reference: Seonwoo et al., "Ranking-Enhanced Unsupervised Sentence Representation Learning"
(ACL 2023), Sections 3.2 and 3.6, Appendix A.1.
"""

import math

import numpy as np
import torch

DEFAULT_LAMBDA_INF = 0.1  # Section 4.3


def anchor_ranks(embeddings: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Rank of every anchor by cosine to each input, 0 = least similar (Eq. 2 before g).

    Both inputs are L2-normalised, so the inner product is the cosine. One sort per row plus a
    scatter of 0..m-1 into the sorted positions: O(m log m) per row, no second argsort.
    Ties (equal cosines) get distinct ordinal ranks; with float32 cosines they are vanishingly
    rare and Spearman's average-rank convention would move the result by less than 1e-6.
    """
    cosines = (embeddings @ anchors.T).detach()  # (batch, m); ranks carry no gradient
    order = _argsort_rows(cosines)  # (batch, m)
    positions = torch.arange(anchors.shape[0], device=cosines.device, dtype=cosines.dtype)
    ranks = torch.empty_like(cosines)  # (batch, m)
    ranks.scatter_(1, order, positions.expand_as(cosines))
    return ranks


def _argsort_rows(values: torch.Tensor) -> torch.Tensor:
    """Row-wise argsort. On CPU numpy's vectorised sort is about 4x faster than torch's
    (bench.scoring); on CUDA torch sorts on the device."""
    if values.device.type == "cpu":
        return torch.from_numpy(np.argsort(values.numpy(), axis=1))
    return torch.argsort(values, dim=1)


def normalise_ranks(ranks: torch.Tensor) -> torch.Tensor:
    """g of Eq. 3: centre, divide by sqrt(m) times the population standard deviation.

    A permutation of 0..m-1 always has mean (m-1)/2 and std sqrt((m^2-1)/12), so g is one
    affine map. The inner product of two outputs is Spearman's rho (Appendix A.1, Eq. 9).
    """
    m = ranks.shape[-1]
    if m < 2:
        raise ValueError("rank vectors need at least two anchors")
    mean = (m - 1) / 2
    std = math.sqrt((m * m - 1) / 12)
    return (ranks - mean) / (math.sqrt(m) * std)  # (..., m)


def rank_vectors(embeddings: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Normalised rank vectors z (Eq. 2 with g of Eq. 3) of inputs against an anchor matrix."""
    return normalise_ranks(anchor_ranks(embeddings, anchors))  # (batch, m)


def rank_vectors_chunked(
    embeddings: torch.Tensor, anchors: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """rank_vectors over row chunks, so a large batch never holds several (batch, m) temporaries."""
    parts = [
        rank_vectors(embeddings[i : i + chunk], anchors) for i in range(0, len(embeddings), chunk)
    ]
    if not parts:
        return embeddings.new_empty((0, anchors.shape[0]))
    return torch.cat(parts)  # (batch, m)


def paired_similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise inner products: cosine for unit embeddings, Spearman for rank vectors."""
    return (a * b).sum(dim=-1)  # (batch,)


def blend(
    cosine: torch.Tensor, rank: torch.Tensor, lambda_inf: float = DEFAULT_LAMBDA_INF
) -> torch.Tensor:
    """Eq. 7: lambda_inf * z_i.z_j + (1 - lambda_inf) * cos(E2 x_i, E2 x_j)."""
    if not 0.0 <= lambda_inf <= 1.0:
        raise ValueError(f"lambda_inf must lie in [0, 1], got {lambda_inf}")
    return lambda_inf * rank + (1.0 - lambda_inf) * cosine
