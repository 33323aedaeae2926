"""Eq. 7 rescoring with its score bound: the same hits as scoring every candidate."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from models import rescoring
from models.candidates import Candidates, cosine_error, from_scores, with_embeddings
from models.rank_codes import RankCodec
from models.ranking import anchor_ranks, blend
from models.rescoring import SearchHits, StoredRanks, eq7_scores, query_vectors, rescore, top_hits

DIM, M = 32, 500


def unit(rng: np.random.Generator, n: int, spread: float) -> np.ndarray:
    """n unit vectors around one direction: spread 0 is that direction, large is uniform."""
    centre = np.ones(DIM, dtype=np.float32)
    points = centre / np.sqrt(DIM) + spread * rng.standard_normal((n, DIM)).astype(np.float32)
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def score_all(
    query: torch.Tensor,
    anchors: torch.Tensor,
    ids: np.ndarray,
    vectors: np.ndarray,
    lambda_inf: float,
    top_k: int,
    codes: "Codes | None" = None,
) -> SearchHits:
    """Every candidate scored, no bound: the reference; from `codes` estimates where found."""
    query_t, query_rank = query_vectors(query, anchors)
    score, cosine, rank = eq7_scores(
        query_t, query_rank, torch.from_numpy(vectors), anchors, lambda_inf
    )
    if codes is not None:
        rank = torch.where(torch.from_numpy(codes.found), torch.from_numpy(codes.rho), rank)
        score = blend(cosine, rank, lambda_inf)
    return top_hits(ids, score.numpy(), cosine.numpy(), rank.numpy(), top_k)


def rescore_vectors(
    query: torch.Tensor, anchors: torch.Tensor, ids: np.ndarray, vectors: np.ndarray, **args: Any
) -> SearchHits:
    """rescore of candidates `ids` (n,) with their embeddings `vectors` (n, dim) at hand."""
    return rescore(query, anchors, with_embeddings(ids, vectors, query.numpy()), **args)


def assert_same(hits: SearchHits, reference: SearchHits) -> None:
    np.testing.assert_array_equal(hits.ids, reference.ids)
    np.testing.assert_allclose(hits.scores, reference.scores, atol=1e-6)
    np.testing.assert_allclose(hits.cosine, reference.cosine, atol=1e-6)
    np.testing.assert_allclose(hits.rank, reference.rank, atol=1e-6)


@pytest.mark.parametrize("lambda_inf", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("top_k", [1, 10, 150])
@pytest.mark.parametrize("spread", [0.05, 0.3, 3.0])
def test_bounded_rescoring_equals_scoring_every_candidate(
    lambda_inf: float, top_k: int, spread: float
) -> None:
    rng = np.random.default_rng(int(lambda_inf * 10) + top_k + int(spread * 100))
    anchors = torch.from_numpy(unit(rng, M, 3.0))
    vectors = unit(rng, 120, spread)
    ids = rng.permutation(10_000)[:120].astype(np.int64)
    query = torch.from_numpy(unit(rng, 1, spread)[0])
    hits = rescore_vectors(query, anchors, ids, vectors, lambda_inf=lambda_inf, top_k=top_k)
    assert_same(hits, score_all(query, anchors, ids, vectors, lambda_inf, top_k))


def test_equal_cosines_keep_the_smaller_id_first() -> None:
    rng = np.random.default_rng(7)
    anchors = torch.from_numpy(unit(rng, M, 3.0))
    vectors = np.repeat(unit(rng, 1, 1.0), 40, axis=0)  # 40 copies: every score ties
    ids = np.arange(1000, 960, -1, dtype=np.int64)
    query = torch.from_numpy(unit(rng, 1, 1.0)[0])
    hits = rescore_vectors(query, anchors, ids, vectors, lambda_inf=0.1, top_k=5)
    np.testing.assert_array_equal(hits.ids, [961, 962, 963, 964, 965])


@dataclass
class Codes:
    """The rank codes of every candidate (by position in `ids`), and the ids rescoring read."""

    ids: np.ndarray  # (n,)
    found: np.ndarray  # (n,) bool
    rho: np.ndarray  # (n,) float32
    query_rank: torch.Tensor  # (m,)
    codec: RankCodec
    read: list[int] = field(default_factory=list)

    def _read(self, subset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.read.extend(subset.tolist())
        position = {doc_id: i for i, doc_id in enumerate(self.ids.tolist())}
        positions = np.array([position[doc_id] for doc_id in subset.tolist()], dtype=np.int64)
        return self.found[positions], self.rho[positions]

    @property
    def stored(self) -> StoredRanks:
        return StoredRanks(self._read, self.query_rank, self.codec)


def stored_ranks(
    rng: np.random.Generator,
    query: torch.Tensor,
    anchors: torch.Tensor,
    ids: np.ndarray,
    vectors: np.ndarray,
    bits: int,
    share: float,
) -> Codes:
    """Estimates from the codes of a random `share` of the candidates; the others have none."""
    codec = RankCodec(len(anchors), bits)  # type: ignore[arg-type]
    found = rng.random(len(vectors)) < share
    ranks = anchor_ranks(torch.from_numpy(vectors[found]), anchors).numpy().astype(np.int64)
    query_rank = query_vectors(query, anchors)[1]
    rho = np.zeros(len(vectors), dtype=np.float32)
    rho[found] = codec.similarity(codec.encode(ranks), query_rank).numpy()
    return Codes(ids, found, rho, query_rank, codec)


def test_approximate_search_scores_the_candidates_with_codes_from_them() -> None:
    rng = np.random.default_rng(3)
    anchors = torch.from_numpy(unit(rng, M, 3.0))
    vectors = unit(rng, 100, 0.3)
    ids = np.arange(100, dtype=np.int64)
    query = torch.from_numpy(unit(rng, 1, 0.3)[0])
    codes = stored_ranks(rng, query, anchors, ids, vectors, 8, 0.6)  # others scored exactly
    hits = rescore_vectors(
        query, anchors, ids, vectors, lambda_inf=0.1, top_k=10, stored=codes.stored, exact=False
    )
    assert_same(hits, score_all(query, anchors, ids, vectors, 0.1, 10, codes))


@pytest.mark.parametrize("lambda_inf", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("top_k", [1, 10, 150])
@pytest.mark.parametrize(("bits", "share"), [(16, 1.0), (16, 0.6), (8, 1.0), (8, 0.6), (4, 1.0)])
@pytest.mark.parametrize("spread", [0.05, 0.3])
def test_exact_search_with_codes_returns_the_exact_hits(
    lambda_inf: float, top_k: int, bits: int, share: float, spread: float
) -> None:
    rng = np.random.default_rng(int(lambda_inf * 10) + top_k + bits + int(spread * 100))
    anchors = torch.from_numpy(unit(rng, M, 3.0))
    vectors = unit(rng, 120, spread)
    ids = rng.permutation(10_000)[:120].astype(np.int64)
    query = torch.from_numpy(unit(rng, 1, spread)[0])
    codes = stored_ranks(rng, query, anchors, ids, vectors, bits, share)
    hits = rescore_vectors(
        query, anchors, ids, vectors, lambda_inf=lambda_inf, top_k=top_k, stored=codes.stored
    )
    assert_same(hits, score_all(query, anchors, ids, vectors, lambda_inf, top_k))


def count_rank_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each product with the anchor matrix that rescoring makes from now on."""
    rows: list[int] = []

    def counted(
        original: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        def call(embeddings: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
            rows.append(len(embeddings))
            return original(embeddings, anchors)

        return call

    # A call of rank_vectors_chunked is one product, whichever cores share it.
    for name in ("rank_vectors", "rank_vectors_chunked"):
        monkeypatch.setattr(rescoring, name, counted(getattr(rescoring, name)))
    return rows


def test_candidates_that_cannot_reach_the_top_k_get_no_rank_vector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = count_rank_rows(monkeypatch)
    rng = np.random.default_rng(11)
    anchors = torch.from_numpy(unit(rng, M, 3.0))
    vectors = unit(rng, 100, 1.0)  # cosines to the query spread over a wide range
    query = torch.from_numpy(unit(rng, 1, 1.0)[0])
    ids = np.arange(100, dtype=np.int64)
    hits = rescore_vectors(query, anchors, ids, vectors, lambda_inf=0.1, top_k=10)
    products = list(rows)
    assert_same(hits, score_all(query, anchors, ids, vectors, 0.1, 10))
    assert 10 <= sum(products) - 1 < 100  # the query's own rank vector is in the first product
    assert len(products) <= 2  # the anchor matrix is read at most twice


def test_codes_leave_rank_vectors_for_the_top_k_and_the_few_they_cannot_rule_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(12)
    anchors = torch.from_numpy(unit(rng, 2000, 3.0))
    vectors = unit(rng, 100, 0.3)  # cosines close together: the plain bound rules out few
    ids = np.arange(100, dtype=np.int64)
    query = torch.from_numpy(unit(rng, 1, 0.3)[0])
    codes = stored_ranks(rng, query, anchors, ids, vectors, 8, 1.0)  # with the query's ranks
    reference = score_all(query, anchors, ids, vectors, 0.1, 10)
    rows = count_rank_rows(monkeypatch)
    hits = rescore_vectors(
        query, anchors, ids, vectors, lambda_inf=0.1, top_k=10, stored=codes.stored
    )
    assert_same(hits, reference)
    (candidate_rows,) = rows
    assert 10 <= candidate_rows <= 20


def test_whole_ranks_leave_rank_vectors_only_for_candidates_without_codes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(13)
    anchors = torch.from_numpy(unit(rng, 2000, 3.0))
    vectors = unit(rng, 100, 0.3)
    ids = np.arange(100, dtype=np.int64)
    query = torch.from_numpy(unit(rng, 1, 0.3)[0])
    reference = score_all(query, anchors, ids, vectors, 0.1, 10)
    for share in (1.0, 0.6):
        codes = stored_ranks(rng, query, anchors, ids, vectors, 16, share)
        rows = count_rank_rows(monkeypatch)
        hits = rescore_vectors(
            query, anchors, ids, vectors, lambda_inf=0.1, top_k=10, stored=codes.stored
        )
        assert_same(hits, reference)
        # Only candidates without codes get rank vectors: none when every candidate has them.
        assert sum(rows) <= int((~codes.found).sum())
        if share == 1.0:
            assert rows == []


@pytest.mark.parametrize("exact", [True, False])
def test_codes_are_read_only_for_candidates_that_could_reach_the_top_k(exact: bool) -> None:
    rng = np.random.default_rng(13)
    anchors = torch.from_numpy(unit(rng, M, 3.0))
    vectors = unit(rng, 100, 1.0)  # cosines to the query spread over a wide range
    ids = rng.permutation(10_000)[:100].astype(np.int64)
    query = torch.from_numpy(unit(rng, 1, 1.0)[0])
    codes = stored_ranks(rng, query, anchors, ids, vectors, 8, 1.0)
    hits = rescore_vectors(
        query, anchors, ids, vectors, lambda_inf=0.1, top_k=10, stored=codes.stored, exact=exact
    )
    assert_same(hits, score_all(query, anchors, ids, vectors, 0.1, 10, None if exact else codes))
    assert len(set(codes.read)) == len(codes.read)  # no row read twice
    assert 10 <= len(codes.read) < 50
    unread = ~np.isin(ids, codes.read)
    cosine = vectors[unread] @ query.numpy()
    # What a candidate left unread could score at best, its rho at most 1:
    assert np.all(0.9 * cosine + 0.1 < hits.scores[-1])


def on_unit_circle(cosines: list[float]) -> np.ndarray:
    """Unit vectors (n, DIM) whose cosines with the first axis are `cosines`."""
    vectors = np.zeros((len(cosines), DIM), dtype=np.float64)
    vectors[:, 0] = cosines
    vectors[:, 1] = np.sqrt(1.0 - np.square(cosines))
    return vectors.astype(np.float32)


def test_bounds_widen_by_the_cosines_error() -> None:
    """Cosines as faiss computes them may be off by their float32 error: a candidate whose
    given cosine ranks it out of the first block, but whose true cosine beats the block's
    weakest, must still be scored."""
    error = cosine_error(DIM)
    true = [0.9] * 15 + [0.5, 0.5 + 0.3 * error]  # the last truly beats the 16th
    given = np.array([*true[:15], 0.5 + 0.5 * error, 0.5 - 0.7 * error], dtype=np.float32)
    vectors = on_unit_circle(true)
    query = torch.zeros(DIM)
    query[0] = 1.0
    ids = np.arange(len(true), dtype=np.int64)
    anchors = torch.from_numpy(unit(np.random.default_rng(5), M, 3.0))
    reference = score_all(query, anchors, ids, vectors, 0.0, 16)
    assert 16 in reference.ids.tolist() and 15 not in reference.ids.tolist()
    widened = from_scores(ids, given, DIM, vectors.__getitem__)
    assert_same(rescore(query, anchors, widened, lambda_inf=0.0, top_k=16), reference)
    trusted = Candidates(ids, given, 0.0, vectors.__getitem__)  # no error allowed for
    assert 16 not in rescore(query, anchors, trusted, lambda_inf=0.0, top_k=16).ids.tolist()


@pytest.mark.parametrize(("share", "exact"), [(None, True), (1.0, True), (0.6, False)])
def test_embeddings_are_read_only_for_the_rank_vectors_computed(
    monkeypatch: pytest.MonkeyPatch, share: float | None, exact: bool
) -> None:
    rng = np.random.default_rng(17)
    anchors = torch.from_numpy(unit(rng, M, 3.0))
    vectors = unit(rng, 100, 1.0)
    ids = rng.permutation(10_000)[:100].astype(np.int64)
    query = torch.from_numpy(unit(rng, 1, 1.0)[0])
    codes = None if share is None else stored_ranks(rng, query, anchors, ids, vectors, 8, share)
    read: list[int] = []

    def embeddings(positions: np.ndarray) -> np.ndarray:
        read.extend(positions.tolist())
        return vectors[positions]

    scores = (vectors @ query.numpy()).astype(np.float32)
    rows = count_rank_rows(monkeypatch)
    hits = rescore(
        query,
        anchors,
        from_scores(ids, scores, DIM, embeddings),
        lambda_inf=0.1,
        top_k=10,
        stored=None if codes is None else codes.stored,
        exact=exact,
    )
    products = list(rows)
    assert_same(hits, score_all(query, anchors, ids, vectors, 0.1, 10, None if exact else codes))
    assert len(set(read)) == len(read)  # no embedding read twice
    own_row = 1 if codes is None else 0  # the query's rank vector, made with the first block's
    assert len(read) == sum(products) - own_row
    assert len(read) < 40
