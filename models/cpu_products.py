"""Batch-invariant float32 products on CPU: the anchor cosines of rank vectors, and row dots.

Each output element is summed in one fixed order whatever else is in the batch, so a
document's Eq. 7 score never depends on which other candidates were scored with it: a page of
search results is exactly the slice of a longer search. torch's product does not promise that
(on this CPU its last bits change with the number of rows), and one flipped near-tie among 10k
anchor cosines changes a rank vector.

The anchor kernel reads each anchor row once for four at a time and dots them with the input
rows two by two, on one thread with the GIL released, so concurrent requests spread over the
cores. Whether it beats torch's product (two threads) depends on the CPU and the number of rows:
`python -m bench.ranks` prints both, and docs/benchmarks.md gives the figures per CPU. For a
hundred rows torch was faster on every CPU measured: that is what invariance costs. Off the CPU
torch computes them, and for inputs in other dtypes.
"""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from models.numba_jit import compile_kernels
from models.spare_core import split_range


def _cosines_py(
    rows: np.ndarray, anchors: np.ndarray, out: np.ndarray, start: int, stop: int
) -> None:
    """out[:, start:stop] = rows (r, dim) . anchors[start:stop] (stop - start, dim)^T, four
    anchors by two rows per pass. With `start` a multiple of 4 the blocks are those of the
    whole range, so any split at such a point gives the same bits."""
    count, dim = rows.shape
    blocked = stop - (stop - start) % 4
    # The four anchors are copied to one small block first, read in one sequential sweep:
    # dotting them in place, four streams 1.5 KB apart, took 1.6-2x as long for 1-4 rows at
    # M = 100k, where the matrix comes from memory, and as long for 12-100 rows or at M = 10k
    # (AMD EPYC Zen 4, one process alternating the two, load 0.6), with the same bits.
    block = np.empty((4, dim), dtype=np.float32)
    for j in range(start, blocked, 4):
        for r in range(4):
            for k in range(dim):
                block[r, k] = anchors[j + r, k]
        # Rows go by pairs, so each block value loaded feeds two rows: 1.05-1.4x faster than
        # one row at a time from 2 to 128 rows at M = 10k and 100k, 0.87-0.97x for a single
        # row (Intel Xeon, AVX-512, alternating in one process, load 0.7-0.9; code built for
        # AVX2 on it, 1.03-1.21x and 0.84-0.92x). A lone last row is paired with itself: its
        # sums are then those of any row in a pair, which keeps a row's bits independent of
        # its batch. The second copy is not written.
        for i in range(0, count, 2):
            i1 = min(i + 1, count - 1)
            a0 = np.float32(0.0)
            a1 = np.float32(0.0)
            a2 = np.float32(0.0)
            a3 = np.float32(0.0)
            b0 = np.float32(0.0)
            b1 = np.float32(0.0)
            b2 = np.float32(0.0)
            b3 = np.float32(0.0)
            for k in range(dim):
                x = rows[i, k]
                y = rows[i1, k]
                c0, c1, c2, c3 = block[0, k], block[1, k], block[2, k], block[3, k]
                a0 += x * c0
                a1 += x * c1
                a2 += x * c2
                a3 += x * c3
                b0 += y * c0
                b1 += y * c1
                b2 += y * c2
                b3 += y * c3
            out[i, j], out[i, j + 1], out[i, j + 2], out[i, j + 3] = a0, a1, a2, a3
            if i1 != i:
                out[i1, j], out[i1, j + 1], out[i1, j + 2], out[i1, j + 3] = b0, b1, b2, b3
    for j in range(blocked, stop):
        for i in range(count):
            acc = np.float32(0.0)
            for k in range(dim):
                acc += rows[i, k] * anchors[j, k]
            out[i, j] = acc


def _cosines_bf16_py(
    rows: np.ndarray, bits: np.ndarray, out: np.ndarray, start: int, stop: int
) -> None:
    """_cosines_py with bfloat16 anchors, given as their bits (m, dim) uint16: each block of
    four is widened to float32 (a bfloat16 is the top half of a float32) and dotted as there,
    so the result has the bits of _cosines_py on the float32 values of the same anchors.

    Its own kernel, though the dots are _cosines_py's: one function for both dtypes, compiled
    for uint32 and uint16 bits and widened by a shift argument (0 or 16), gave the same bits but
    ran at 0.82-0.96x the speed for float32, 1-64 rows at M = 10k and 100k, and 0.87-0.95x for
    bfloat16 but 64 rows at 100k (1.01x; one process alternating the two, Intel Xeon without
    AMX, load 1.1)."""
    count, dim = rows.shape
    wide = np.empty((4, dim), dtype=np.uint32)
    block = wide.view(np.float32)
    for j in range(start, stop, 4):
        width = min(4, stop - j)
        for r in range(width):
            for k in range(dim):
                wide[r, k] = np.uint32(bits[j + r, k]) << 16
        if width < 4:  # the last m % 4 anchors, one at a time as in _cosines_py
            for i in range(count):
                for r in range(width):
                    acc = np.float32(0.0)
                    for k in range(dim):
                        acc += rows[i, k] * block[r, k]
                    out[i, j + r] = acc
            continue
        for i in range(0, count, 2):  # by pairs, a lone last row with itself: _cosines_py
            i1 = min(i + 1, count - 1)
            a0 = np.float32(0.0)
            a1 = np.float32(0.0)
            a2 = np.float32(0.0)
            a3 = np.float32(0.0)
            b0 = np.float32(0.0)
            b1 = np.float32(0.0)
            b2 = np.float32(0.0)
            b3 = np.float32(0.0)
            for k in range(dim):
                x = rows[i, k]
                y = rows[i1, k]
                c0, c1, c2, c3 = block[0, k], block[1, k], block[2, k], block[3, k]
                a0 += x * c0
                a1 += x * c1
                a2 += x * c2
                a3 += x * c3
                b0 += y * c0
                b1 += y * c1
                b2 += y * c2
                b3 += y * c3
            out[i, j], out[i, j + 1], out[i, j + 2], out[i, j + 3] = a0, a1, a2, a3
            if i1 != i:
                out[i1, j], out[i1, j + 1], out[i1, j + 2], out[i1, j + 3] = b0, b1, b2, b3


def _row_dots_py(rows: np.ndarray, vector: np.ndarray, out: np.ndarray) -> None:
    """out (r,) = rows (r, n) . vector (n,)."""
    count, n = rows.shape
    for i in range(count):
        acc = np.float32(0.0)
        for k in range(n):
            acc += rows[i, k] * vector[k]
        out[i] = acc


def _pair_dots_py(
    matrix: np.ndarray, left: np.ndarray, right: np.ndarray, out: np.ndarray, start: int, stop: int
) -> None:
    """out[k] = matrix[left[k]] . matrix[right[k]] (matrix (u, n)) for k in [start, stop)."""
    n = matrix.shape[1]
    for p in range(start, stop):
        a, b = left[p], right[p]
        acc = np.float32(0.0)
        for k in range(n):
            acc += matrix[a, k] * matrix[b, k]
        out[p] = acc


@functools.cache
def _kernels() -> tuple[Callable[..., Any], ...] | None:
    # fastmath lets the sums vectorise: reassociated, but the same way for every row.
    return compile_kernels(
        (_cosines_py, "void(float32[:, ::1], float32[:, ::1], float32[:, ::1], int64, int64)"),
        (_row_dots_py, "void(float32[:, ::1], float32[::1], float32[::1])"),
        (
            _cosines_bf16_py,
            "void(float32[:, ::1], uint16[:, ::1], float32[:, ::1], int64, int64)",
        ),
        (
            _pair_dots_py,
            "void(float32[:, ::1], int64[::1], int64[::1], float32[::1], int64, int64)",
        ),
        fastmath=True,
    )


def _on_cpu(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def anchor_cosines(
    embeddings: torch.Tensor, anchors: torch.Tensor, *, split: bool = False
) -> torch.Tensor:
    """(n, m) float32 inner products of unit embeddings (n, dim) with anchors (m, dim), no
    gradient. bfloat16 anchors (RANKSERVE_ANCHOR_DTYPE) are read at half the bytes and
    multiplied in float32, as their float32 values would be. With `split`, the spare core takes
    half of the anchors (models/spare_core.py): each core reads half of the matrix, where
    splitting the rows made both read all of it."""
    embeddings, anchors = embeddings.detach(), anchors.detach()
    kernels = _kernels()
    on_cpu = embeddings.device.type == "cpu" and anchors.device.type == "cpu"
    known = anchors.dtype in (torch.float32, torch.bfloat16)
    if kernels is not None and on_cpu and embeddings.dtype == torch.float32 and known:
        m = anchors.shape[0]
        out = np.empty((len(embeddings), m), dtype=np.float32)  # (n, m)
        rows = np.ascontiguousarray(embeddings.numpy())  # (n, dim)
        if anchors.dtype == torch.float32:
            kernel, matrix = kernels[0], np.ascontiguousarray(anchors.numpy())  # (m, dim)
        else:
            kernel = kernels[2]
            matrix = anchors.contiguous().view(torch.int16).numpy().view(np.uint16)  # (m, dim)

        def columns(start: int, stop: int) -> None:
            kernel(rows, matrix, out, start, stop)

        if split:
            split_range(columns, m, elements=out.size, align=4)
        else:
            columns(0, m)
        return torch.from_numpy(out)
    if anchors.dtype == torch.bfloat16:
        anchors = anchors.to(embeddings.dtype)  # a bfloat16 product would round the cosines
    return embeddings @ anchors.T  # (n, m)


def row_dots(rows: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    """(n,) inner products of rows (n, k) with one vector (k,): cosines, Spearman's rho."""
    rows, vector = rows.detach(), vector.detach()
    kernels = _kernels()
    if kernels is None or not _on_cpu(rows, vector):
        return rows @ vector  # (n,)
    out = np.empty(len(rows), dtype=np.float32)  # (n,)
    kernels[1](np.ascontiguousarray(rows.numpy()), np.ascontiguousarray(vector.numpy()), out)
    return torch.from_numpy(out)


def pair_dots(matrix: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """(n,) inner products of rows left[k] and right[k] of matrix (u, k): the cosines or
    Spearman's rhos of sentence pairs. On CPU each pair is dotted where its rows lie, split
    over the spare core when large: gathering both sides first and multiplying them, as torch
    would, cost 26.7 ms for 64 pairs of rank vectors at M = 100k, the kernel 1.4-2.1 ms (AMD
    EPYC Zen 4, load 0.8)."""
    matrix = matrix.detach()
    kernels = _kernels()
    if kernels is None or not _on_cpu(matrix):
        return (matrix[left] * matrix[right]).sum(dim=-1)  # (n,)
    rows = np.ascontiguousarray(matrix.numpy())  # (u, k)
    lefts = np.ascontiguousarray(left.numpy(), dtype=np.int64)  # (n,)
    rights = np.ascontiguousarray(right.numpy(), dtype=np.int64)  # (n,)
    named = np.concatenate([lefts, rights])  # (2n,)
    if len(named) and (named.min() < 0 or named.max() >= len(rows)):
        raise IndexError("pair index out of range")  # the kernel does not check
    out = np.empty(len(lefts), dtype=np.float32)  # (n,)

    def pairs(start: int, stop: int) -> None:
        kernels[3](rows, lefts, rights, out, start, stop)

    split_range(pairs, len(lefts), elements=len(lefts) * rows.shape[1])
    return torch.from_numpy(out)
