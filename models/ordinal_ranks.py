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

    A first pass counts the three digits of every key. The low digit's pass makes the keys
    again from the values and scatters each with its column in one uint64 (key << 32 | column),
    so a pass moves one array, not two: 15-25 % faster than two uint32 arrays, from 11 x 10k to
    16 x 100k cosines (AMD EPYC Zen 4, a script alternating the two, load 0.3-0.8). The middle
    digit's pass keeps only what the last needs, the top digit and the column, in a uint32
    where they fit (m up to 2**22), so the last pass reads half the bytes and a row's buffers
    fit a 2 MB L2 at M = 100k: 1.10-1.15x as fast as uint64 items in every pass, from 1 x 10k
    to 128 x 100k ranked in place, as models/ranking.py ranks, the same ranks (Intel Xeon with
    AMX, a script alternating the two, load 0.4-0.6; into a second matrix 1.07-1.16x, but 0.97x
    at 128 x 100k). Keeping the first pass's keys rather than making them again was slower, and
    so were digits of 8 bits (four passes; 0.89-0.93x on the Intel Xeon with AMX too), and a last
    pass that writes its ranks through blocks of columns small enough for L1 (0.80-1.09x there;
    docs/benchmarks.md, seventy-eighth session), and a first pass on the top digit with the two
    lower ones sorted within each of its buckets (0.47-0.87x on the Intel Xeon model 167, from
    2 x 10k to 128 x 100k; seventy-ninth session). Every pass runs, even for a digit that all keys
    share: the middle one must narrow the items, and rows of cosines share none.
    """
    rows, m = values.shape
    column_bits = 1
    while (1 << column_bits) < m:
        column_bits += 1
    narrow = column_bits + _BITS - 1 <= 32  # the top digit has 10 bits
    items = np.empty(m, dtype=np.uint64)  # (m,) key << 32 | column, by the low digit
    # (m,) top digit << column_bits | column, or the uint64 items again where they do not fit
    last_narrow = np.empty(m if narrow else 0, dtype=np.uint32)
    last_wide = np.empty(0 if narrow else m, dtype=np.uint64)
    counts = np.empty((3, _BUCKETS), dtype=np.int32)  # one histogram per 11-bit digit
    low = np.uint64(0xFFFFFFFF)
    column_mask = np.uint32((1 << column_bits) - 1) if narrow else np.uint32(0)

    def key_of(b: np.uint32) -> np.uint32:
        """IEEE order as unsigned order: negatives flip every bit, positives the sign bit;
        -0.0 is +0.0, so equal floats tie, in column order."""
        key = (
            (b ^ np.uint32(0xFFFFFFFF))
            if b >= np.uint32(0x80000000)
            else (b | np.uint32(0x80000000))
        )
        return np.uint32(0x80000000) if key == np.uint32(0x7FFFFFFF) else key

    for r in range(rows):
        bits = values[r].view(np.uint32)  # (m,)
        counts[:] = 0
        for k in range(m):
            key = key_of(bits[k])
            counts[0, key & np.uint32(_MASK)] += 1
            counts[1, (key >> np.uint32(_BITS)) & np.uint32(_MASK)] += 1
            counts[2, key >> np.uint32(2 * _BITS)] += 1
        for digit in range(3):
            total = 0
            for bucket in range(_BUCKETS):  # exclusive prefix sums: each bucket's first slot
                count = counts[digit, bucket]
                counts[digit, bucket] = total
                total += count
        for k in range(m):
            key = key_of(bits[k])
            bucket = key & np.uint32(_MASK)
            slot = counts[0, bucket]
            counts[0, bucket] = slot + 1
            items[slot] = (np.uint64(key) << np.uint64(32)) | np.uint64(k)
        # The last pass's final position is the rank: it scatters the affine rank, and no
        # permutation is ever inverted.
        if narrow:
            for k in range(m):
                item = items[k]
                bucket = np.int64((item >> np.uint64(32 + _BITS)) & np.uint64(_MASK))
                slot = counts[1, bucket]
                counts[1, bucket] = slot + 1
                top = np.uint32(item >> np.uint64(32 + 2 * _BITS))
                last_narrow[slot] = (top << np.uint32(column_bits)) | np.uint32(item & low)
            for k in range(m):
                item = last_narrow[k]
                bucket = item >> np.uint32(column_bits)
                slot = counts[2, bucket]
                counts[2, bucket] = slot + 1
                out[r, np.int64(item & column_mask)] = slot * scale + shift
        else:
            for k in range(m):
                item = items[k]
                bucket = np.int64((item >> np.uint64(32 + _BITS)) & np.uint64(_MASK))
                slot = counts[1, bucket]
                counts[1, bucket] = slot + 1
                last_wide[slot] = item
            for k in range(m):
                item = last_wide[k]
                bucket = np.int64(item >> np.uint64(32 + 2 * _BITS))
                slot = counts[2, bucket]
                counts[2, bucket] = slot + 1
                out[r, np.int64(item & low)] = slot * scale + shift


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
