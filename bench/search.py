"""Search latency and memory: cosine-only vs Eq. 7 rescoring, N = 10k, 100k, 1M documents.

All in one run, on this machine:
- p50/p99 per query of the cosine-only search (faiss top_k) and of the served search (faiss
  proposes 100 candidates, Eq. 7 rescores them with rank vectors computed at query time),
  for the flat index and the IVF option; the IVF's recall@10 against the flat result;
- resident memory per million documents of each index (RSS growth while building it);
- the alternative to query-time rank vectors, measured at N = 10k: precomputed uint16 ranks
  (Eq. 2 before g), gathered for the candidates and normalised (Eq. 3) per query.
Embeddings are synthetic at every N (Gaussian clusters on the unit sphere, 384 dimensions,
the anchors drawn from the same clusters): cost depends on N, M and the dimension, not on the
vectors' content. Encoding the query is not included (see bench.scoring).

    python -m bench.search [--sizes 10000 100000 1000000] [--queries 100] [--anchors 10000]
                           [--threads N]
"""

import argparse
import ctypes
import gc
import os
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from bench.timing import percentile
from models.index import IndexConfig, SearchIndex
from models.ranking import anchor_ranks, normalise_ranks, rank_vectors_chunked
from models.rescoring import SearchHits, eq7_scores

T = TypeVar("T")

DIM = 384
CLUSTERS = 1000
TOP_K = 10
CANDIDATES = 100
LAMBDA = 0.1
_CHUNK = 100_000


def clustered_unit_vectors(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    """(n, DIM) float32 unit vectors around random centres, generated in chunks (low peak RSS)."""
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        points = centres[rng.integers(0, len(centres), stop - start)]
        points += 0.06 * rng.standard_normal((stop - start, DIM), dtype=np.float32)
        out[start:stop] = points / np.linalg.norm(points, axis=1, keepdims=True)
    return out


_LIBC = ctypes.CDLL("libc.so.6")
_M_MMAP_THRESHOLD = -3


def exact_rss_accounting() -> None:
    """Large blocks always get their own mmap: freed memory leaves RSS, RSS deltas are honest.

    glibc otherwise raises its mmap threshold after the first large free and recycles the heap,
    so an index built after another one would appear to cost nothing.
    """
    _LIBC.mallopt(_M_MMAP_THRESHOLD, 1 << 16)


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def latencies_ms(fn: Callable[[np.ndarray], T], queries: np.ndarray) -> tuple[list[float], list[T]]:
    """Milliseconds per call of fn on each query (after one warm-up call), and the results."""
    fn(queries[0])
    samples, results = [], []
    for query in queries:
        start = time.perf_counter()
        results.append(fn(query))
        samples.append((time.perf_counter() - start) * 1e3)
    return samples, results


def build(docs: np.ndarray, config: IndexConfig) -> tuple[SearchIndex, int, float]:
    """The index, the RSS it added, and its build time."""
    gc.collect()
    _LIBC.malloc_trim(0)
    before, start = rss_bytes(), time.perf_counter()
    index = SearchIndex(DIM, config)
    for offset in range(0, len(docs), _CHUNK):
        chunk = docs[offset : offset + _CHUNK]
        index.upsert(np.arange(offset, offset + len(chunk)), chunk)
    return index, rss_bytes() - before, time.perf_counter() - start


def id_map_bytes(n: int) -> int:
    """RSS of the corpus's number -> document id dict (service/corpus) for n documents."""
    gc.collect()
    _LIBC.malloc_trim(0)
    before = rss_bytes()
    ids = {number: f"doc-{number:012d}" for number in range(n)}
    added = rss_bytes() - before
    del ids
    return added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--anchors", type=int, default=10_000)
    parser.add_argument("--nprobe", type=int, default=32)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads; default: torch's own (cores)"
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    exact_rss_accounting()
    console = Console(width=160)
    console.print(f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs")
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((CLUSTERS, DIM), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    anchors = torch.from_numpy(clustered_unit_vectors(args.anchors, rng, centres))  # (m, dim)
    queries = clustered_unit_vectors(args.queries, rng, centres)  # (q, dim)
    latency = Table(
        title=f"ms per query, {args.queries} queries, top_k={TOP_K}, M={args.anchors} anchors, "
        f"{CANDIDATES} candidates for Eq. 7, {torch.get_num_threads()} torch threads"
    )
    for column in (
        "N",
        "index",
        "cosine p50",
        "cosine p99",
        "Eq. 7 p50",
        "Eq. 7 p99",
        "Eq. 7 / cosine (p50)",
        "recall@10 vs flat",
        "MB per 1M docs",
        "build s",
    ):
        latency.add_column(column, justify="right")

    for n in args.sizes:
        docs = clustered_unit_vectors(n, rng, centres)
        # faiss guidance: about 4 sqrt(N) lists, and at least 39 training vectors per list.
        nlist = max(16, min(1024, int(4 * np.sqrt(n)), n // 39) // 16 * 16)
        flat_top: list[set[int]] = []
        for config in (
            IndexConfig(kind="flat"),
            IndexConfig(kind="ivf", nlist=nlist, nprobe=args.nprobe),
        ):
            index, added, build_s = build(docs, config)
            assert index.kind == config.kind, "the IVF did not train"

            def cosine_only(q: np.ndarray, index: SearchIndex = index) -> object:
                return index.candidates(q, TOP_K)

            def served(q: np.ndarray, index: SearchIndex = index) -> SearchHits:
                return index.search(
                    torch.from_numpy(q), anchors, top_k=TOP_K, candidates=CANDIDATES,
                    lambda_inf=LAMBDA,
                )  # fmt: skip

            cosine_ms, _ = latencies_ms(cosine_only, queries)
            eq7_ms, results = latencies_ms(served, queries)
            tops = [set(hits.ids.tolist()) for hits in results]
            if config.kind == "flat":
                flat_top = tops
                recall = "1 (reference)"
            else:
                hits = [len(a & b) / TOP_K for a, b in zip(tops, flat_top, strict=True)]
                recall = f"{np.mean(hits):.3f}"
            label = "flat" if config.kind == "flat" else f"ivf{nlist}, nprobe {args.nprobe}"
            latency.add_row(
                f"{n:,}",
                label,
                f"{percentile(cosine_ms, 50):.2f}",
                f"{percentile(cosine_ms, 99):.2f}",
                f"{percentile(eq7_ms, 50):.2f}",
                f"{percentile(eq7_ms, 99):.2f}",
                f"{percentile(eq7_ms, 50) / percentile(cosine_ms, 50):.1f}x",
                recall,
                f"{added / n * 1e6 / 2**20:,.0f}",
                f"{build_s:.1f}",
            )
            console.print(f"measured N={n:,} {label}")
            del index
            gc.collect()
        if n == min(args.sizes):
            precomputed_table = compare_rank_storage(docs, anchors, queries)
        if n == max(args.sizes):
            id_map_mb = id_map_bytes(n) / n * 1e6 / 2**20
        del docs
        gc.collect()
    console.print(latency)
    console.print(
        f"The service also maps index numbers to document ids: {id_map_mb:,.0f} MB per 1M "
        "documents (dict of int to 16-character str), measured at "
        f"N={max(args.sizes):,}."
    )
    console.print(precomputed_table)
    console.print(f"load average at end: {os.getloadavg()}")


def compare_rank_storage(docs: np.ndarray, anchors: torch.Tensor, queries: np.ndarray) -> Table:
    """Query-time rank vectors for the candidates vs a precomputed uint16 rank matrix."""
    n, m = len(docs), anchors.shape[0]
    docs_t = torch.from_numpy(docs)
    start = time.perf_counter()
    ranks = np.empty((n, m), dtype=np.uint16)  # (n, m); ranks 0..M-1 fit while M <= 65535
    for i in range(0, n, 1024):
        ranks[i : i + 1024] = anchor_ranks(docs_t[i : i + 1024], anchors).numpy()
    precompute_s = time.perf_counter() - start

    def gathered_ranks(ids: np.ndarray) -> torch.Tensor:
        return normalise_ranks(torch.from_numpy(ranks[ids].astype(np.float32)))  # (k, m)

    index = SearchIndex(DIM)
    index.upsert(np.arange(n), docs)

    def query_time(q: np.ndarray) -> object:
        return index.search(
            torch.from_numpy(q), anchors, top_k=TOP_K, candidates=CANDIDATES, lambda_inf=LAMBDA
        )

    def precomputed(q: np.ndarray) -> object:
        ids, _ = index.candidates(q, CANDIDATES)
        query = torch.from_numpy(q)
        z_query = rank_vectors_chunked(query[None], anchors)[0]  # (m,)
        candidates = torch.from_numpy(index.embeddings(ids))  # (k, dim)
        z_docs = gathered_ranks(ids)  # (k, m)
        score = LAMBDA * (z_docs @ z_query) + (1 - LAMBDA) * (candidates @ query)
        return torch.topk(score, TOP_K)

    # Same scores either way (a check, not a timing): the two paths must agree.
    q0 = torch.from_numpy(queries[0])
    ids, _ = index.candidates(queries[0], CANDIDATES)
    z_query = rank_vectors_chunked(q0[None], anchors)[0]
    direct, _, _ = eq7_scores(q0, z_query, torch.from_numpy(index.embeddings(ids)), anchors, LAMBDA)
    gathered = LAMBDA * (gathered_ranks(ids) @ z_query) + (1 - LAMBDA) * (
        torch.from_numpy(index.embeddings(ids)) @ q0
    )
    assert torch.allclose(direct, gathered, atol=1e-5)

    qt, _ = latencies_ms(query_time, queries)
    pre, _ = latencies_ms(precomputed, queries)
    table = Table(
        title=f"Document rank vectors for Eq. 7 at N={n:,}, M={m:,} ({CANDIDATES} candidates)"
    )
    for column in ("rank vectors", "p50 ms", "p99 ms", "extra MB per 1M docs", "build s per 1M"):
        table.add_column(column, justify="right")
    table.add_row(
        "computed at query time (served)",
        f"{percentile(qt, 50):.2f}",
        f"{percentile(qt, 99):.2f}",
        "0",
        "0",
    )
    table.add_row(
        "precomputed uint16",
        f"{percentile(pre, 50):.2f}",
        f"{percentile(pre, 99):.2f}",
        f"{ranks.nbytes / n * 1e6 / 2**20:,.0f}",
        f"{precompute_s / n * 1e6:,.0f}",
    )
    return table


if __name__ == "__main__":
    main()
