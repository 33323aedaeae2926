"""Scale limits of one index per replica: memory, build time and the model-swap peak against N.

For each N and index kind, builds what a replica holds for its corpus (service/corpus/
index_state.py): a SearchIndex filled in pages of 1,000 with two metadata fields per document
(a year and one of 50 tags, so the filters' posting lists exist), and the number -> id map with
32-character ids. It reports
- MB: the RSS those added, per replica, in steady state;
- build s: the time to fill them (embeddings given, so encoding is not included);
- swap peak MB: the RSS with a second, complete index built beside the first, as during a
  model swap, when the new model's index is built while the old one still serves;
then extrapolates linearly from the largest N measured to the sizes of --extrapolate, and says
how many documents fit a node of each --node-gb once the fixed cost of a replica (--fixed-mb:
model, anchors, interpreter; measure it with `ps -o rss` on a ready replica) and the swap peak
are paid. Every row is printed as soon as it is measured; nothing is allocated past
--max-memory-mb (default 80 % of what is available at start).

    python -m bench.scale [--sizes 10000 100000 1000000] [--kinds flat ivf]
                          [--extrapolate 10000000 20000000] [--node-gb 64 128]
                          [--fixed-mb 1500] [--max-memory-mb MB]
"""

import argparse
import os
import time

import numpy as np

from bench.memory import MB, Budget, exact_rss_accounting, rss_bytes, settle
from bench.timing import say
from models.index import IndexConfig, IndexKind, SearchIndex

DIM = 384
PAGE = 1000  # service/corpus/index_state.py scans the store in pages of this size
TAGS = [f"tag-{i}" for i in range(50)]
# Headroom a node keeps for the kubelet, the OS and page cache: the docs' memory requests assume
# a replica may use this share of a node at most.
USABLE_SHARE = 0.8


def row(*cells: object) -> None:
    say("| " + " | ".join(str(cell) for cell in cells) + " |")


def fill(n: int, kind: IndexKind, seed: int) -> tuple[SearchIndex, dict[int, str], float]:
    """A replica's index and id map of n synthetic documents, and the seconds it took."""
    rng = np.random.default_rng(seed)
    index = SearchIndex(DIM, IndexConfig(kind=kind, use_gpu=False))
    ids: dict[int, str] = {}
    start = time.perf_counter()
    for offset in range(0, n, PAGE):
        count = min(PAGE, n - offset)
        vectors = rng.standard_normal((count, DIM), dtype=np.float32)  # (count, DIM)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        numbers = list(range(offset, offset + count))
        years = rng.integers(1990, 2026, count).tolist()
        tags = rng.integers(0, len(TAGS), count).tolist()
        metadata = [{"year": y, "tag": TAGS[t]} for y, t in zip(years, tags, strict=True)]
        index.upsert(numbers, vectors, metadata)
        ids.update((number, f"{number:032x}") for number in numbers)
    return index, ids, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--kinds", nargs="+", choices=("flat", "ivf"), default=["flat", "ivf"])
    parser.add_argument("--extrapolate", type=int, nargs="+", default=[10_000_000, 20_000_000])
    parser.add_argument("--node-gb", type=float, nargs="+", default=[64.0, 128.0])
    parser.add_argument("--fixed-mb", type=float, default=1500.0)
    parser.add_argument("--max-memory-mb", type=float, default=None)
    args = parser.parse_args()
    budget = Budget.from_option(args.max_memory_mb)
    say(
        f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs, "
        f"memory budget {budget.max_mb:,.0f} MB, dim {DIM}, pages of {PAGE}"
    )
    row("N", "index", "MB per replica", "build s", "swap peak MB", "peak / steady")
    row(*["---"] * 6)
    largest: dict[str, tuple[int, float, float, float]] = {}
    for kind in args.kinds:
        for n in args.sizes:
            # Two indexes (vectors, faiss' copy while it trains, ids, postings) and a margin.
            needed = 2 * n * (DIM * 4 * 1.6 + 600) / MB + 256
            if not budget.allows(needed):
                say(f"skipped {kind} N={n:,}: needs about {needed:,.0f} MB, "
                    f"{budget.headroom_mb():,.0f} MB left in the budget")  # fmt: skip
                continue
            held, seconds, peak = measure_one(n, kind)
            row(f"{n:,}", kind, f"{held:,.0f}", f"{seconds:.1f}", f"{peak:,.0f}",
                f"{peak / held:.2f}")  # fmt: skip
            largest[kind] = (n, held, seconds, peak)
    say("")
    say(
        "extrapolated linearly from the largest N measured; fits: a replica's fixed "
        f"{args.fixed_mb:,.0f} MB plus the swap peak within {USABLE_SHARE:.0%} of the node"
    )
    row("N", "index", "MB per replica", "build s", "swap peak MB",
        *(f"fits {gb:g} GB" for gb in args.node_gb))  # fmt: skip
    row(*["---"] * (5 + len(args.node_gb)))
    for kind, (n0, held, seconds, peak) in largest.items():
        for n in args.extrapolate:
            scale = n / n0
            fits = [
                "yes" if args.fixed_mb + peak * scale <= USABLE_SHARE * gb * 1024 else "no"
                for gb in args.node_gb
            ]
            row(f"{n:,}", kind, f"{held * scale:,.0f}", f"{seconds * scale:,.0f}",
                f"{peak * scale:,.0f}", *fits)  # fmt: skip
        for gb in args.node_gb:
            most = (USABLE_SHARE * gb * 1024 - args.fixed_mb) / (peak / n0)
            say(f"{kind}: at most about {most / 1e6:,.1f}M documents per replica on a "
                f"{gb:g} GB node")  # fmt: skip
    say(f"load average at end: {os.getloadavg()}")


def measure_one(n: int, kind: IndexKind) -> tuple[float, float, float]:
    """(MB held, build seconds, swap peak MB) for one N and kind."""
    settle()
    with exact_rss_accounting():
        before = rss_bytes()
        first, first_ids, seconds = fill(n, kind, seed=0)
        held = (rss_bytes() - before) / MB
        second, second_ids, _ = fill(n, kind, seed=1)  # the new model's, built while first serves
        peak = (rss_bytes() - before) / MB
        del first, first_ids, second, second_ids
    settle()
    return held, seconds, peak


if __name__ == "__main__":
    main()
