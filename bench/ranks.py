"""Ordinal ranks of cosine rows: the exact methods (and one approximation) side by side.

The sort is what Eq. 7 adds to cosine on CPU. Each method turns a (rows, M) float32 matrix of
cosines into 0-based ordinal ranks, the inverse permutation included; rows are printed as
soon as they are measured, with the ratio to np.argsort(kind="stable") on the same matrix in
the same run. Shapes: 101 x 10k is one search (query + 100 candidates) at the default M,
1 x 10k one sentence, 128 x 100k the 64 pairs of bench.scoring at M = 100k. The matmul that
produces the cosines is timed beside them for scale: torch, numpy, and the batch-invariant
kernel that Eq. 7 uses on CPU (models/cpu_products.py).

    python -m bench.ranks [--repeat 15] [--shapes 101x10000 1x10000 12x10000 128x100000]
"""

import argparse
import os
import threading
from collections.abc import Callable

import numpy as np
import torch
from scipy.stats import rankdata

from bench.timing import median_seconds
from models.cpu_products import anchor_cosines
from models.ordinal_ranks import method, numpy_ranks, ordinal_ranks, ranks_into

DIM = 384


def _scatter(order: np.ndarray) -> np.ndarray:
    ranks = np.empty(order.shape, dtype=np.float32)  # (rows, m)
    np.put_along_axis(ranks, order, np.arange(order.shape[1], dtype=np.float32)[None], axis=1)
    return ranks


def argsort_stable(values: np.ndarray) -> np.ndarray:
    return _scatter(np.argsort(values, axis=1, kind="stable"))


def argsort_default(values: np.ndarray) -> np.ndarray:
    return numpy_ranks(values)


def torch_argsort(values: np.ndarray) -> np.ndarray:
    tensor = torch.from_numpy(values)
    order = torch.argsort(tensor, dim=1)  # (rows, m)
    ranks = torch.empty_like(tensor)
    ranks.scatter_(1, order, torch.arange(values.shape[1], dtype=torch.float32).expand_as(tensor))
    return ranks.numpy()


def uint16_radix(values: np.ndarray) -> np.ndarray:
    """Approximate: cosines in [-1, 1] quantised to 16 bits, then numpy's radix sort."""
    keys = np.round((values + 1.0) * 32767.5).astype(np.uint16)  # (rows, m)
    return _scatter(np.argsort(keys, axis=1, kind="stable"))


def radix_two_threads(values: np.ndarray) -> np.ndarray:
    """The numba kernel on two halves of the rows at once (it releases the GIL)."""
    out = np.empty_like(values)
    half = len(values) // 2
    worker = threading.Thread(target=ranks_into, args=(values[:half], out[:half]))
    worker.start()
    ranks_into(values[half:], out[half:])
    worker.join()
    return out


def measure_shape(
    rng: np.random.Generator,
    rows: int,
    m: int,
    methods: list[tuple[str, Callable[[np.ndarray], np.ndarray], bool]],
    repeat: int,
) -> None:
    embeddings = rng.standard_normal((rows, DIM), dtype=np.float32)
    anchors = rng.standard_normal((m, DIM), dtype=np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    anchors /= np.linalg.norm(anchors, axis=1, keepdims=True)
    cosines = np.ascontiguousarray(embeddings @ anchors.T)  # (rows, m)
    reference = rankdata(cosines, axis=1, method="ordinal") - 1  # (rows, m)
    shape = f"{rows} x {m:,}"
    e_t, a_t = torch.from_numpy(embeddings), torch.from_numpy(anchors)
    for label, product in (
        ("matmul, torch fp32", lambda: e_t @ a_t.T),
        ("matmul, numpy fp32", lambda: embeddings @ anchors.T),
        ("matmul, cpu_products kernel (1 thread)", lambda: anchor_cosines(e_t, a_t)),
    ):
        seconds = median_seconds(product, repeat=repeat)
        print(f"| {shape} | {label} | {seconds * 1e3:.2f} | | |", flush=True)
    baseline = 0.0
    for label, fn, exact in methods:
        seconds = median_seconds(lambda fn=fn: fn(cosines), repeat=repeat)
        baseline = baseline or seconds
        ranks = fn(cosines)
        if exact:
            verdict = "yes" if np.array_equal(ranks, reference) else _order_verdict(cosines, ranks)
        else:
            verdict = f"no: ranks move by up to {int(np.abs(ranks - reference).max())}"
        print(
            f"| {shape} | {label} | {seconds * 1e3:.2f} | {seconds / baseline:.2f}x | {verdict} |",
            flush=True,
        )


def _order_verdict(cosines: np.ndarray, ranks: np.ndarray) -> str:
    """Whether ranks that differ from scipy's ordinal ones still sort every row correctly."""
    ordered = np.take_along_axis(cosines, np.argsort(ranks, axis=1), axis=1)  # (rows, m)
    valid = bool((np.diff(ordered, axis=1) >= 0).all())
    return "yes, ties in another order" if valid else "NO"


def _shape(text: str) -> tuple[int, int]:
    rows, m = text.lower().split("x")
    return int(rows), int(m)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--shapes",
        type=_shape,
        nargs="+",
        default=[(101, 10_000), (1, 10_000), (12, 10_000), (128, 100_000)],
    )
    args = parser.parse_args()
    print(
        f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads, kernel: {method()}",
        flush=True,
    )
    methods: list[tuple[str, Callable[[np.ndarray], np.ndarray], bool]] = [
        ("np.argsort stable (baseline)", argsort_stable, True),
        ("np.argsort default", argsort_default, True),
        ("torch.argsort", torch_argsort, True),
        ("uint16 quantised + numpy radix", uint16_radix, False),
        (f"{method()}, 1 thread", ordinal_ranks, True),
        (f"{method()}, 2 threads", radix_two_threads, True),
    ]
    rng = np.random.default_rng(0)
    print("| shape | method | ms | vs baseline | exact |", flush=True)
    print("|---|---|---|---|---|", flush=True)
    for rows, m in args.shapes:
        measure_shape(rng, rows, m, methods, args.repeat)
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
