"""An order of documents that puts neighbours side by side: the order the rank store's rows are
filled in (models/rank_store.py).

A search reads the rank codes of its candidates, which lie near the query and so near each
other. Filled in id order, their rows lie anywhere in the store, each in its own 2 MB page
(100 candidates of a 1M-document store: 94-100 pages). Some hosts make a page the guest has not
touched for a few minutes slow to come back, per 2 MB page rather than per row: on a 2-core
Firecracker VM (AMD EPYC Zen 4), after 240 s idle, reading 100 random 10 KB rows of an 8 GB
store took 6.05 ms at the median, one byte in each of 100 such pages 5.46 ms, 100 rows side by
side (one page) 0.43 ms, and any of them again 0.39 ms (docs/benchmarks.md). Grouping the
documents by k-means cell before the store is filled put a query's 100 candidates in 3-12
pages (median 6, N = 500k clustered synthetic embeddings), and `bench.search` at 1M flat went
from 1.08-1.10x cosine to 1.05-1.06x for an exact search with the codes.

The cells cost little beside the rank vectors they order: k-means (faiss) on a sample of 64
documents per cell, then one product per document with the centroids; at 1M documents and
1024 cells the order took 12.6-12.7 s on one core (a script, load 0.8-0.9), and
`bench.search`'s store 199-209 s to fill with it, 184-190 s without. Fewer than two cells'
worth of documents are left in the order given, as are those within a cell.
"""

from collections.abc import Callable

import faiss
import numpy as np

from models.faiss_gpu import one_faiss_thread

DOCUMENTS_PER_CELL = 1000  # 10 MB of 8-bit codes at M = 10k, 5 pages; candidates span a few cells
MAX_CELLS = 1024  # each document meets every centroid: at 1M documents 13 s on one core
_SAMPLE_PER_CELL = 64  # not faiss's 256: a quarter of the training, and rough cells will do
# Documents read and assigned at a time: no copy of every embedding is held, and SearchIndex
# holds its lock while it copies a chunk out (at 300k documents 2.4-3.0 ms for 8192, flat or
# IVF, against 23-36 ms for 65,536: a search arriving meanwhile waits that long).
_CHUNK = 8192


def cell_count(documents: int) -> int:
    return min(MAX_CELLS, documents // DOCUMENTS_PER_CELL)


def neighbour_order(
    count: int, vectors: Callable[[np.ndarray], np.ndarray], seed: int = 0
) -> np.ndarray:
    """A permutation (count,) of 0..count-1 that groups documents by k-means cell.

    `vectors(positions)` gives the unit embeddings (p, dim) float32 of sorted positions (p,);
    it is called on a sample, then on consecutive chunks. One OpenMP thread: this runs in the
    background beside requests.
    """
    cells = cell_count(count)
    if cells < 2:
        return np.arange(count)
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(count, min(count, _SAMPLE_PER_CELL * cells), replace=False))
    training = np.ascontiguousarray(vectors(sample), dtype=np.float32)  # (s, dim)
    kmeans = faiss.Kmeans(
        training.shape[1], cells, niter=10, spherical=True, seed=seed,
        max_points_per_centroid=_SAMPLE_PER_CELL,
    )  # fmt: skip
    assigned = np.empty(count, dtype=np.int64)  # (count,) each document's cell
    with one_faiss_thread():
        kmeans.train(training)
        for start in range(0, count, _CHUNK):
            positions = np.arange(start, min(count, start + _CHUNK))
            chunk = np.ascontiguousarray(vectors(positions), dtype=np.float32)  # (c, dim)
            assigned[positions] = kmeans.index.search(chunk, 1)[1][:, 0]
    return np.argsort(assigned, kind="stable")
