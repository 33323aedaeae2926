"""The rank store's fill order: neighbours side by side (models/locality.py)."""

import faiss
import numpy as np
import pytest
import torch

from models import locality
from models.index import IndexConfig, SearchIndex
from models.rank_store import RankStore

DIM = 32
N = 8 * locality.DOCUMENTS_PER_CELL  # 8 cells
PAGE = 200  # positions per page: 2 MB of 10 KB rows
NEIGHBOURS = 50  # what a search reads the rows of (about: 100 candidates)


def interleaved_clusters(n: int, seed: int = 0) -> np.ndarray:
    """(n, DIM) unit vectors in 32 clusters, document i in cluster i % 32, so id order puts
    every document beside ones of other clusters."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((32, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    points = centres[np.arange(n) % 32] + 0.05 * rng.standard_normal((n, DIM))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def pages_read(vectors: np.ndarray, position: np.ndarray) -> float:
    """The median number of pages the NEIGHBOURS nearest documents of a document lie on, when
    document j lies at `position[j]` (n,): what a search's candidates' rows cost to reach."""
    flat = faiss.IndexFlatIP(DIM)
    flat.add(vectors)
    _, nearest = flat.search(vectors[::40], NEIGHBOURS)  # (n / 40, NEIGHBOURS)
    return float(np.median([len(np.unique(position[row] // PAGE)) for row in nearest]))


def test_the_order_puts_neighbours_on_few_pages() -> None:
    vectors = interleaved_clusters(N)
    order = locality.neighbour_order(N, lambda positions: vectors[positions])
    assert np.array_equal(np.sort(order), np.arange(N))
    position = np.empty(N, dtype=np.int64)
    position[order] = np.arange(N)
    # 30 pages in id order, 7 here: a cell's 1000 documents are 5 pages.
    assert pages_read(vectors, position) * 3 <= pages_read(vectors, np.arange(N))
    again = locality.neighbour_order(N, lambda positions: vectors[positions])
    assert np.array_equal(order, again)  # seeded: a restart fills the same order


def test_vectors_are_read_a_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locality, "_CHUNK", 500)
    n = 3 * locality.DOCUMENTS_PER_CELL
    vectors = interleaved_clusters(n)
    calls: list[np.ndarray] = []

    def read(positions: np.ndarray) -> np.ndarray:
        calls.append(positions)
        return vectors[positions]

    order = locality.neighbour_order(n, read)
    assert np.array_equal(np.sort(order), np.arange(n))
    sample, chunks = calls[0], calls[1:]
    assert len(sample) == 3 * locality._SAMPLE_PER_CELL
    assert np.array_equal(np.concatenate(chunks), np.arange(n))
    assert max(len(chunk) for chunk in chunks) == 500


def test_too_few_documents_for_two_cells_keep_their_order() -> None:
    n = 2 * locality.DOCUMENTS_PER_CELL - 1
    vectors = interleaved_clusters(n)
    order = locality.neighbour_order(n, lambda positions: vectors[positions])
    assert np.array_equal(order, np.arange(n))


def test_a_backfill_in_neighbour_order_puts_neighbours_rows_on_few_pages() -> None:
    vectors = interleaved_clusters(N, seed=1)
    ids = np.arange(N) * 3 + 7  # ids are not positions
    index = SearchIndex(DIM, IndexConfig(use_gpu=False))
    index.upsert(ids, vectors)
    anchors = torch.from_numpy(vectors[:: N // 64][:64].copy())  # (64, DIM)
    store = RankStore(anchors, "anchors", 8, budget_bytes=2**24)
    missing = index.attach_rank_store(store)
    removed = ids[5]
    index.remove([removed])  # between attaching and ordering: placed anywhere, then skipped
    order = index.neighbour_order(missing)
    assert np.array_equal(np.sort(order), np.sort(missing))
    assert index.backfill_ranks(store, order) == N - 1
    assert removed not in store
    rows = store._rows.rows(ids)  # (N,) where each document's codes lie, -1: none
    rows[rows < 0] = N  # a page of its own
    assert pages_read(vectors, rows) * 3 <= pages_read(vectors, np.arange(N))
