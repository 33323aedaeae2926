"""Eq. 7 rescoring of search candidates, and the hits it returns.

Reference: Seonwoo et al., "Ranking-Enhanced Unsupervised Sentence Representation Learning"
(ACL 2023), Eq. 7: sim = lambda_inf * z_q.z_d + (1 - lambda_inf) * cos(q, d), with z the
normalised rank vectors of Eq. 2-3 against the anchor matrix.

Every returned z_q.z_d is exact (the candidate's rank vector computed now from its embedding, or
read from lossless 16-bit codes, which hold its ranks) unless the caller asks for approximate
scores. StoredRanks reads estimates of z_q.z_d from the rank codes (models/rank_codes.py) of
some candidates, one dot product each: an exact search with quantised codes uses them only to
bound each candidate's similarity (RankCodec.error_bound) and computes rank vectors for just the
candidates those bounds cannot rule out, so its hits and scores are the exact ones; an
approximate search, or one with lossless codes, scores the candidates that have codes from
them. Either reads the codes of the top_k candidates by cosine first, then only of those that
could still reach the lowest score those imply: reading a row costs more than its arithmetic,
most of all a row no search has read for a while (docs/search.md, the rank store).

Rank vectors are the cost (a (n, m) product with the anchors and a sort per row), and most
candidates cannot reach the top_k: Spearman's rho is at most 1, so a candidate scores at most
(1 - lambda) cos + lambda. `rescore` scores the best candidates by cosine first, then only those
whose bound still reaches the k-th best score found, which leaves the same hits as scoring every
candidate (a threshold algorithm, as in Fagin et al., "Optimal aggregation algorithms for
middleware", PODS 2001).
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from models.candidates import Candidates
from models.cpu_products import row_dots
from models.rank_codes import RankCodec
from models.ranking import blend, rank_vectors, rank_vectors_chunked

# Spearman's rho of two rank vectors is at most 1; the margin covers float32 rounding and the
# rescaling of decoded rank codes (models/rank_codes.py), which can lift a rho a hair above 1.
_RHO_MAX = 1.01
_BLOCK = 16  # candidates scored first (at least top_k), and per block of those without codes


@dataclass(frozen=True)
class SearchHits:
    """Best first; ties in score are broken by the smaller id."""

    ids: np.ndarray  # (k,) int64
    scores: np.ndarray  # (k,) float32, Eq. 7
    cosine: np.ndarray  # (k,) float32
    rank: np.ndarray  # (k,) float32, Spearman correlation of the two rank vectors

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class StoredRanks:
    """Spearman estimates of the candidates that have rank codes (RankStore.similarities)."""

    # ids (p,) -> (found (p,) bool: the document has codes, rho (p,) float32: z_q . z_d from
    # them, 0 where it has none)
    read: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    query_rank: torch.Tensor  # (m,) the exact query rank vector they are computed against
    codec: RankCodec

    @property
    def error(self) -> float:
        """The most any estimate can differ from its exact value."""
        return self.codec.error_bound


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
    cosine = row_dots(documents, query)  # (n,)
    rank = row_dots(rank_vectors_chunked(documents, anchors), query_rank)  # (n,)
    return blend(cosine, rank, lambda_inf), cosine, rank


def _rows_after(first: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """first (dim,) stacked on rows (r, dim), without OpenMP on CPU (Candidates.rows)."""
    if rows.device.type == "cpu":
        return torch.from_numpy(np.concatenate([first.numpy()[None], rows.numpy()]))
    return torch.cat([first[None], rows])


def _on_anchors(query: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """The query as a float32 vector (dim,) on the anchors' device."""
    return query.to(device=anchors.device, dtype=torch.float32).reshape(-1)


def query_vectors(query: torch.Tensor, anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The query (dim,) on the anchors' device, and its normalised rank vector (m,)."""
    query_t = _on_anchors(query, anchors)
    return query_t, rank_vectors(query_t[None], anchors)[0]


def rescore(
    query: torch.Tensor,
    anchors: torch.Tensor,
    candidates: Candidates,
    *,
    lambda_inf: float,
    top_k: int,
    stored: StoredRanks | None = None,
    exact: bool = True,
) -> SearchHits:
    """The top_k of `candidates` by Eq. 7.

    Exact: the hits of scoring every candidate, with rank vectors computed only for those whose
    score bound (module docstring) can still reach the top_k. With exact=False or lossless
    codes, candidates with `stored` estimates are scored from them instead. Embeddings are
    read only for the candidates that get rank vectors.
    """
    if len(candidates) == 0:
        return empty_hits()
    query_t = _on_anchors(query, anchors)  # (dim,)
    ids, cosine = candidates.ids, candidates.cosine
    order = np.lexsort((ids, -cosine))  # (n,) cosine descending, then id
    if stored is not None:
        error = stored.error if exact else 0.0
        found, rho, read = _read_codes(stored, candidates, order, error, lambda_inf, top_k)
    if stored is None or not found.any():
        highest = candidates.cosine_high[order]  # (n,) non-increasing
        bound = _bound_without_rank(highest, lambda_inf)  # (n,)
        return _rescore_exact(query_t, anchors, candidates, order, bound, lambda_inf, top_k)
    if exact and not stored.codec.lossless:
        return _rescore_verified(
            query_t, anchors, candidates, found, rho, stored, lambda_inf, top_k
        )
    # Estimates cost nothing more: every candidate that has one is scored from it (lossless
    # codes' estimates are the exact similarities, summed in another order).
    rank = torch.from_numpy(rho[found])  # (f,)
    score = blend(torch.from_numpy(cosine[found]), rank, lambda_inf)  # (f,)
    kept = top_hits(ids[found], score.numpy(), cosine[found], rank.numpy(), top_k)
    # The others get exact rank vectors, best cosine first, while their bound reaches the top_k;
    # those whose codes went unread could not reach it (_read_codes).
    missing = order[read[order] & ~found[order]]  # (u,)
    bound = _bound_without_rank(candidates.cosine_high[missing], lambda_inf)  # (u,)
    for start in range(0, len(missing), _BLOCK):
        if len(kept) == top_k and bound[start] < kept.scores[-1]:
            break
        take = missing[start : start + _BLOCK]  # (b,)
        rows = candidates.rows(take, anchors.device)  # (b, dim)
        score, cos, rank = eq7_scores(query_t, stored.query_rank, rows, anchors, lambda_inf)
        kept = _merge(kept, ids[take], score, cos, rank, top_k)
    return kept


def _read_codes(
    stored: StoredRanks,
    candidates: Candidates,
    order: np.ndarray,
    error: float,
    lambda_inf: float,
    top_k: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(found, rho, read), each (n,): the codes of the top_k candidates by cosine (`order`),
    then of the others whose bound can still reach the lowest score the first imply.

    A first candidate's score is at least its estimate minus `error` (the codes' error bound
    for an exact search, 0 for an approximate one, which scores from the estimates), or with
    no codes its cosine's part minus lambda * _RHO_MAX. So the top_k's k-th score is at least
    the lowest of those, and a candidate whose bound without codes is below it can enter the
    top_k neither way: its codes would change no hit, and it is left unread (read False, found
    False), as the bounds in _rescore_verified and rescore's approximate path rule it out.
    """
    ids = candidates.ids
    found = np.zeros(len(ids), dtype=bool)  # (n,)
    rho = np.zeros(len(ids), dtype=np.float32)  # (n,)
    first = order[:top_k]  # (k,)
    found[first], rho[first] = stored.read(ids[first])
    rest = order[top_k:]  # (n - k,)
    if len(rest):
        rho_low = np.where(found[first], rho[first] - error, -_RHO_MAX)  # (k,)
        floor = np.min((1.0 - lambda_inf) * candidates.cosine_low[first] + lambda_inf * rho_low)
        reach = _bound_without_rank(candidates.cosine_high[rest], lambda_inf) >= floor
        rest = rest[reach]  # (r,)
        found[rest], rho[rest] = stored.read(ids[rest])
    read = np.zeros(len(ids), dtype=bool)  # (n,)
    read[first] = read[rest] = True
    return found, rho, read


def _bound_without_rank(cosine: np.ndarray, lambda_inf: float) -> np.ndarray:
    """The highest Eq. 7 score candidates of these cosines could reach, rho being at most 1."""
    return (1.0 - lambda_inf) * cosine + lambda_inf * _RHO_MAX


def _rescore_exact(
    query: torch.Tensor,
    anchors: torch.Tensor,
    candidates: Candidates,
    order: np.ndarray,
    bound: np.ndarray,
    lambda_inf: float,
    top_k: int,
) -> SearchHits:
    """rescore's exact path in two products with the anchor matrix, since each one reads all of
    it (15 MB at M = 10k: on CPU the read, not the arithmetic, is what a small block costs):
    the query with the best candidates by cosine, then every other candidate whose bound
    reaches the k-th score found. That score only rises as more are scored, so no candidate
    left out could have entered the top_k."""
    ids = candidates.ids
    head = order[: max(top_k, _BLOCK)]  # (h,)
    head_rows = candidates.rows(head, anchors.device)  # (h, dim)
    ranks = rank_vectors_chunked(_rows_after(query, head_rows), anchors)  # (1 + h, m)
    query_rank, ranks = ranks[0], ranks[1:]  # (m,), (h, m)
    cosine = row_dots(head_rows, query)  # (h,)
    rank = row_dots(ranks, query_rank)  # (h,)
    kept = _merge(empty_hits(), ids[head], blend(cosine, rank, lambda_inf), cosine, rank, top_k)
    # bound is non-increasing, so the candidates that still reach the k-th score are a prefix
    # (none is left when head held every candidate, however few).
    reach = len(head) + int(np.count_nonzero(bound[len(head) :] >= kept.scores[-1]))
    if reach == len(head):
        return kept
    take = order[len(head) : reach]  # (r,)
    rows = candidates.rows(take, anchors.device)  # (r, dim)
    score, cos, rank = eq7_scores(query, query_rank, rows, anchors, lambda_inf)
    return _merge(kept, ids[take], score, cos, rank, top_k)


def _rescore_verified(
    query: torch.Tensor,
    anchors: torch.Tensor,
    candidates: Candidates,
    found: np.ndarray,
    rho: np.ndarray,
    stored: StoredRanks,
    lambda_inf: float,
    top_k: int,
) -> SearchHits:
    """rescore's exact path when codes exist (`found` (n,), estimates `rho` (n,)), in one
    product with the anchor matrix.

    The codes put each candidate's rho within `stored.error` of its estimate (rho in
    [-1.01, 1.01] without codes), and its cosine lies within the candidates' cosine error, so
    each Eq. 7 score lies in [low, high]. At least top_k candidates score at least the top_k-th
    largest `low`, so one whose `high` is below it cannot be in the top_k: only the others get
    exact rank vectors, and the hits are the exact ones.
    """
    error = np.where(found, stored.error, 2 * _RHO_MAX)  # (n,)
    rho_low = np.maximum(rho - error, -_RHO_MAX)  # (n,)
    rho_high = np.minimum(rho + error, _RHO_MAX)  # (n,)
    low = (1.0 - lambda_inf) * candidates.cosine_low + lambda_inf * rho_low  # (n,)
    high = (1.0 - lambda_inf) * candidates.cosine_high + lambda_inf * rho_high  # (n,)
    kth = np.partition(low, -top_k)[-top_k] if len(low) > top_k else -np.inf
    take = np.flatnonzero(high >= kth)  # (t,)
    rows = candidates.rows(take, anchors.device)  # (t, dim)
    score, cos, rank = eq7_scores(query, stored.query_rank, rows, anchors, lambda_inf)
    return _merge(empty_hits(), candidates.ids[take], score, cos, rank, top_k)


def _merge(
    kept: SearchHits,
    ids: np.ndarray,
    score: torch.Tensor,
    cosine: torch.Tensor,
    rank: torch.Tensor,
    top_k: int,
) -> SearchHits:
    """The top_k of `kept` and newly scored candidates (ids (c,), the rest (c,) tensors)."""
    return top_hits(
        np.concatenate([kept.ids, ids]),
        np.concatenate([kept.scores, score.cpu().numpy()]),
        np.concatenate([kept.cosine, cosine.cpu().numpy()]),
        np.concatenate([kept.rank, rank.cpu().numpy()]),
        top_k,
    )


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
