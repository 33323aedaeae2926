"""Rank vectors stored at 16, 8 or 4 bits per anchor, and their similarity to an exact z.

A document's ranks r_k in 0..M-1 (Eq. 2) become bucket codes c_k = floor(r_k * L / M), L = 2^bits
levels, each bucket holding M / L consecutive ranks. Decoding puts every rank at its bucket's
centre, r'_k = (c_k + 1/2) M / L - 1/2 = (c_k - (L-1)/2) M / L + (M-1)/2, and (M-1)/2 is the
mean rank that g (Eq. 3) subtracts: g(r') = s (M / L) (c_k - (L-1)/2), s = g's scale. So the
rank similarity of an exact query vector z_q is a dot product with the centred codes:

    z_q . g(r') = s (M / L) * sum_k z_q[k] (c_k - (L-1)/2)

The centres shrink the rank variance by (1 - 1/L^2) (the spread within a bucket is lost),
which would pull every similarity towards 0 by that factor (0.4 % at 4 bits); the result is
divided by it. The remaining error is the rounding noise, about 1 / (L sqrt(M)) per pair: 4e-5
at 8 bits and M = 10k (tests/models/test_rank_store.py bounds it).

`error_bound` is a guarantee rather than a typical size: no rank lies more than
M / (2L) + 1/2 from its bucket's centre, so by Hoelder's inequality no similarity of the
query is off by more than s (M / (2L) + 1/2) |z_q|_1 before the variance correction, about
3 / (2L) (6e-3 at 8 bits). Exact search uses it to rank only the candidates the codes cannot
rule out (models/rescoring.py).

With no more anchors than levels the codes are the ranks themselves (a bucket per rank, L = M),
as 16-bit codes are up to 65,536 anchors: nothing is lost, and a similarity from them differs
from z_q . z_d of the rank vectors computed anew only by rounding (`lossless`; 16-bit codes are
summed in float64), so a search may score from them as it would from the rank vectors: at
M = 10k, 20 KB per document instead of a product with the anchor matrix and a sort per
candidate. Past 65,536 anchors 16-bit codes are buckets as above.

4-bit codes are packed two to a byte as columns k and k + ceil(M/2) (low and high nibble), so
the dot product reads each byte once and needs no interleaving. The dot products run in a
numba kernel, one thread, converting codes as it reads them, from the rows where they lie:
about 0.06 ms for 100 candidates at M = 10k when the rows are in the cache, where converting
to float32 and calling a multi-threaded GEMV took 20 ms on two busy cores. Rows that come
from memory cost more than the arithmetic: a row of 10 KB is one sequential stream, and the
prefetcher keeps only so many lines of one stream in flight. The kernel reads four rows side
by side (four streams): 100 random rows of a 10 GB store took 0.11 ms against 0.22 ms one row
after another (AMD EPYC Zen 4, a script alternating the two, load 0.8), with the same sums.
"""

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from models.numba_jit import compile_kernels
from models.ranking import normalisation

RankBits = Literal[16, 8, 4]

# float32 sums over M terms, in the codes' kernel and in the exact product, each round a
# similarity by far less than this; error_bound adds it so the bound also holds as computed.
_ROUNDING = 1e-5


@dataclass(frozen=True)
class RankCodec:
    m: int  # anchors
    bits: RankBits

    def __post_init__(self) -> None:
        if self.bits not in (16, 8, 4):
            raise ValueError("rank codes have 16, 8 or 4 bits")
        normalisation(self.m)  # refuses fewer than two anchors

    @property
    def levels(self) -> int:
        """Buckets of ranks: 2^bits, or M when each rank fits a bucket of its own."""
        return min(1 << self.bits, self.m)

    @property
    def lossless(self) -> bool:
        """Whether the codes are the ranks themselves (module docstring)."""
        return self.levels == self.m

    @property
    def half(self) -> int:
        """Columns per nibble of a 4-bit code."""
        return (self.m + 1) // 2

    @property
    def row_bytes(self) -> int:
        return {16: 2 * self.m, 8: self.m, 4: self.half}[self.bits]

    def encode(self, ranks: np.ndarray) -> np.ndarray:
        """(n, row_bytes) uint8 codes of integer ranks (n, m), 0..m-1 per row; 16-bit codes
        are native-endian uint16 in those bytes."""
        if ranks.ndim != 2 or ranks.shape[1] != self.m:
            raise ValueError(f"expected ranks of {self.m} anchors")
        wide = ranks.astype(np.int64) * self.levels // self.m  # (n, m)
        if self.bits == 16:
            return np.ascontiguousarray(wide.astype(np.uint16)).view(np.uint8)  # (n, 2m)
        codes = wide.astype(np.uint8)  # (n, m)
        if self.bits == 8:
            return codes
        packed = np.zeros((len(codes), self.half), dtype=np.uint8)  # (n, half)
        packed[:] = codes[:, : self.half]
        packed[:, : self.m - self.half] |= codes[:, self.half :] << 4
        return packed

    def decode_ranks(self, packed: np.ndarray) -> np.ndarray:
        """The bucket-centre ranks (n, m) float32 that the codes stand for (for tests)."""
        codes = self._codes(packed)  # (n, m)
        width = self.m / self.levels
        return ((codes.astype(np.float64) + 0.5) * width - 0.5).astype(np.float32)

    def similarity(self, packed: np.ndarray, query_rank: torch.Tensor) -> torch.Tensor:
        """z_q . z_d of an exact normalised query rank vector (m,) and coded documents; (n,)."""
        codes = np.ascontiguousarray(packed, dtype=np.uint8)  # (n, row_bytes)
        return self.similarity_rows(codes, np.arange(len(codes)), query_rank)

    def similarity_rows(
        self, matrix: np.ndarray, rows: np.ndarray, query_rank: torch.Tensor
    ) -> torch.Tensor:
        """`similarity` of the codes in rows `rows` (n,) of `matrix` (capacity, row_bytes), read
        where they lie: a RankStore's rows are never copied (models/rank_store.py)."""
        scale, _ = normalisation(self.m)
        # Bucket centres shrink the ranks' variance by (1 - 1/L^2); ranks themselves do not.
        shrink = 1.0 if self.lossless else 1.0 - 1.0 / (self.levels * self.levels)
        factor = scale * (self.m / self.levels) / shrink
        query = query_rank.detach().to("cpu", torch.float32).numpy()  # (m,)
        positions = np.ascontiguousarray(rows, dtype=np.int64)  # (n,)
        centre = (self.levels - 1) / 2
        if self.bits == 16:
            # Summed in float64: terms of |c - centre| up to 32,768 would leave float32 sums
            # about 1e-5 off at M = 10k, as much as error_bound allows.
            wide = matrix.view(np.uint16)  # (capacity, m), the same memory
            dot = _dot(wide, positions, query.astype(np.float64), centre)  # (n,)
        elif self.bits == 8:
            dot = _dot(matrix, positions, np.ascontiguousarray(query), centre)  # (n,)
        else:
            high = np.zeros(self.half, dtype=np.float32)  # (half,), 0 past column m
            high[: self.m - self.half] = query[self.half :]
            low = np.ascontiguousarray(query[: self.half])  # (half,)
            dot = _dot4(matrix, positions, low, high, centre)  # (n,)
        return torch.from_numpy(dot * np.float32(factor))

    @functools.cached_property
    def error_bound(self) -> float:
        """The most `similarity(codes, z_q)` can differ from the exact z_q . z_d, for any
        document and any exact normalised query rank vector z_q (m,). Ordinal ranks are a
        permutation of 0..m-1, so |z_q|_1 = s * sum_r |r - (m-1)/2| = s * floor(m^2 / 4) for
        every query: one number per codec, where summing each query's vector cost a search
        0.1 ms right after faiss's scan had emptied the caches (AMD EPYC Zen 5). Lossless
        codes are off by the rounding of float32 sums alone."""
        if self.lossless:
            return _ROUNDING
        scale, _ = normalisation(self.m)
        offset = self.m / (2 * self.levels) + 0.5  # largest |rank - its bucket's centre|
        centred = scale * offset * scale * (self.m * self.m // 4)  # Hoelder
        # similarity() divides the centred sum by (1 - 1/L^2); that sum is at most 1 + centred.
        correction = (1.0 + centred) / (self.levels * self.levels - 1)
        return centred + correction + _ROUNDING

    def _codes(self, packed: np.ndarray) -> np.ndarray:
        """(n, m) bucket codes of stored rows (n, row_bytes)."""
        if self.bits == 16:
            return np.ascontiguousarray(packed).view(np.uint16)
        return packed if self.bits == 8 else self._unpack(packed)

    def _unpack(self, packed: np.ndarray) -> np.ndarray:
        codes = np.empty((len(packed), self.m), dtype=np.uint8)  # (n, m)
        codes[:, : self.half] = packed & 15
        codes[:, self.half :] = packed[:, : self.m - self.half] >> 4
        return codes


def expected_error(m: int, bits: RankBits) -> float:
    """The rounding noise's standard deviation per similarity, about 1 / (L sqrt(M)); none
    for lossless codes."""
    codec = RankCodec(m, bits)
    return 0.0 if codec.lossless else 1.0 / (codec.levels * math.sqrt(m))


def _dot_py(codes: np.ndarray, rows: np.ndarray, query: np.ndarray, centre: float) -> np.ndarray:
    """(n,) sums over k of query[k] * (codes[rows[i], k] - centre), codes of 8 or 16 bits,
    four rows side by side (module docstring)."""
    n = rows.shape[0]
    m = codes.shape[1]
    out = np.empty(n, dtype=np.float32)
    c = np.float32(centre)
    grouped = n - n % 4
    for i in range(0, grouped, 4):
        r0, r1, r2, r3 = rows[i], rows[i + 1], rows[i + 2], rows[i + 3]
        a0 = np.float32(0.0)
        a1 = np.float32(0.0)
        a2 = np.float32(0.0)
        a3 = np.float32(0.0)
        for k in range(m):
            q = query[k]
            a0 += (np.float32(codes[r0, k]) - c) * q
            a1 += (np.float32(codes[r1, k]) - c) * q
            a2 += (np.float32(codes[r2, k]) - c) * q
            a3 += (np.float32(codes[r3, k]) - c) * q
        out[i], out[i + 1], out[i + 2], out[i + 3] = a0, a1, a2, a3
    for i in range(grouped, n):
        row = rows[i]
        acc = np.float32(0.0)
        for k in range(m):
            acc += (np.float32(codes[row, k]) - c) * query[k]
        out[i] = acc
    return out


def _dot4_py(
    codes: np.ndarray, rows: np.ndarray, low: np.ndarray, high: np.ndarray, centre: float
) -> np.ndarray:
    """(n,) as _dot_py, on nibble-packed codes: low nibbles against `low`, high ones `high`."""
    n = rows.shape[0]
    half = codes.shape[1]
    out = np.empty(n, dtype=np.float32)
    c = np.float32(centre)
    grouped = n - n % 4
    for i in range(0, grouped, 4):
        r0, r1, r2, r3 = rows[i], rows[i + 1], rows[i + 2], rows[i + 3]
        a0 = np.float32(0.0)
        a1 = np.float32(0.0)
        a2 = np.float32(0.0)
        a3 = np.float32(0.0)
        for k in range(half):
            lo = low[k]
            hi = high[k]
            b = codes[r0, k]
            a0 += (np.float32(b & 15) - c) * lo + (np.float32(b >> 4) - c) * hi
            b = codes[r1, k]
            a1 += (np.float32(b & 15) - c) * lo + (np.float32(b >> 4) - c) * hi
            b = codes[r2, k]
            a2 += (np.float32(b & 15) - c) * lo + (np.float32(b >> 4) - c) * hi
            b = codes[r3, k]
            a3 += (np.float32(b & 15) - c) * lo + (np.float32(b >> 4) - c) * hi
        out[i], out[i + 1], out[i + 2], out[i + 3] = a0, a1, a2, a3
    for i in range(grouped, n):
        row = rows[i]
        acc = np.float32(0.0)
        for k in range(half):
            byte = codes[row, k]
            acc += (np.float32(byte & 15) - c) * low[k] + (np.float32(byte >> 4) - c) * high[k]
        out[i] = acc
    return out


@functools.cache
def _kernels() -> tuple[Callable[..., Any], ...] | None:
    # fastmath lets the sums vectorise (reassociated): float32 over M terms of centred codes.
    return compile_kernels(
        (
            _dot_py,
            [
                "float32[:](uint8[:, ::1], int64[::1], float32[::1], float64)",
                # A float64 query makes every sum float64 (numba unifies the accumulators).
                "float32[:](uint16[:, ::1], int64[::1], float64[::1], float64)",
            ],
        ),
        (_dot4_py, "float32[:](uint8[:, ::1], int64[::1], float32[::1], float32[::1], float64)"),
        fastmath=True,
    )


def _dot(codes: np.ndarray, rows: np.ndarray, query: np.ndarray, centre: float) -> np.ndarray:
    kernels = _kernels()
    if kernels is not None:
        return kernels[0](codes, rows, query, centre)
    return ((codes[rows].astype(np.float32) - np.float32(centre)) @ query).astype(np.float32)


def _dot4(
    codes: np.ndarray, rows: np.ndarray, low: np.ndarray, high: np.ndarray, centre: float
) -> np.ndarray:
    kernels = _kernels()
    if kernels is not None:
        return kernels[1](codes, rows, low, high, centre)
    c = np.float32(centre)
    picked = codes[rows]  # (n, half)
    lows = (picked & 15).astype(np.float32) - c  # (n, half)
    highs = (picked >> 4).astype(np.float32) - c  # (n, half)
    return (lows @ low + highs @ high).astype(np.float32)
