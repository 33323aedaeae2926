"""The search index against brute-force Eq. 7 (RankEncoder, Section 3.6)."""

import csv

import faiss
import numpy as np
import pytest
import torch

from core.settings import DATA_DIR, Settings
from models.anchors import AnchorSet
from models.candidates import Candidates
from models.encoder import Encoder
from models.faiss_vectors import FaissVectors
from models.index import IndexConfig, SearchIndex
from models.metadata_terms import metadata_terms
from models.ranking import blend, rank_vectors
from models.rescoring import SearchHits

LAMBDA = 0.1


def clustered_unit_vectors(n: int, dim: int, clusters: int, seed: int) -> np.ndarray:
    """Gaussian clusters on the unit sphere: a corpus with neighbourhoods, unlike pure noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    points = centres[rng.integers(0, clusters, n)] + 0.06 * rng.standard_normal((n, dim))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def brute_force_eq7(query: torch.Tensor, docs: torch.Tensor, anchors: torch.Tensor) -> np.ndarray:
    """Eq. 7 of one query against every document, straight from the definitions."""
    z_docs = rank_vectors(docs, anchors)  # (n, m)
    z_query = rank_vectors(query[None], anchors)[0]  # (m,)
    return blend(docs @ query, z_docs @ z_query, LAMBDA).numpy()  # (n,)


def assert_valid_top_k(hits: SearchHits, reference: np.ndarray, ids: np.ndarray, k: int) -> None:
    """Tie-tolerant, as faiss contrib.evaluation: the scores are the k best, each id is real.

    `reference[j]` is the brute-force score of document `ids[j]`; among equal scores any order
    and any choice at the cut-off is correct.
    """
    position = {int(doc_id): j for j, doc_id in enumerate(ids)}
    expected = np.sort(reference)[::-1][:k]
    np.testing.assert_allclose(hits.scores, expected, atol=1e-5)
    true_scores = reference[[position[int(i)] for i in hits.ids]]
    np.testing.assert_allclose(hits.scores, true_scores, atol=1e-5)
    assert len(set(hits.ids.tolist())) == len(hits)


@pytest.fixture(scope="module")
def sick_sentences() -> list[str]:
    with (DATA_DIR / "senteval" / "SICK" / "SICK_trial.txt").open(encoding="utf-8") as handle:
        rows = csv.DictReader(handle, delimiter="\t")
        texts = [text for row in rows for text in (row["sentence_A"], row["sentence_B"])]
    return list(dict.fromkeys(texts))[:400]


@pytest.fixture(scope="module")
def real_corpus(encoder: Encoder, sick_sentences: list[str]) -> torch.Tensor:
    return encoder.encode(sick_sentences)  # (400, dim)


@pytest.mark.slow
def test_search_with_every_document_as_a_candidate_equals_brute_force_eq7(
    real_corpus: torch.Tensor, anchors: AnchorSet
):
    ids = np.arange(len(real_corpus), dtype=np.int64) * 7 + 3  # arbitrary, non-contiguous
    index = SearchIndex(real_corpus.shape[1])
    index.upsert(ids, real_corpus)
    for q, top_k in ((0, 10), (5, 20), (17, 10), (123, 10), (399, 10)):
        query = real_corpus[q]
        reference = brute_force_eq7(query, real_corpus, anchors.embeddings)
        hits = index.search(
            query, anchors.embeddings, top_k=top_k, candidates=len(ids), lambda_inf=LAMBDA
        )
        assert_valid_top_k(hits, reference, ids, top_k)
        assert hits.ids[0] == ids[q]  # a stored document is its own best match
        np.testing.assert_allclose(hits.scores, blend(hits.cosine, hits.rank, LAMBDA), atol=1e-6)


@pytest.fixture(scope="module")
def large_corpus() -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """20k synthetic documents, 30 held-out queries and 256 anchors from the same clusters."""
    vectors = clustered_unit_vectors(20_000 + 30 + 256, 384, clusters=300, seed=1)
    return vectors[:20_000], vectors[20_000:20_030], torch.from_numpy(vectors[20_030:])


@pytest.mark.parametrize(
    "config",
    [IndexConfig(kind="flat"), IndexConfig(kind="ivf", nlist=128, nprobe=8)],
    ids=["flat", "ivf"],
)
def test_recall_at_10_against_exact_on_20k_documents(
    large_corpus: tuple[np.ndarray, np.ndarray, torch.Tensor], config: IndexConfig
):
    docs, queries, anchors = large_corpus
    index = SearchIndex(docs.shape[1], config)
    index.upsert(np.arange(len(docs)), docs)
    assert index.kind == config.kind
    z_docs = rank_vectors(torch.from_numpy(docs), anchors)  # (n, m)
    recalls = []
    for query in torch.from_numpy(queries):
        z_query = rank_vectors(query[None], anchors)[0]
        exact = blend(torch.from_numpy(docs) @ query, z_docs @ z_query, LAMBDA).numpy()
        truth = set(np.argsort(-exact)[:10].tolist())
        hits = index.search(query, anchors, top_k=10, candidates=100, lambda_inf=LAMBDA)
        recalls.append(len(truth & set(hits.ids.tolist())) / 10)
    assert np.mean(recalls) >= 0.95, np.mean(recalls)


@pytest.fixture
def small_index() -> tuple[SearchIndex, np.ndarray, torch.Tensor]:
    vectors = clustered_unit_vectors(1_000 + 64, 32, clusters=20, seed=2)
    docs, anchors = vectors[:1_000], torch.from_numpy(vectors[1_000:])
    index = SearchIndex(32)
    metadata = [{"parity": i % 2, "tag": "rare" if i % 97 == 0 else "common"} for i in range(1000)]
    index.upsert(np.arange(1000), docs, metadata)
    return index, docs, anchors


def test_deleted_documents_never_come_back(
    small_index: tuple[SearchIndex, np.ndarray, torch.Tensor],
):
    index, docs, anchors = small_index
    query = torch.from_numpy(docs[10])
    before = index.search(query, anchors, top_k=20, candidates=50, lambda_inf=LAMBDA)
    removed = before.ids[:10]
    assert index.remove(removed.tolist()) == 10
    assert index.remove(removed.tolist()) == 0
    assert len(index) == 990
    for hits in (
        index.search(query, anchors, top_k=100, candidates=1000, lambda_inf=LAMBDA),
        index.search(query, anchors, top_k=1000, candidates=1000, lambda_inf=LAMBDA),
        index.search(
            query, anchors, top_k=100, candidates=100, lambda_inf=LAMBDA, where={"parity": 0}
        ),
    ):
        assert not set(removed.tolist()) & set(hits.ids.tolist())
    every = index.search(query, anchors, top_k=1000, candidates=1000, lambda_inf=LAMBDA)
    assert len(every) == 990


def test_upsert_replaces_a_document(small_index: tuple[SearchIndex, np.ndarray, torch.Tensor]):
    index, docs, anchors = small_index
    index.upsert([5], docs[500:501], [{"parity": 0, "tag": "moved"}])
    assert len(index) == 1000
    np.testing.assert_array_equal(index.embeddings([5])[0], docs[500])
    hits = index.search(
        torch.from_numpy(docs[500]), anchors, top_k=2, candidates=10, lambda_inf=LAMBDA
    )
    assert set(hits.ids.tolist()) == {5, 500}
    moved = index.search(
        torch.from_numpy(docs[0]),
        anchors,
        top_k=5,
        candidates=5,
        lambda_inf=LAMBDA,
        where={"tag": "moved"},
    )
    assert moved.ids.tolist() == [5]


def test_filter_is_applied_before_truncation(
    small_index: tuple[SearchIndex, np.ndarray, torch.Tensor],
):
    index, docs, anchors = small_index
    query = torch.from_numpy(docs[3])  # parity 1
    exact = index.search(
        query, anchors, top_k=10, candidates=len(index), lambda_inf=LAMBDA, where={"parity": 0}
    )
    hits = index.search(
        query, anchors, top_k=10, candidates=10, lambda_inf=LAMBDA, where={"parity": 0}
    )
    assert len(hits) == 10 and all(i % 2 == 0 for i in hits.ids.tolist())
    # With 10 candidates the cosine top 10 may differ from Eq. 7's; both must be valid parity-0.
    assert set(exact.ids.tolist()) & set(hits.ids.tolist())
    rare = index.search(
        query,
        anchors,
        top_k=50,
        candidates=20,
        lambda_inf=LAMBDA,
        where={"tag": "rare", "parity": 1.0},
    )
    assert sorted(rare.ids.tolist()) == [i for i in range(1000) if i % 97 == 0 and i % 2 == 1]
    assert (
        len(
            index.search(
                query, anchors, top_k=5, candidates=5, lambda_inf=LAMBDA, where={"tag": "absent"}
            )
        )
        == 0
    )


def test_metadata_terms_follow_json_types():
    assert metadata_terms({"a": 1}) == metadata_terms({"a": 1.0})
    assert metadata_terms({"a": True}) != metadata_terms({"a": 1})
    assert metadata_terms({"a": "1"}) != metadata_terms({"a": 1})
    assert metadata_terms({"a": None}) == (("a", "null"),)
    assert metadata_terms(None) == ()


def test_ivf_trains_once_enough_vectors_exist_and_keeps_every_document():
    vectors = clustered_unit_vectors(3_000, 32, clusters=16, seed=3)
    index = SearchIndex(32, IndexConfig(kind="ivf", nlist=16, nprobe=1, train_size=1_000))
    index.upsert(np.arange(900), vectors[:900], [{"half": i < 450} for i in range(900)])
    assert index.kind == "flat"
    index.upsert(np.arange(900, 3_000), vectors[900:], [{"half": False}] * 2_100)
    assert index.kind == "ivf" and len(index) == 3_000
    np.testing.assert_array_equal(index.embeddings([7, 2_999]), vectors[[7, 2_999]])
    index.remove(range(0, 100))
    assert len(index) == 2_900 and 50 not in index
    # One probed list cannot hold 300 allowed documents: the index must probe further.
    ids, cosines = index.candidates(vectors[200], 300, where={"half": True})
    assert len(ids) == 300 and set(ids.tolist()) <= set(range(100, 450))
    assert np.all(np.diff(cosines) <= 1e-6)


def test_bad_upserts_are_refused():
    index = SearchIndex(8)
    with pytest.raises(ValueError, match="embeddings"):
        index.upsert([1, 2], np.zeros((3, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="duplicate"):
        index.upsert([1, 1], np.zeros((2, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="metadata"):
        index.upsert([1], np.zeros((1, 8), dtype=np.float32), [{}, {}])
    with pytest.raises(ValueError, match="nlist"):
        IndexConfig(kind="ivf", nlist=64, train_size=10)
    assert len(index) == 0


def test_gpu_copy_is_refreshed_after_writes(monkeypatch: pytest.MonkeyPatch):
    """GPU path with the GPU faked: faiss-cpu has no StandardGpuResources, so it is mocked."""
    copies: list[faiss.Index] = []

    def fake_cpu_to_gpu(_resources: object, _device: int, index: faiss.Index) -> faiss.Index:
        copies.append(faiss.clone_index(index))
        return copies[-1]

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", fake_cpu_to_gpu, raising=False)
    vectors = clustered_unit_vectors(200, 16, clusters=4, seed=4)
    index = SearchIndex(16)
    assert index.on_gpu
    index.upsert(np.arange(100), vectors[:100])
    first, _ = index.candidates(vectors[0], 3)
    index.candidates(vectors[1], 3)
    assert len(copies) == 1  # no write in between: the copy is reused
    index.remove([int(first[0])])
    after, _ = index.candidates(vectors[0], 3)
    assert len(copies) == 2 and int(first[0]) not in after.tolist()
    cpu = SearchIndex(16, IndexConfig(use_gpu=False))
    assert not cpu.on_gpu
    cpu.upsert(np.arange(100), vectors[:100])
    cpu.remove([int(first[0])])
    # A GPU's scores are not the CPU's float32 sums: its searches copy every candidate's
    # embedding out with it, and compute their cosines from them.
    anchors, query = torch.from_numpy(vectors[100:164]), torch.from_numpy(vectors[0])
    args = {"top_k": 5, "candidates": 20, "lambda_inf": LAMBDA}
    reads = count_embedding_reads(monkeypatch)
    hits = index.search(query, anchors, **args)
    assert reads == [20]
    reference = cpu.search(query, anchors, **args)
    np.testing.assert_array_equal(hits.ids, reference.ids)
    np.testing.assert_allclose(hits.scores, reference.scores, atol=1e-6)


def test_flat_searches_of_every_allowed_k_keep_their_best_in_a_heap() -> None:
    defaults = Settings()
    largest_k = defaults.max_search_candidates + defaults.max_search_offset
    # Below this k faiss uses its heap, faster for one query than its reservoir (faiss_vectors).
    assert faiss.cvar.distance_compute_min_k_reservoir > largest_k
    index = SearchIndex(4, IndexConfig(kind="flat"))
    vectors = np.random.default_rng(0).standard_normal((3000, 4)).astype(np.float32)
    index.upsert(np.arange(3000), vectors)
    ids, scores = index.candidates(vectors[0], 2000)
    best = np.sort(vectors @ vectors[0])[::-1][:2000]
    np.testing.assert_allclose(scores, best, atol=1e-5)
    np.testing.assert_allclose(scores, vectors[ids] @ vectors[0], atol=1e-5)


def count_embedding_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many embeddings each read out of faiss takes from now on."""
    reads: list[int] = []
    original = FaissVectors.reconstruct

    def counted(self: FaissVectors, ids: np.ndarray) -> np.ndarray:
        reads.append(len(ids))
        return original(self, ids)

    monkeypatch.setattr(FaissVectors, "reconstruct", counted)
    return reads


def test_a_search_reads_only_the_embeddings_its_rank_vectors_need(
    small_index: tuple[SearchIndex, np.ndarray, torch.Tensor], monkeypatch: pytest.MonkeyPatch
):
    index, docs, anchors = small_index
    query = torch.from_numpy(docs[10])
    reads = count_embedding_reads(monkeypatch)
    hits = index.search(query, anchors, top_k=10, candidates=100, lambda_inf=LAMBDA)
    assert_valid_top_k(
        hits, brute_force_eq7(query, torch.from_numpy(docs), anchors), np.arange(1000), 10
    )
    assert 10 <= sum(reads) < 100


def test_a_write_before_an_embedding_is_read_is_searched_again(
    small_index: tuple[SearchIndex, np.ndarray, torch.Tensor], monkeypatch: pytest.MonkeyPatch
):
    index, docs, anchors = small_index
    query = torch.from_numpy(docs[10])
    args = {"top_k": 10, "candidates": 100, "lambda_inf": LAMBDA}
    best = int(index.search(query, anchors, **args).ids[0])
    rows = Candidates.rows

    def remove_the_best_first(
        self: Candidates, positions: np.ndarray, device: torch.device
    ) -> torch.Tensor:
        index.remove([best])  # after faiss found the candidates, before their embeddings
        return rows(self, positions, device)

    monkeypatch.setattr(Candidates, "rows", remove_the_best_first)
    after = index.search(query, anchors, **args)
    monkeypatch.undo()
    assert best not in after.ids.tolist()
    again = index.search(query, anchors, **args)
    np.testing.assert_array_equal(after.ids, again.ids)
    np.testing.assert_allclose(after.scores, again.scores, atol=1e-6)
