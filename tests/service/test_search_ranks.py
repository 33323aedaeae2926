"""Search with precomputed ranks (RANKSERVE_PRECOMPUTED_RANKS) in the service, the store kept
in step with writes and anchors, and rescoring that does not wait for the encoder thread."""

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from models.anchors import AnchorSet
from models.index import IndexConfig, SearchIndex
from service.corpus.index_state import IndexState
from service.corpus.rank_sync import RankStoreSync, store_bits
from service.engine import Engine
from tests.conftest import served
from tests.polling import wait_until
from tests.service.conftest import Server, make_settings
from tests.service.corpus_helpers import api, corpus_server, served_eq7, sick_sentences
from tests.service.test_search import QUERY, brute_force


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return sick_sentences(60)


@pytest.fixture(scope="module")
def server(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, sentences: list[str]
) -> Iterator[Server]:
    var_dir = tmp_path_factory.mktemp("ranks-var")
    with corpus_server(engine, var_dir, precomputed_ranks="8bit") as running:
        documents = [{"id": f"s{i:02d}", "text": text} for i, text in enumerate(sentences)]
        with api(running) as client:
            assert client.post("/documents", json={"documents": documents}).status_code == 200
        yield running


def rank_store_size(server: Server) -> int:
    state = server.app.state.corpus.state
    store = state.index.rank_store if state is not None else None
    return -1 if store is None else len(store)


def test_search_from_precomputed_ranks_matches_brute_force(
    server: Server, engine: Engine, sentences: list[str]
) -> None:
    wait_until(lambda: rank_store_size(server) == len(sentences))
    with api(server) as client:
        body = client.post(
            "/search", json={"query": QUERY, "top_k": 10, "candidates": 100, "lambda": 1.0}
        ).json()
    reference = served_eq7(server, served(engine.anchors), len(sentences), QUERY, 1.0)
    scores = np.array([hit["score"] for hit in body["hits"]])
    # lambda = 1: the scores are the rank similarities alone; the codes only ruled candidates
    # out (RANKSERVE_PRECOMPUTED_RANKS_EXACT, the default), so they are the exact ones.
    np.testing.assert_allclose(scores, np.sort(reference)[::-1][:10], atol=1e-5)


def test_approximate_search_scores_from_the_codes(
    server: Server, engine: Engine, sentences: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wait_until(lambda: rank_store_size(server) == len(sentences))
    # What RANKSERVE_PRECOMPUTED_RANKS_EXACT=false sets, without a second server.
    monkeypatch.setattr(server.app.state.corpus, "exact_ranks", False)
    with api(server) as client:
        body = client.post(
            "/search", json={"query": QUERY, "top_k": 10, "candidates": 100, "lambda": 1.0}
        ).json()
    exact = np.sort(served_eq7(server, served(engine.anchors), len(sentences), QUERY, 1.0))[::-1]
    errors = np.abs(np.array([hit["score"] for hit in body["hits"]]) - exact[:10])
    # 8-bit codes at M = 512: off by the rounding noise, not exact.
    assert 0 < errors.max() <= 2e-3


def test_writes_keep_the_rank_store_in_step(server: Server, sentences: list[str]) -> None:
    wait_until(lambda: rank_store_size(server) == len(sentences))
    with api(server) as client:
        added = {"id": "extra", "text": "A cat sleeps on the warm windowsill"}
        assert client.post("/documents", json={"documents": [added]}).status_code == 200
        assert rank_store_size(server) == len(sentences) + 1
        assert client.delete("/documents/extra").status_code == 200
        assert rank_store_size(server) == len(sentences)


def test_rescoring_runs_while_the_encoder_thread_is_busy(server: Server, engine: Engine) -> None:
    corpus = server.app.state.corpus
    state = corpus.ready_state(engine)
    query = engine.encoder.encode([QUERY])[0]  # (dim,)
    release = threading.Event()

    async def search_while_encoder_blocked() -> int:
        batcher = server.services.batcher
        blocker = asyncio.ensure_future(batcher.run(release.wait, 30))
        result = await corpus.search(
            engine, state, query, top_k=5, candidates=20, lambda_inf=0.1, where=None
        )
        assert not blocker.done()  # the encoder thread was busy the whole time
        release.set()
        await blocker
        return len(result.hits)

    future = asyncio.run_coroutine_threadsafe(search_while_encoder_blocked(), server.loop)
    try:
        assert future.result(timeout=20) == 5
    finally:
        release.set()


def engine_with(engine: Engine, anchors: AnchorSet) -> Engine:
    return dataclasses.replace(engine, anchors=anchors)


async def test_a_store_follows_the_anchors_and_the_encoder(
    engine: Engine, sentences: list[str], tmp_path: Path
) -> None:
    sync = RankStoreSync(make_settings(tmp_path, precomputed_ranks="4bit"))
    index = SearchIndex(engine.dim, IndexConfig(use_gpu=False))
    index.upsert(np.arange(len(sentences)), engine.encoder.encode(sentences))
    state = IndexState(index, engine.encoder.checksum, {})
    await sync.ensure(engine, state)
    first = index.rank_store
    assert first is not None and first.anchors_key == engine.anchors.key
    await sync.ensure(engine, state)
    assert index.rank_store is first  # same anchors: kept
    half = engine.anchors.embeddings[:256]  # other anchors, as a new document sample would be
    others = AnchorSet(
        engine.anchors.texts[:256], half, "other-texts", engine.anchors.encoder_checksum
    )
    await sync.ensure(engine_with(engine, others), state)
    second = index.rank_store
    assert second is not first and second is not None and second.anchors_key == others.key
    assert second.codec.m == 256
    for _ in range(200):  # the backfill runs in the background
        if len(second) == len(sentences):
            break
        await asyncio.sleep(0.05)
    assert len(second) == len(sentences)
    # A new encoder is the follower's to rebuild for; no store for the old index meanwhile.
    stale = IndexState(index, "another-encoder", {})
    await sync.ensure(engine, stale)
    assert index.rank_store is second
    sync.stop()
    plain = SearchIndex(engine.dim, IndexConfig(use_gpu=False))
    off = RankStoreSync(make_settings(tmp_path, precomputed_ranks="off"))
    await off.ensure(engine, IndexState(plain, engine.encoder.checksum, {}))
    assert plain.rank_store is None


async def test_a_store_fills_without_the_neighbour_order(
    engine: Engine, sentences: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The order only places rows; if it fails, the store must still fill (in id order).
    def broken(self: SearchIndex, ids: np.ndarray) -> np.ndarray:
        raise RuntimeError("k-means failed")

    monkeypatch.setattr(SearchIndex, "neighbour_order", broken)
    sync = RankStoreSync(make_settings(tmp_path, precomputed_ranks="8bit"))
    index = SearchIndex(engine.dim, IndexConfig(use_gpu=False))
    index.upsert(np.arange(len(sentences)), engine.encoder.encode(sentences))
    await sync.ensure(engine, IndexState(index, engine.encoder.checksum, {}))
    store = index.rank_store
    assert store is not None
    for _ in range(200):  # the backfill runs in the background
        if len(store) == len(sentences):
            break
        await asyncio.sleep(0.05)
    assert len(store) == len(sentences)
    sync.stop()


async def test_whole_ranks_score_the_hits_as_brute_force_does(
    engine: Engine, sentences: list[str], tmp_path: Path
) -> None:
    sync = RankStoreSync(make_settings(tmp_path, precomputed_ranks="16bit"))
    anchors = served(engine.anchors)  # as the API holds them, as brute_force takes them
    index = SearchIndex(engine.dim, IndexConfig(use_gpu=False))
    index.upsert(np.arange(len(sentences)), engine.encoder.encode(sentences))
    await sync.ensure(engine_with(engine, anchors), IndexState(index, engine.encoder.checksum, {}))
    store = index.rank_store
    assert store is not None and store.codec.lossless
    await asyncio.to_thread(wait_until, lambda: len(store) == len(sentences))
    query = engine.encoder.encode([QUERY])[0]  # (dim,)
    hits = index.search(
        query, anchors.embeddings, top_k=10, candidates=100, lambda_inf=1.0, anchors_key=anchors.key
    )
    reference = brute_force(engine.encoder, anchors, sentences, QUERY, 1.0)
    np.testing.assert_allclose(hits.scores, np.sort(reference)[::-1][:10], atol=1e-5)
    sync.stop()


@pytest.mark.parametrize(
    ("setting", "documents", "anchors", "bits"),
    [
        ("auto", 52, 10_000, 16),  # 52 x 20,000 bytes fit 1 MiB
        ("auto", 53, 10_000, 8),
        ("auto", 1, 70_001, 8),  # past 65,536 anchors 16-bit codes are buckets too
        ("16bit", 10**6, 10_000, 16),  # an explicit width stands, past the budget as well
        ("4bit", 0, 10_000, 4),
    ],
)
def test_the_code_width_of_a_new_store(
    setting: str, documents: int, anchors: int, bits: int
) -> None:
    assert store_bits(setting, documents, anchors, 2**20) == bits


async def test_auto_keeps_whole_ranks_until_the_documents_outgrow_them(
    engine: Engine, sentences: list[str], tmp_path: Path
) -> None:
    # 1 MiB holds 52 documents' whole ranks at M = 10k, 104 at 8 bits.
    settings = make_settings(tmp_path, precomputed_ranks="auto", precomputed_ranks_budget_mb=1)
    sync = RankStoreSync(settings)
    random = torch.nn.functional.normalize(torch.randn(10_000, engine.dim), dim=1)  # (m, dim)
    texts = [f"anchor {i}" for i in range(10_000)]
    engine = engine_with(engine, AnchorSet(texts, random, "random", engine.encoder.checksum))
    vectors = engine.encoder.encode(sentences)  # (60, dim)
    index = SearchIndex(engine.dim, IndexConfig(use_gpu=False))
    index.upsert(np.arange(40), vectors[:40])
    state = IndexState(index, engine.encoder.checksum, {})
    await sync.ensure(engine, state)
    whole = index.rank_store
    assert whole is not None and whole.codec.bits == 16 and whole.capacity == 52
    index.upsert(np.arange(40, 52), vectors[40:52])
    await sync.ensure(engine, state)
    assert index.rank_store is whole  # still fits
    index.upsert(np.arange(52, 60), vectors[52:])
    await sync.ensure(engine, state)
    narrow = index.rank_store
    assert narrow is not None and narrow.codec.bits == 8
    await asyncio.to_thread(wait_until, lambda: len(narrow) == len(sentences))
    index.remove(np.arange(30))
    await sync.ensure(engine, state)
    assert index.rank_store is narrow  # no way back until the anchors change: no flapping
    sync.stop()
