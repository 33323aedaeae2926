"""Search latency: cosine-only vs Eq. 7 exact, with and without rank codes, vs approximate.

All in one run, on this machine, for each N (default 10k, 100k, 1M documents) and each index
kind: p50/p99 per query of
- cosine: the faiss search alone (top_k by inner product), the baseline of every ratio;
- Eq. 7 exact: without a rank store (RANKSERVE_PRECOMPUTED_RANKS=off), faiss proposes 100
  candidates whose rank vectors are computed at query time (models/ordinal_ranks.py) and
  Eq. 7 keeps top_k;
- Eq. 7 exact + codes: the same hits and scores, with a RankStore (RANKSERVE_PRECOMPUTED_RANKS,
  --bits) ruling out the candidates whose codes show they cannot reach the top_k, so only the
  others get rank vectors (RANKSERVE_PRECOMPUTED_RANKS_EXACT; 8-bit codes are what the served
  default, "auto", keeps past about 50k documents at M = 10k in its 1 GB);
  with --bits 16, whole ranks, the candidates with codes are scored from them instead, exactly;
- Eq. 7 precomputed: the same candidates scored from the store's codes (..._EXACT=false), with
  its top-10 overlap against the exact path.
The four are timed query by query in turn, so a change of machine load hits them alike, each
query starting with the next path, so no path is always the first to touch a query's candidates
(their vectors and store rows) and pay for bringing them into the cache. The two paths that
read the store are timed only on the queries where each reads the candidates' rows first (half
the queries each), as a new query finds them: on the 2-core VMs of docs/benchmarks.md, 100 rows
of a store not read for half a minute or more took 0.5-4.4 ms, the same rows read again 0.1-0.4.
The store is filled as a replica fills it, neighbours' rows side by side (models/locality.py).
Each row is printed as soon as it is measured. Memory: the RSS each index added and the store's
size; nothing is allocated past --max-memory-mb (default 80 % of what is available at start):
a size that does not fit is skipped, and a store that does not fit holds only the rows the
benchmark queries need (said in its row).
Embeddings are synthetic at every N (Gaussian clusters on the unit sphere, 384 dimensions,
anchors from the same clusters). The exact path ranks only the candidates whose score bound can
still reach the top_k (models/rescoring.py), so its cost also depends on how spread the
candidates' cosines are: in these clusters, at N = 100k, a query's top 100 span about 0.15.
Encoding the query is not included (see bench.scoring).

    python -m bench.search [--sizes 10000 100000 1000000] [--queries 200] [--anchors 10000]
                           [--nprobe 32] [--bits 8] [--threads T] [--max-memory-mb MB]
                           [--anchor-dtype float32|bfloat16|int8] [--keep-warm-s S]
"""

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from bench.memory import MB, Budget, exact_rss_accounting, rss_bytes, settle
from bench.timing import percentile, say
from core.settings import Settings
from models.anchor_formats import FORMATS, hold
from models.index import IndexConfig, SearchIndex
from models.locality import neighbour_order
from models.ordinal_ranks import method
from models.rank_store import RankStore
from models.ranking import warm_up

DIM = 384
CLUSTERS = 1000
TOP_K = 10
CANDIDATES = 100
LAMBDA = 0.1
KEY = "bench-anchors"
# The paths that read the rank store's rows; each is timed only where it reads them first.
_STORE_PATHS = ("Eq. 7 exact + codes", "Eq. 7 precomputed")
_CHUNK = 100_000
_RANK_CHUNK = 1024
COLUMNS = (
    "N", "index", "path", "p50 ms", "p99 ms", "p50 / cosine", "p99 / cosine",
    "top-10 vs exact", "recall@10 vs flat", "MB per 1M docs", "build s per 1M",
)  # fmt: skip


def row(*cells: object) -> None:
    say("| " + " | ".join(str(cell) for cell in cells) + " |")


def clustered_unit_vectors(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    """(n, DIM) float32 unit vectors around random centres, generated in chunks (low peak RSS)."""
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        points = centres[rng.integers(0, len(centres), stop - start)]
        points += 0.06 * rng.standard_normal((stop - start, DIM), dtype=np.float32)
        out[start:stop] = points / np.linalg.norm(points, axis=1, keepdims=True)
    return out


def build(docs: np.ndarray, config: IndexConfig) -> tuple[SearchIndex, int, float]:
    """The index, the RSS it added, and its build time."""
    settle()
    with exact_rss_accounting():
        before, start = rss_bytes(), time.perf_counter()
        index = SearchIndex(DIM, config)
        for offset in range(0, len(docs), _CHUNK):
            chunk = docs[offset : offset + _CHUNK]
            index.upsert(np.arange(offset, offset + len(chunk)), chunk)
        return index, rss_bytes() - before, time.perf_counter() - start


def fill(store: RankStore, docs: np.ndarray, ids: np.ndarray) -> float:
    """Store the codes of documents `ids` in the order a replica's backfill writes them,
    neighbours side by side (models/locality.py); returns the seconds it took, ordering
    included."""
    start = time.perf_counter()
    ids = ids[neighbour_order(len(ids), lambda positions: docs[ids[positions]])]
    for offset in range(0, len(ids), _RANK_CHUNK):
        chunk = ids[offset : offset + _RANK_CHUNK]
        store.put(chunk, store.encode_embeddings(docs[chunk]))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--anchors", type=int, default=10_000)
    parser.add_argument("--nprobe", type=int, default=32)
    parser.add_argument("--bits", type=int, choices=(16, 8, 4), default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch threads; default: own")
    parser.add_argument(
        "--anchor-dtype", choices=FORMATS,
        default=Settings.model_fields["anchor_dtype"].default,
        help="how the anchor matrix is held (RANKSERVE_ANCHOR_DTYPE; default: its default)",
    )  # fmt: skip
    parser.add_argument(
        "--keep-warm-s", type=float,
        default=Settings.model_fields["precomputed_ranks_keep_warm_s"].default,
        help="how often the store's pages are read (RANKSERVE_PRECOMPUTED_RANKS_KEEP_WARM_S)",
    )  # fmt: skip
    parser.add_argument("--max-memory-mb", type=float, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    budget = Budget.from_option(args.max_memory_mb)
    warm_up()
    say(
        f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads, rank kernel: {method()}, "
        f"memory budget {budget.max_mb:,.0f} MB"
    )
    say(
        f"ms per query, {args.queries} queries ({args.queries - args.queries // 2} and "
        f"{args.queries // 2} for the store paths: where each reads the rows first), "
        f"top_k={TOP_K}, M={args.anchors:,} anchors, "
        f"{CANDIDATES} candidates for Eq. 7, precomputed ranks at {args.bits} bits, "
        f"anchors in {args.anchor_dtype}, store pages read every {args.keep_warm_s} s (0: never)"
    )
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((CLUSTERS, DIM), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    anchors = torch.from_numpy(clustered_unit_vectors(args.anchors, rng, centres))  # (m, dim)
    anchors = hold(anchors, args.anchor_dtype)
    queries = clustered_unit_vectors(args.queries, rng, centres)  # (q, dim)
    row(*COLUMNS)
    row(*["---"] * len(COLUMNS))
    for n in args.sizes:
        # The documents, one index at a time (vectors plus ids and maps), and a margin.
        needed = n * DIM * 4 * 2.2 / MB + 256
        if not budget.allows(needed):
            say(f"skipped N={n:,}: needs about {needed:,.0f} MB, "
                f"{budget.headroom_mb():,.0f} MB left in the budget")  # fmt: skip
            continue
        docs = clustered_unit_vectors(n, rng, centres)
        measure_size(n, docs, anchors, queries, args, budget)
        del docs
        settle()
    say(f"load average at end: {os.getloadavg()}")


def measure_size(
    n: int,
    docs: np.ndarray,
    anchors: torch.Tensor,
    queries: np.ndarray,
    args: argparse.Namespace,
    budget: Budget,
) -> None:
    # faiss guidance: about 4 sqrt(N) lists, and at least 39 training vectors per list.
    nlist = max(16, min(1024, int(4 * np.sqrt(n)), n // 39) // 16 * 16)
    store = RankStore(anchors, KEY, args.bits, budget_bytes=2**62, keep_warm_s=args.keep_warm_s)
    store_mb = n * store.codec.row_bytes / MB
    # The whole store beside one index (vectors, ids, maps) and a margin, or only query rows.
    full_store = budget.allows(store_mb + n * DIM * 4 * 1.2 / MB + 256)
    store_s = fill(store, docs, np.arange(n)) if full_store else None
    flat_top: list[set[int]] = []
    configs = (IndexConfig(kind="flat"), IndexConfig(kind="ivf", nlist=nlist, nprobe=args.nprobe))
    for config in configs:
        index, added, build_s = build(docs, config)
        assert index.kind == config.kind, "the IVF did not train"
        label = "flat" if config.kind == "flat" else f"ivf{nlist}, nprobe {args.nprobe}"
        if store_s is None:
            wanted = np.unique([i for q in queries for i in index.candidates(q, CANDIDATES)[0]])
            fill(store, docs, np.array([i for i in wanted.tolist() if i not in store], np.int64))
        index.attach_rank_store(store)
        samples, tops = measure_paths(index, anchors, queries)
        exact_top = tops["Eq. 7 exact"]
        if config.kind == "flat":
            flat_top, recall = exact_top, "1 (reference)"
        else:
            recall = f"{overlap(exact_top, flat_top):.3f}"
        base50, base99 = percentile(samples["cosine"], 50), percentile(samples["cosine"], 99)
        for name, times in samples.items():
            p50, p99 = percentile(times, 50), percentile(times, 99)
            cells = {
                "cosine": ("", "", f"{added / n * 1e6 / MB:,.0f}", f"{build_s / n * 1e6:.1f}"),
                "Eq. 7 exact": ("1 (reference)", recall, "", ""),
                "Eq. 7 exact + codes": (f"{overlap(tops[name], exact_top):.3f}", "", "", ""),
                "Eq. 7 precomputed": (
                    f"{overlap(tops[name], exact_top):.3f}",
                    "",
                    f"+{store_mb / n * 1e6:,.0f}" + ("" if full_store else " (query rows only)"),
                    f"{store_s / n * 1e6:.1f}" if store_s is not None else "n/a",
                ),
            }[name]
            ratios = (f"{p50 / base50:.2f}x", f"{p99 / base99:.2f}x")
            row(f"{n:,}", label, name, f"{p50:.2f}", f"{p99:.2f}", *ratios, *cells)
        del index
        settle()
    store.close()


def measure_paths(
    index: SearchIndex, anchors: torch.Tensor, queries: np.ndarray
) -> tuple[dict[str, list[float]], dict[str, list[set[int]]]]:
    """Milliseconds per query and top-10 ids of each path, the paths timed in turn per query."""

    def cosine(q: np.ndarray) -> np.ndarray:
        return index.candidates(q, TOP_K)[0]

    def eq7(q: np.ndarray, key: str | None, exact: bool = True) -> np.ndarray:
        query = torch.from_numpy(q)
        return index.search(
            query,
            anchors,
            top_k=TOP_K,
            candidates=CANDIDATES,
            lambda_inf=LAMBDA,
            anchors_key=key,
            exact=exact,
        ).ids

    paths: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "cosine": cosine,
        "Eq. 7 exact": lambda q: eq7(q, None),
        "Eq. 7 exact + codes": lambda q: eq7(q, KEY),
        "Eq. 7 precomputed": lambda q: eq7(q, KEY, exact=False),
    }
    for fn in paths.values():
        fn(queries[0])  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in paths}
    tops: dict[str, list[set[int]]] = {name: [] for name in paths}
    names = list(paths)
    for i, q in enumerate(queries):
        # In turn, so a change of load hits the paths alike, each query starting one path later:
        # whichever path first reads a query's candidates pays for bringing them into the cache.
        order = names[i % len(names) :] + names[: i % len(names)]
        if i // len(names) % 2:  # every other round the two store paths trade places
            a, b = order.index(_STORE_PATHS[0]), order.index(_STORE_PATHS[1])
            order[a], order[b] = order[b], order[a]
        first_store_path = min(_STORE_PATHS, key=order.index)
        for name in order:
            fn = paths[name]
            start = time.perf_counter()
            ids = fn(q)
            elapsed = (time.perf_counter() - start) * 1e3
            if name not in _STORE_PATHS or name == first_store_path:
                samples[name].append(elapsed)
            tops[name].append(set(ids.tolist()))
    return samples, tops


def overlap(found: list[set[int]], reference: list[set[int]]) -> float:
    return float(np.mean([len(a & b) / TOP_K for a, b in zip(found, reference, strict=True)]))


if __name__ == "__main__":
    main()
