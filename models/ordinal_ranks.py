"""Exact ordinal ranks of the rows of a float32 matrix, written straight into an affine map.

`ranks_into(values, out, scale, shift)` sets out[r, k] = scale * rank + shift, where rank is
the 0-based ordinal rank of values[r, k] in its row (ties in order of appearance, as
scipy.stats.rankdata(method="ordinal") - 1). With scale = 1, shift = 0 these are the ranks of
RankEncoder Eq. 2; with g's constants (Eq. 3) the normalised rank vectors, in the same pass.

On CPU this is the cost of Eq. 7, so it gets a kernel of its own (bench.ranks measures the
alternatives): an LSD radix sort of the float32 bit patterns in numba, 3 passes of 11 bits,
one row at a time. It is exact (a stable sort of an order-preserving integer key), linear in
the row length, and scatters the affine rank into `out` in its last pass, so no permutation is
ever inverted. Without numba the fallback is numpy's default argsort (x86-simd-sort), the
fastest comparison sort measured here, plus a scatter; on tie-free rows both give the same
ranks. The kernel releases the GIL and uses one thread: under co-tenancy one thread per call
beat two (issue 13), and concurrent requests already spread over the cores.
"""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from models.numba_jit import compile_kernel

_BITS = 11
_BUCKETS = 1 << _BITS
_MASK = _BUCKETS - 1


def _radix_ranks_into(values: np.ndarray, out: np.ndarray, scale: float, shift: float) -> None:
    """values (rows, m) float32, out (rows, m) float32; compiled by numba when it is present."""
    rows, m = values.shape
    keys = np.empty(m, dtype=np.uint32)  # (m,) order-preserving integer keys of one row
    keys_b = np.empty(m, dtype=np.uint32)  # (m,) the other buffer of each scatter pass
    order = np.empty(m, dtype=np.int32)  # (m,) column indices, sorted by the passes so far
    order_b = np.empty(m, dtype=np.int32)
    counts = np.empty((3, _BUCKETS), dtype=np.int64)  # one histogram per 11-bit digit
    for r in range(rows):
        bits = values[r].view(np.uint32)  # (m,)
        counts[:] = 0
        for k in range(m):
            b = np.int64(bits[k])
            # IEEE order as unsigned order: negatives flip every bit, positives the sign bit.
            key = (b ^ 0xFFFFFFFF) if b >= 0x80000000 else (b | 0x80000000)
            if key == 0x7FFFFFFF:  # -0.0 is +0.0: equal floats must tie, kept in column order
                key = 0x80000000
            keys[k] = key
            order[k] = k
            counts[0, key & _MASK] += 1
            counts[1, (key >> _BITS) & _MASK] += 1
            counts[2, key >> (2 * _BITS)] += 1
        for digit in range(3):
            shift_bits = digit * _BITS
            # A digit that every key shares leaves the order unchanged: skip its pass.
            skip = False
            for bucket in range(_BUCKETS):
                if counts[digit, bucket] == m:
                    skip = True
                    break
            last = digit == 2
            if skip and not last:
                continue
            total = 0
            for bucket in range(_BUCKETS):  # exclusive prefix sums: each bucket's first slot
                count = counts[digit, bucket]
                counts[digit, bucket] = total
                total += count
            for k in range(m):
                source = order[k]
                key = keys[k]
                slot = counts[digit, (key >> shift_bits) & _MASK]
                counts[digit, (key >> shift_bits) & _MASK] = slot + 1
                if last:
                    # The final position is the rank: scatter the affine rank, never invert.
                    out[r, source] = slot * scale + shift
                else:
                    keys_b[slot] = key
                    order_b[slot] = source
            if not last:
                keys, keys_b = keys_b, keys
                order, order_b = order_b, order


def _numpy_ranks_into(values: np.ndarray, out: np.ndarray, scale: float, shift: float) -> None:
    """The fallback: numpy's default (x86-simd-sort) argsort and a scatter of 0..m-1."""
    order = np.argsort(values, axis=1)  # (rows, m)
    positions = np.arange(values.shape[1], dtype=np.float64) * scale + shift  # (m,)
    np.put_along_axis(out, order, positions.astype(np.float32)[None, :], axis=1)


@functools.cache
def _kernel() -> Callable[..., Any] | None:
    """The compiled kernel, or None without numba."""
    signature = "void(float32[:, ::1], float32[:, ::1], float64, float64)"
    return compile_kernel(_radix_ranks_into, signature)


def method() -> str:
    """Which exact method ranks_into uses here."""
    return "radix (numba)" if _kernel() is not None else "argsort (numpy)"


def ranks_into(values: np.ndarray, out: np.ndarray, scale: float = 1.0, shift: float = 0.0) -> None:
    """out[r, k] = scale * (0-based ordinal rank of values[r, k] in row r) + shift."""
    if values.ndim != 2 or values.shape != out.shape:
        raise ValueError("values and out must be matrices of one shape")
    if values.dtype != np.float32 or out.dtype != np.float32:
        raise TypeError("ranks are computed on float32 matrices")
    if values.shape[1] == 0:
        return
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    kernel = _kernel()
    if kernel is None:
        _numpy_ranks_into(values, out, scale, shift)
    else:
        kernel(np.ascontiguousarray(values), out, float(scale), float(shift))


def ordinal_ranks(values: np.ndarray, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    """A new (rows, m) float32 matrix of ranks_into's output."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    out = np.empty_like(values)  # (rows, m)
    ranks_into(values, out, scale, shift)
    return out


def numpy_ranks(values: np.ndarray, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    """The fallback's output whatever is installed (tests compare the two paths)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    out = np.empty_like(values)
    _numpy_ranks_into(values, out, scale, shift)
    return out
