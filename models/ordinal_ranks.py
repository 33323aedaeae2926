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
    """values (rows, m) float32, out (rows, m) float32; compiled by numba when it is present.

    Each key travels with its column in one uint64 (key << 32 | column), so a pass scatters one
    array, not two: 15-25 % faster than two uint32 arrays, from 11 x 10k to 16 x 100k cosines
    (AMD EPYC Zen 4, a script alternating the two, load 0.3-0.8), the same ranks. Digits of 8
    bits (four passes) were slower at both sizes.
    """
    rows, m = values.shape
    items = np.empty(m, dtype=np.uint64)  # (m,) key << 32 | column, sorted by the passes so far
    items_b = np.empty(m, dtype=np.uint64)  # (m,) the other buffer of each scatter pass
    counts = np.empty((3, _BUCKETS), dtype=np.int32)  # one histogram per 11-bit digit
    low = np.uint64(0xFFFFFFFF)
    for r in range(rows):
        bits = values[r].view(np.uint32)  # (m,)
        counts[:] = 0
        for k in range(m):
            b = np.uint64(bits[k])
            # IEEE order as unsigned order: negatives flip every bit, positives the sign bit.
            key = (b ^ low) if b >= np.uint64(0x80000000) else (b | np.uint64(0x80000000))
            if key == np.uint64(0x7FFFFFFF):  # -0.0 is +0.0: equal floats tie, in column order
                key = np.uint64(0x80000000)
            items[k] = (key << np.uint64(32)) | np.uint64(k)
            counts[0, np.int64(key & np.uint64(_MASK))] += 1
            counts[1, np.int64((key >> np.uint64(_BITS)) & np.uint64(_MASK))] += 1
            counts[2, np.int64(key >> np.uint64(2 * _BITS))] += 1
        for digit in range(3):
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
            shift_bits = np.uint64(32 + digit * _BITS)
            for k in range(m):
                item = items[k]
                bucket = np.int64((item >> shift_bits) & np.uint64(_MASK))
                slot = counts[digit, bucket]
                counts[digit, bucket] = slot + 1
                if last:
                    # The final position is the rank: scatter the affine rank, never invert.
                    out[r, np.int64(item & low)] = slot * scale + shift
                else:
                    items_b[slot] = item
            if not last:
                items, items_b = items_b, items


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
    """out[r, k] = scale * (0-based ordinal rank of values[r, k] in row r) + shift; `out` may
    be `values` itself (each row is read whole before its ranks are written)."""
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
