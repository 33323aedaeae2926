"""Cosines of a few unit rows against the anchor matrix, on CPU in one pass over the anchors.

Every Eq. 7 request that is not a batch needs such a product: a search's query, a pair's two
texts. For one to four rows torch's product costs 1.3-4x one pass over the (m, dim) matrix
(bench.ranks, "matmul" rows: at M = 100k, 10.3 ms for one row and 19.5 ms for two, where one
pass takes 3.7 and 4.5 ms), and at M = 100k that pass is what bounds the request. The kernel
reads each anchor row once and dots it with every input row, on one thread with the GIL
released, so concurrent requests spread over the cores; from about a dozen rows torch's
blocked product wins, and larger batches keep it.
"""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from models.numba_jit import compile_kernel

_MAX_ROWS = 4  # the kernel's rows; measured faster than torch up to here at M = 10k and 100k


def _cosines_py(rows: np.ndarray, anchors: np.ndarray, out: np.ndarray) -> None:
    """out (r, m) = rows (r, dim) . anchors (m, dim)^T, anchor by anchor."""
    count, dim = rows.shape
    for j in range(anchors.shape[0]):
        for i in range(count):
            acc = np.float32(0.0)
            for k in range(dim):
                acc += rows[i, k] * anchors[j, k]
            out[i, j] = acc


@functools.cache
def _kernel() -> Callable[..., Any] | None:
    # fastmath lets the 384-term sums vectorise (reassociated float32).
    signature = "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])"
    return compile_kernel(_cosines_py, signature, fastmath=True)


def anchor_cosines(embeddings: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """(n, m) inner products of unit embeddings (n, dim) with anchors (m, dim), no gradient."""
    embeddings, anchors = embeddings.detach(), anchors.detach()
    kernel = _kernel() if len(embeddings) <= _MAX_ROWS else None
    on_cpu = embeddings.device.type == "cpu" and anchors.device.type == "cpu"
    float32 = embeddings.dtype == torch.float32 and anchors.dtype == torch.float32
    if kernel is None or not (on_cpu and float32 and anchors.is_contiguous()):
        return embeddings @ anchors.T  # (n, m)
    rows = np.ascontiguousarray(embeddings.numpy())  # (n, dim)
    out = np.empty((len(rows), anchors.shape[0]), dtype=np.float32)  # (n, m)
    kernel(rows, anchors.numpy(), out)
    return torch.from_numpy(out)
