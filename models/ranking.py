"""RankEncoder rank vectors (Eq. 2-3), their similarity, and the Eq. 7 serving blend.

Reference: Seonwoo et al., "Ranking-Enhanced Unsupervised Sentence Representation Learning"
(ACL 2023), Sections 3.2 and 3.6, Appendix A.1.
"""

import math

import numpy as np
import torch

from models.cpu_products import anchor_cosines
from models.ordinal_ranks import ranks_into
from models.spare_core import split_range

DEFAULT_LAMBDA_INF = 0.1  # Section 4.3
# Sorting a few rows of 10k is not worth waking the spare core right after an encode, when
# the hand-over is slowest: 2 x 10k cosines ranked in 0.11 ms on one thread against 0.29 ms
# split, 4 x 10k 0.21 against 0.35, 8 x 10k 0.39 against 0.44 (Intel Xeon with AMX, a script
# encoding a pair before each call, load 0.4-1.2). Searches rank 10-14 rows with the helper
# already awake, where splitting 12 x 10k took 1.10 ms against 1.79 (docs/benchmarks.md).
_MIN_SPLIT_RANKS = 65_536


def anchor_ranks(embeddings: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Rank of every anchor by cosine to each input, 0 = least similar (Eq. 2 before g).

    Both inputs are L2-normalised, so the inner product is the cosine. Ranks are ordinal: equal
    cosines (about one pair per row of 10k float32 cosines) take their column order, as
    scipy.stats.rankdata(method="ordinal"); Spearman's average-rank convention would move a
    similarity by less than 1e-6.
    """
    return _ranks_affine(embeddings, anchors, 1.0, 0.0, split=False)  # (batch, m)


def _ranks_affine(
    embeddings: torch.Tensor, anchors: torch.Tensor, scale: float, shift: float, *, split: bool
) -> torch.Tensor:
    """scale * anchor_ranks + shift, the affine map applied while the ranks are written.

    On CPU an exact linear-time radix sort (models/ordinal_ranks.py) writes the mapped ranks
    in its last pass, so g of Eq. 3 costs nothing extra; on CUDA torch sorts on the device.
    With `split`, the spare core takes half of the anchors of the product and half of the rows
    of the sort (models/spare_core.py); neither changes a bit.
    """
    cosines = anchor_cosines(embeddings, anchors, split=split)  # (batch, m), no gradient
    if cosines.device.type == "cpu":
        # The ranks overwrite the cosines (a new matrix that nothing else holds): a second
        # matrix of fresh pages cost 6-7 ms per 128 x 100k (AMD EPYC Zen 4, load 0.9).
        ranks = cosines.to(torch.float32).contiguous().numpy()  # (batch, m)

        def rows(start: int, stop: int) -> None:
            ranks_into(ranks[start:stop], ranks[start:stop], scale, shift)

        if split:
            split_range(rows, len(ranks), elements=ranks.size, min_elements=_MIN_SPLIT_RANKS)
        else:
            rows(0, len(ranks))
        return torch.from_numpy(ranks).to(cosines.dtype)
    order = torch.argsort(cosines, dim=1, stable=True)  # (batch, m)
    positions = torch.arange(cosines.shape[1], device=cosines.device, dtype=cosines.dtype)
    ranks = torch.empty_like(cosines)  # (batch, m)
    ranks.scatter_(1, order, (positions * scale + shift).expand_as(cosines))
    return ranks


def warm_up() -> None:
    """Compile the CPU kernels now (a service at start-up), not in the first request."""
    anchors = torch.eye(2)  # (2, 2)
    anchor_ranks(anchors[:1], anchors)


def normalisation(m: int) -> tuple[float, float]:
    """(scale, shift) of g in Eq. 3: g(r) = scale * r + shift for ranks of m anchors.

    A permutation of 0..m-1 always has mean (m-1)/2 and population std sqrt((m^2-1)/12), so g
    is one affine map: centre, divide by sqrt(m) times the std. The inner product of two
    outputs is Spearman's rho (Appendix A.1, Eq. 9).
    """
    if m < 2:
        raise ValueError("rank vectors need at least two anchors")
    scale = 1.0 / (math.sqrt(m) * math.sqrt((m * m - 1) / 12))
    return scale, -(m - 1) / 2 * scale


def normalise_ranks(ranks: torch.Tensor) -> torch.Tensor:
    """g of Eq. 3 on raw ranks (..., m); see `normalisation`."""
    scale, shift = normalisation(ranks.shape[-1])
    return ranks * scale + shift  # (..., m)


def rank_vectors(
    embeddings: torch.Tensor, anchors: torch.Tensor, *, split: bool = False
) -> torch.Tensor:
    """Normalised rank vectors z (Eq. 2 with g of Eq. 3) of inputs against an anchor matrix;
    `split`: as in _ranks_affine."""
    scale, shift = normalisation(anchors.shape[0])
    return _ranks_affine(embeddings, anchors, scale, shift, split=split)  # (batch, m)


def rank_vectors_chunked(
    embeddings: torch.Tensor, anchors: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """rank_vectors over row chunks, so a large batch never holds several (batch, m) temporaries,
    with the spare core's help (models/spare_core.py)."""
    parts = [
        rank_vectors(embeddings[i : i + chunk], anchors, split=True)
        for i in range(0, len(embeddings), chunk)
    ]
    if len(parts) <= 1:
        return parts[0] if parts else embeddings.new_empty((0, anchors.shape[0]))
    if parts[0].device.type != "cpu":
        return torch.cat(parts)  # (batch, m)
    # On CPU numpy joins them: torch.cat of this size wakes its OpenMP pool, whose spinning
    # workers would then hold the helper's core.
    return torch.from_numpy(np.concatenate([part.numpy() for part in parts]))  # (batch, m)


def blend(
    cosine: torch.Tensor, rank: torch.Tensor, lambda_inf: float = DEFAULT_LAMBDA_INF
) -> torch.Tensor:
    """Eq. 7: lambda_inf * z_i.z_j + (1 - lambda_inf) * cos(E2 x_i, E2 x_j)."""
    if not 0.0 <= lambda_inf <= 1.0:
        raise ValueError(f"lambda_inf must lie in [0, 1], got {lambda_inf}")
    return lambda_inf * rank + (1.0 - lambda_inf) * cosine
