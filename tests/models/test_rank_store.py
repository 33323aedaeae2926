"""Precomputed, quantised rank vectors (models/rank_codes.py, models/rank_store.py) against the
exact path: the approximation's Spearman error and top-k agreement are bounded, and the store
stays in step with the index's writes."""

import mmap
import resource
import sys
from collections.abc import Callable

import numpy as np
import pytest
import torch

from models import index as index_module
from models import rank_codes
from models import rank_store as rank_store_module
from models.index import IndexConfig, SearchIndex
from models.rank_codes import RankCodec, expected_error
from models.rank_store import RankStore
from models.ranking import anchor_ranks, normalisation, normalise_ranks, rank_vectors
from models.rescoring import SearchHits

DIM = 32
LAMBDA = 0.1
KEY = "encoder-anchors-m"


def clustered(rng: np.random.Generator, centres: np.ndarray, n: int) -> np.ndarray:
    points = centres[rng.integers(0, len(centres), n)] + 0.1 * rng.standard_normal((n, DIM))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, torch.Tensor, np.ndarray]:
    """(documents (3000, dim), anchors (2000, dim), queries (40, dim)) from shared clusters."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((40, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    docs = clustered(rng, centres, 3000)
    anchors = torch.from_numpy(clustered(rng, centres, 2000))
    return docs, anchors, clustered(rng, centres, 40)


def store_for(anchors: torch.Tensor, bits: int, budget: int = 1 << 30) -> RankStore:
    return RankStore(anchors, KEY, bits, budget)  # type: ignore[arg-type]


@pytest.mark.parametrize(("bits", "bound"), [(8, 1e-3), (4, 1.5e-2)])
def test_quantised_rank_similarity_error_is_bounded(corpus, bits: int, bound: float) -> None:
    docs, anchors, queries = corpus
    codec = RankCodec(len(anchors), bits)  # type: ignore[arg-type]
    codes = codec.encode(anchor_ranks(torch.from_numpy(docs[:500]), anchors).numpy())
    z_docs = rank_vectors(torch.from_numpy(docs[:500]), anchors)  # (500, m)
    z_queries = rank_vectors(torch.from_numpy(queries), anchors)  # (q, m)
    errors = np.stack(
        [codec.similarity(codes, z).numpy() - (z_docs @ z).numpy() for z in z_queries]
    )  # (q, 500)
    assert np.abs(errors).max() <= bound
    # The rounding noise is what the codec's own estimate says, and unbiased.
    assert errors.std() <= 1.5 * expected_error(len(anchors), bits)  # type: ignore[arg-type]
    assert abs(errors.mean()) <= 0.1 * expected_error(len(anchors), bits)  # type: ignore[arg-type]


@pytest.mark.parametrize("m", [2, 7, 300, 1999])
@pytest.mark.parametrize("bits", [16, 8, 4])
def test_the_error_bound_holds_for_every_document(corpus, m: int, bits: int) -> None:
    docs, anchors, queries = corpus
    anchors = anchors[:m]
    codec = RankCodec(m, bits)  # type: ignore[arg-type]
    # The documents themselves, and each query as a document of its own: a document ranked
    # like the query makes every bucket's rounding err in the query's direction.
    vectors = torch.from_numpy(np.concatenate([docs[:300], queries]))  # (n, dim)
    codes = codec.encode(anchor_ranks(vectors, anchors).numpy())
    z_docs = rank_vectors(vectors, anchors)  # (n, m)
    for z in rank_vectors(torch.from_numpy(queries), anchors):
        errors = np.abs(codec.similarity(codes, z).numpy() - (z_docs @ z).numpy())  # (n,)
        bound = codec.error_bound
        # z's L1 norm is the same for every query (ranks are a permutation): the bound's term.
        scale, _ = normalisation(m)
        assert float(z.abs().sum()) == pytest.approx(scale * (m * m // 4), rel=1e-5)
        assert errors.max() <= bound
        # Hoelder's bound, about 3 / (2L) plus the variance correction's 1 / L^2: far above
        # the typical error, tight enough to rule out most candidates at lambda = 0.1.
        assert bound <= 3 / (2 * codec.levels) + 3 / m + 2 / codec.levels**2


@pytest.mark.parametrize("m", [2, 7, 300, 301, 70_001])
@pytest.mark.parametrize("bits", [16, 8, 4])
def test_codes_stand_for_their_bucket_of_ranks(m: int, bits: int) -> None:
    codec = RankCodec(m, bits)  # type: ignore[arg-type]
    ranks = np.stack([np.random.default_rng(s).permutation(m) for s in range(3)])  # (3, m)
    packed = codec.encode(ranks)
    assert packed.shape == (3, {16: 2 * m, 8: m, 4: (m + 1) // 2}[bits])
    centres = codec.decode_ranks(packed)  # (3, m)
    levels = min(1 << bits, m)
    assert codec.lossless == (levels == m)
    if codec.lossless:  # no more anchors than levels (2, 7 at 8 bits): the ranks themselves
        np.testing.assert_array_equal(centres, ranks)
    # Half a bucket and half a rank, plus the float32 rounding of a centre.
    assert np.abs(centres - ranks).max() <= m / levels / 2 + 0.5 + np.spacing(np.float32(m))
    # The dot product on codes equals the dot product with the decoded rank vectors, rescaled.
    z = normalise_ranks(torch.from_numpy(ranks[:1].astype(np.float64)))[0]
    decoded = normalise_ranks(torch.from_numpy(centres.astype(np.float64))) @ z
    shrink = 1.0 if codec.lossless else 1 - 1 / levels**2
    similarity = codec.similarity(packed, z.float()).double()
    torch.testing.assert_close(similarity, decoded / shrink, atol=1e-5, rtol=0)


def filled_index(docs: np.ndarray, store: RankStore | None) -> SearchIndex:
    index = SearchIndex(DIM, IndexConfig(use_gpu=False))
    index.upsert(np.arange(len(docs)), docs)
    if store is not None:
        missing = index.attach_rank_store(store)
        assert index.backfill_ranks(store, missing) == len(docs)
    return index


@pytest.mark.parametrize(("bits", "overlap"), [(16, 1.0), (8, 0.95), (4, 0.9)])
def test_top10_with_precomputed_ranks_agrees_with_the_exact_path(
    corpus, bits: int, overlap: float
) -> None:
    docs, anchors, queries = corpus
    index = filled_index(docs, store_for(anchors, bits))
    agreement, worst = [], 0.0
    for q in queries:
        query = torch.from_numpy(q)
        args = {"top_k": 10, "candidates": 100, "lambda_inf": LAMBDA}
        exact = index.search(query, anchors, **args)
        approx = index.search(query, anchors, **args, anchors_key=KEY)
        agreement.append(len(set(exact.ids.tolist()) & set(approx.ids.tolist())) / 10)
        true_rank = dict(zip(exact.ids.tolist(), exact.rank.tolist(), strict=True))
        for doc_id, rank in zip(approx.ids.tolist(), approx.rank.tolist(), strict=True):
            if doc_id in true_rank:
                worst = max(worst, abs(rank - true_rank[doc_id]))
    assert np.mean(agreement) >= overlap
    assert worst <= {16: 1e-6, 8: 1e-3, 4: 1.5e-2}[bits]


def test_writes_keep_the_store_in_step(corpus) -> None:
    docs, anchors, _ = corpus
    store = store_for(anchors, 8)
    index = SearchIndex(DIM, IndexConfig(use_gpu=False))
    index.upsert([1, 2], docs[:2])
    assert index.attach_rank_store(store).tolist() == [1, 2]  # present before: to backfill
    index.upsert([3], docs[2:3])  # written after: stored at once
    assert 3 in store and 1 not in store
    assert index.backfill_ranks(store, np.array([1, 2, 3])) == 2
    assert len(store) == 3
    index.upsert([2], docs[10:11])  # a new text replaces its row
    z = rank_vectors(torch.from_numpy(docs[20:21]), anchors)[0]
    found, rho = store.similarities(np.array([2, 1]), z)  # 2's row holds its new text
    assert found.tolist() == [True, True]
    expected = store.codec.similarity(store.encode_embeddings(docs[[10, 0]]), z).numpy()
    np.testing.assert_array_equal(rho, expected)
    index.remove([1])
    assert 1 not in store and len(store) == 2
    other = store_for(anchors, 4)
    index.attach_rank_store(other)  # a new store (new anchors) replaces the old one
    assert index.backfill_ranks(store, np.array([2])) is None  # the old one is detached
    assert index.rank_store is other


def test_backfill_never_stores_ranks_of_an_embedding_replaced_meanwhile(
    corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, anchors, _ = corpus
    store = store_for(anchors, 8)
    index = SearchIndex(DIM, IndexConfig(use_gpu=False))
    index.upsert([5], docs[:1])
    missing = index.attach_rank_store(store)
    encode = store.encode_embeddings

    def upsert_during_encoding(vectors: np.ndarray) -> np.ndarray:
        codes = encode(vectors)
        index._ranks = None  # an upsert racing the backfill that could not write a row
        index.upsert([5], docs[1:2])
        index._ranks = store
        return codes

    monkeypatch.setattr(store, "encode_embeddings", upsert_during_encoding)
    assert index.backfill_ranks(store, missing) == 0
    assert 5 not in store  # scored exactly, rather than from the old text's ranks


Write = Callable[[SearchIndex, SearchHits, torch.Tensor], None]


def search_meeting_a_write(
    corpus, monkeypatch: pytest.MonkeyPatch, exact: bool, write: Write
) -> tuple[SearchHits, SearchHits, Callable[[], SearchHits]]:
    """(a search's hits, the same search's hits when `write` lands between faiss and the codes
    (models/index.py) each time it finds the candidates, a function searching again)."""
    docs, anchors, queries = corpus
    index = filled_index(docs[:500], store_for(anchors, 8))
    query = torch.from_numpy(queries[0])
    args = {"top_k": 10, "candidates": 100, "lambda_inf": LAMBDA, "anchors_key": KEY}

    def search() -> SearchHits:
        return index.search(query, anchors, **args, exact=exact)

    before = search()
    rank_query = index_module.query_vectors

    def write_first(
        query: torch.Tensor, anchors: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        write(index, before, query)
        return rank_query(query, anchors)

    monkeypatch.setattr(index_module, "query_vectors", write_first)
    after = search()
    monkeypatch.undo()
    return before, after, search


@pytest.mark.parametrize("exact", [True, False])
def test_a_candidate_removed_while_the_query_is_ranked_is_left_out(
    corpus, monkeypatch: pytest.MonkeyPatch, exact: bool
) -> None:
    def remove_the_best(index: SearchIndex, before: SearchHits, query: torch.Tensor) -> None:
        index.remove([int(before.ids[0])])  # a second time removes nothing: no write

    before, after, _ = search_meeting_a_write(corpus, monkeypatch, exact, remove_the_best)
    assert len(after) == 10 and int(before.ids[0]) not in after.ids.tolist()
    np.testing.assert_array_equal(after.ids[:9], before.ids[1:])
    np.testing.assert_array_equal(after.scores[:9], before.scores[1:])


@pytest.mark.parametrize("exact", [True, False])
def test_a_candidate_replaced_while_the_query_is_ranked_is_scored_as_it_is_now(
    corpus, monkeypatch: pytest.MonkeyPatch, exact: bool
) -> None:
    def move_the_last_onto_the_query(
        index: SearchIndex, before: SearchHits, query: torch.Tensor
    ) -> None:
        # Each time: the search reading embeddings later gives way to the one copying them out
        # first, which meets the write too and reads the candidates' embeddings again.
        index.upsert([int(before.ids[-1])], query.numpy()[None])

    before, after, search = search_meeting_a_write(
        corpus, monkeypatch, exact, move_the_last_onto_the_query
    )
    assert after.ids[0] == before.ids[-1] and after.cosine[0] == pytest.approx(1.0, abs=1e-5)
    again = search()
    np.testing.assert_array_equal(after.ids, again.ids)
    np.testing.assert_allclose(after.scores, again.scores, atol=1e-6)


def test_documents_past_the_budget_and_other_anchors_are_scored_exactly(corpus) -> None:
    docs, anchors, queries = corpus
    budget = 700 * len(anchors)  # 700 rows of 8-bit codes
    store = store_for(anchors, 8, budget=budget)
    index = filled_index(docs[:700], store)
    index.upsert(np.arange(700, 3000), docs[700:])
    assert len(store) == store.capacity == 700
    query = torch.from_numpy(queries[0])
    exact = index.search(query, anchors, top_k=50, candidates=200, lambda_inf=LAMBDA)
    for key in (KEY, "other-anchors"):
        hits = index.search(
            query, anchors, top_k=50, candidates=200, lambda_inf=LAMBDA, anchors_key=key
        )
        stored = np.array([doc_id in store for doc_id in hits.ids.tolist()])
        truth = dict(zip(exact.ids.tolist(), exact.rank.tolist(), strict=True))
        for doc_id, rank, was_stored in zip(hits.ids.tolist(), hits.rank, stored, strict=True):
            if doc_id in truth and (key != KEY or not was_stored):
                assert rank == pytest.approx(truth[doc_id], abs=1e-6)


def test_the_store_takes_memory_as_rows_are_written_not_its_whole_budget() -> None:
    rng = np.random.default_rng(0)
    anchors = torch.from_numpy(clustered(rng, np.eye(DIM), 16))
    before = _rss_bytes()
    store = store_for(anchors, 4, budget=8 << 30)  # 8 GB of address space
    assert store.capacity == (8 << 30) // store.codec.row_bytes
    vectors = clustered(rng, np.eye(DIM), 3000)
    assert store.put(np.arange(3000), store.encode_embeddings(vectors)) == 3000
    assert store.bytes_used == 3000 * 8
    assert _rss_bytes() - before < 64 << 20  # at most a few 2 MB pages, never the budget
    z = rank_vectors(torch.from_numpy(vectors[:1]), anchors)[0]
    found, rho = store.similarities(np.array([2999, 3000, 0]), z)
    assert found.tolist() == [True, False, True]
    expected = store.codec.similarity(store.encode_embeddings(vectors[[2999, 0]]), z).numpy()
    np.testing.assert_array_equal(rho, [expected[0], 0.0, expected[1]])
    store.close()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * mmap.PAGESIZE


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_written_rows_are_read_without_a_page_fault() -> None:
    rng = np.random.default_rng(1)
    anchors = torch.from_numpy(clustered(rng, np.eye(DIM), 4096))  # 4 KB of codes per row
    store = store_for(anchors, 8)
    vectors = clustered(rng, np.eye(DIM), 1500)
    store.put(np.arange(1500), store.encode_embeddings(vectors))
    ids = np.arange(0, 1500, 15)  # 100 rows, 60 KB apart
    z = rank_vectors(torch.from_numpy(vectors[:1]), anchors)[0]

    def read_faults() -> int:
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        store.similarities(ids, z)
        return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before

    first, again = read_faults(), read_faults()
    # Both reads fault in their fresh output arrays alike; unmapped rows would add about one
    # fault each to the first.
    assert first - again <= 8
    store.close()


@pytest.mark.parametrize("bits", [16, 8, 4])
def test_without_numba_the_codes_score_the_same(
    corpus, bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, anchors, queries = corpus
    codec = RankCodec(len(anchors) - 1, bits)  # an odd M: a 4-bit pad column
    anchors = anchors[:-1]
    codes = codec.encode(anchor_ranks(torch.from_numpy(docs[:50]), anchors).numpy())
    z = rank_vectors(torch.from_numpy(queries[:1]), anchors)[0]
    rows = np.array([41, 3, 3, 17])  # any rows, in any order, read in place
    compiled = codec.similarity(codes, z)
    compiled_rows = codec.similarity_rows(codes, rows, z)
    torch.testing.assert_close(compiled_rows, compiled[rows], atol=1e-6, rtol=0)
    monkeypatch.setattr(rank_codes, "_kernels", lambda: None)
    torch.testing.assert_close(codec.similarity(codes, z), compiled, atol=1e-6, rtol=0)
    torch.testing.assert_close(
        codec.similarity_rows(codes, rows, z), compiled_rows, atol=1e-6, rtol=0
    )


def test_a_reservation_the_kernel_refuses_is_halved_until_it_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(2)
    anchors = torch.from_numpy(clustered(rng, np.eye(DIM), 16))  # 16 bytes of 8-bit codes a row
    real_mmap = mmap.mmap

    def strict(fileno: int, length: int, *args: object, **kwargs: object) -> mmap.mmap:
        if length > 1000 * 16:  # what strict overcommit would refuse here
            raise OSError(12, "Cannot allocate memory")
        return real_mmap(fileno, length, *args, **kwargs)

    monkeypatch.setattr(rank_store_module.mmap, "mmap", strict)
    store = store_for(anchors, 8, budget=8000 * 16)
    assert store.capacity == 1000  # 8000 rows, then 4000, 2000, 1000
    vectors = clustered(rng, np.eye(DIM), 1200)
    assert store.put(np.arange(1200), store.encode_embeddings(vectors)) == 1000
    assert 999 in store and 1000 not in store  # the rest are scored exactly, as past a budget
    store.close()
