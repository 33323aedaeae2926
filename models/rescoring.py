"""Eq. 7 rescoring of search candidates, and the hits it returns.

Reference: Seonwoo et al., "Ranking-Enhanced Unsupervised Sentence Representation Learning"
(ACL 2023), Eq. 7: sim = lambda_inf * z_q.z_d + (1 - lambda_inf) * cos(q, d), with z the
normalised rank vectors of Eq. 2-3 against the anchor matrix.
"""

from dataclasses import dataclass

import numpy as np
import torch

from models.ranking import blend, rank_vectors_chunked


@dataclass(frozen=True)
class SearchHits:
    """Best first; ties in score are broken by the smaller id."""

    ids: np.ndarray  # (k,) int64
    scores: np.ndarray  # (k,) float32, Eq. 7
    cosine: np.ndarray  # (k,) float32
    rank: np.ndarray  # (k,) float32, Spearman correlation of the two rank vectors

    def __len__(self) -> int:
        return len(self.ids)


def eq7_scores(
    query: torch.Tensor,
    query_rank: torch.Tensor,
    documents: torch.Tensor,
    anchors: torch.Tensor,
    lambda_inf: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 7 of one query against documents; returns (score, cosine, rank), each (n,).

    `query` (dim,) and `documents` (n, dim) are unit vectors, `query_rank` (m,) is the query's
    normalised rank vector (Eq. 2-3) against `anchors` (m, dim); z_q.z_d is Spearman's rho
    (Appendix A.1).
    """
    cosine = documents @ query  # (n,)
    rank = rank_vectors_chunked(documents, anchors) @ query_rank  # (n,)
    return blend(cosine, rank, lambda_inf), cosine, rank


def top_hits(
    ids: np.ndarray, scores: np.ndarray, cosine: np.ndarray, rank: np.ndarray, k: int
) -> SearchHits:
    order = np.lexsort((ids, -scores))[:k]  # score descending, then id ascending
    return SearchHits(
        ids=ids[order].astype(np.int64),
        scores=scores[order].astype(np.float32),
        cosine=cosine[order].astype(np.float32),
        rank=rank[order].astype(np.float32),
    )


def empty_hits() -> SearchHits:
    empty = np.empty(0, dtype=np.float32)
    return SearchHits(np.empty(0, dtype=np.int64), empty, empty, empty)
