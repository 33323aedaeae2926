"""Batch-invariant float32 products on CPU: the anchor cosines of rank vectors, and row dots.

Each output element is summed in one fixed order whatever else is in the batch, so a
document's Eq. 7 score never depends on which other candidates were scored with it: a page of
search results is exactly the slice of a longer search. torch's product does not promise that
(on this CPU its last bits change with the number of rows), and one flipped near-tie among 10k
anchor cosines changes a rank vector.

The anchor kernels (models/anchor_panels.py) and the dot kernels here run on one thread with the
GIL released, so concurrent requests spread over the cores. Whether the anchor kernel beats
torch's product (two threads) depends on the CPU and the number of rows: `python -m
bench.ranks` prints both, and docs/benchmarks.md gives the figures per CPU. For a hundred rows
torch was faster on every CPU measured: that is what invariance costs. Off the CPU torch
computes them, and for inputs in other dtypes.
"""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from models import anchor_panels
from models.numba_jit import compile_kernels
from models.spare_core import split_range


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
) -> int:
    """out[k] = matrix[left[k]] . matrix[right[k]] (matrix (u, n)) for k in [start, stop);
    returns how many pairs named a row out of range (left unwritten)."""
    rows, n = matrix.shape
    outside = 0
    for p in range(start, stop):
        a, b = left[p], right[p]
        if a < 0 or a >= rows or b < 0 or b >= rows:
            outside += 1
            continue
        acc = np.float32(0.0)
        for k in range(n):
            acc += matrix[a, k] * matrix[b, k]
        out[p] = acc
    return outside


@functools.cache
def _kernels() -> tuple[Callable[..., Any], ...] | None:
    # fastmath lets the sums vectorise: reassociated, but the same way for every row.
    return compile_kernels(
        (_row_dots_py, "void(float32[:, ::1], float32[::1], float32[::1])"),
        (
            _pair_dots_py,
            "int64(float32[:, ::1], int64[::1], int64[::1], float32[::1], int64, int64)",
        ),
        fastmath=True,
    )


def _on_cpu(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def prepare_anchors(anchors: torch.Tensor) -> None:
    """Build now what anchor_cosines reads for this matrix on CPU (its panels, 6 ms for 10k
    bfloat16 anchors, about 50 ms for 100k), so the first request does not."""
    if anchor_panels.available() and _panel_ready(anchors):
        anchor_panels.panels_of(anchors)


def _panel_ready(anchors: torch.Tensor) -> bool:
    return anchors.device.type == "cpu" and anchors.dtype in (torch.float32, torch.bfloat16)


def anchor_cosines(
    embeddings: torch.Tensor, anchors: torch.Tensor, *, split: bool = False
) -> torch.Tensor:
    """(n, m) float32 inner products of unit embeddings (n, dim) with anchors (m, dim), no
    gradient. bfloat16 anchors (RANKSERVE_ANCHOR_DTYPE) are read at half the bytes, and int8
    ones at a quarter, and multiplied in float32, as their float32 values would be, or, on a
    CPU with AVX-512 VNNI or with AVX2 alone, int8 ones as integers (models/integer_grid.py). With
    `split`, the spare core takes half of the anchors (models/spare_core.py): each core reads
    half of the matrix, where splitting the rows made both read all of it."""
    rows_ready = embeddings.device.type == "cpu" and embeddings.dtype == torch.float32
    if anchor_panels.available() and rows_ready and _panel_ready(anchors):
        panels = anchor_panels.panels_of(anchors)  # built once per anchor matrix
        m = anchors.shape[0]
        out = np.empty((len(embeddings), m), dtype=np.float32)  # (n, m)
        rows = np.ascontiguousarray(embeddings.detach().numpy())  # (n, dim)

        columns = anchor_panels.cosines_by_columns(rows, panels, out)
        if split:
            threshold = anchor_panels.min_split_elements(panels)
            split_range(
                columns, m, elements=out.size, align=anchor_panels.WIDTH, min_elements=threshold
            )
        else:
            columns(0, m)
        return torch.from_numpy(out)
    embeddings, anchors = embeddings.detach(), anchors.detach()
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
    kernels[0](np.ascontiguousarray(rows.numpy()), np.ascontiguousarray(vector.numpy()), out)
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
    out = np.empty(len(lefts), dtype=np.float32)  # (n,)
    # The kernel checks the indices: right after an encode, with the caches cold, checking
    # them in numpy first (a concatenation, a min, a max) took 60 us, the dots of one pair of
    # rank vectors at M = 10k 20 us (Intel Xeon with AMX, a script, load 1.2).
    outside: list[int] = []

    def pairs(start: int, stop: int) -> None:
        outside.append(kernels[1](rows, lefts, rights, out, start, stop))

    split_range(pairs, len(lefts), elements=len(lefts) * rows.shape[1])
    if any(outside):
        raise IndexError("pair index out of range")
    return torch.from_numpy(out)
