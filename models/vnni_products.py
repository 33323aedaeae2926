"""Anchor cosines as exact integer sums on AVX-512 VNNI: the CPU product for int8 anchors there.

Anchors on the int8 grid (models/anchor_formats.py) are integers q (|q| <= 127) times a power
of two 2**e each. Every input row is put on the grid of models/integer_grid.py too,
X = round(x * 2**s) with |X| <= 2**14, and X is cut into two signed bytes, X = 256 * high +
low. Then x . a = 2**(e - s) * (256 * high . q + low . q): each digit's product with q is a
sum of byte products, which vpdpbusd adds four at a time into int32 lanes, exactly; the two
sums are joined in int64, scaled in float64 (powers of two: exact) and rounded to float32
once, the bits of models/word_products.py's product on AVX2. Integer sums are exact
in any order, so a row's cosines cannot depend on the rows beside it, on how the passes group
them, or on where the anchors are split between cores (models/cpu_products.py says why that
matters).

Rounding the input costs accuracy, far less than the grid itself: cosines within 2.3e-5 of the
float64 product with the same anchors (the float kernel of models/panel_kernels.py: within
3e-7), where the grid moves them by up to 2.4e-3 to 4.1e-3 from those of the float32 anchors
(unit rows of 384 dimensions, 1 to 128 rows at M = 10k and 100k). Against the float kernel on
the same int8 anchors, split between both cores as a replica does, the product ran 1.00-1.17x
as fast for one or two rows (memory-bound; 0.94-1.05x for two on one core), 1.17-1.42x for
three, 1.24-2.07x for 11 (what an exact search verifies), 1.31-1.68x for 64 and 128 (Intel Xeon
with AMX, a script alternating the two, load 0.6-1.2, two runs; docs/benchmarks.md,
seventy-fourth session). A third digit would make the sums as close as the float kernel's, but
that CPU runs vpdpbusd on one port against two for fused multiply-adds, and three digits ran
128 rows at M = 10k only 1.18x as fast as the float kernel on one core, where two ran 1.69x.

The passes read the panels ahead (models/numba_intrinsics.py's read_ahead), the first pass over
each panel only: later ones find it in the caches, and reading ahead in every pass made 128 rows
at M = 100k take 88.8 ms against 84.4 (82.0 against 83.5 as it is). With 10 ms idle before each
call, on one core, two rows took 0.45-0.50 ms against 0.53-0.54 at M = 10k, six 0.56-0.66
against 0.89-0.99, eleven 0.79-0.93 against 1.04-1.22, at 100k eleven 8.1 against 10.2-10.4, 64
and 128 rows 1.02-1.08x as fast; back to back, with the matrix in the caches, 0.95-1.09x (Intel
Xeon with AMX, scripts alternating both, load 0.4-1.3).

vpdpbusd multiplies unsigned bytes by signed ones, so the panels hold q + 128 and each digit's
sum takes back 128 times the sum of its digits. A panel holds WIDTH anchors as (dim / 4,
WIDTH * 4) bytes, four dimensions of one anchor in each 32-bit lane.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from models.integer_grid import grid_of
from models.numba_jit import avx512_vnni, compile_kernel
from models.panel_kernels import WIDTH

DIGITS = 2  # signed bytes per input value: |X| <= 2**14, so high = (X - low) / 256 is one
# Rows per pass: each takes DIGITS x 2 vectors of 16 sums per panel, and 24 of AVX-512's 32
# registers hold the sums: six rows by panel, three across two panels, two across three, one
# across six; GROUP panels, the widest pass, at a time.
SIXES, GROUP = 6, 6

# Bound by _kernels(): numba resolves what a kernel calls among the module's globals when it
# compiles the kernel, and numba is imported only then (models/numba_jit.py).
_sixes: Any = None
_fetching_sixes: Any = None
_threes: Any = None
_twos: Any = None
_ones: Any = None
dot_bytes: Any = None
read_ahead: Any = None
stack_int32: Any = None


class Digits(NamedTuple):
    """Input rows on their grid, made once per call and read by every split of the anchors."""

    words: np.ndarray  # (rows, DIGITS, dim / 4) int32: four signed bytes, high digit first
    corrections: np.ndarray  # (rows, DIGITS) int32: 128 times each digit's sum
    factors: np.ndarray  # (rows,) float64: 2**-s, or NaN for a row that is not finite


def lay_out(q: torch.Tensor) -> np.ndarray:
    """Panels (count, groups, WIDTH * 4) uint8 of int8 anchors q (m, dim): q + 128, anchors
    past m and dimensions past dim padded with q = 0. torch makes the transposing copy
    (models/anchor_panels.py)."""
    m, dim = q.shape
    count, groups = -(-m // WIDTH), -(-dim // 4)
    padded = torch.full((count * WIDTH, groups * 4), 128, dtype=torch.uint8)  # (count W, 4 g)
    padded[:m, :dim] = (q.to(torch.int16) + 128).to(torch.uint8)
    lanes = padded.view(count, WIDTH, groups, 4).transpose(1, 2)  # (count, groups, WIDTH, 4)
    return lanes.contiguous().view(count, groups, WIDTH * 4).numpy()


def _across(rows_per_pass: int, panels_per_pass: int, fetch: bool) -> Callable[..., None]:
    """A pass of `rows_per_pass` rows across `panels_per_pass` panels, reading ahead where
    `fetch`; numba takes all three as constants, so its loops over them unroll, the sums stay
    in registers and a pass that does not fetch has no trace of it."""
    size = rows_per_pass * DIGITS * panels_per_pass * WIDTH

    def run(
        words: np.ndarray,
        corrections: np.ndarray,
        factors: np.ndarray,
        panels: np.ndarray,
        scales: np.ndarray,
        out: np.ndarray,
        panel: int,
        stop: int,
        row: int,
    ) -> None:
        """out[row:row + R, the columns of panels panel to panel + P, short of panel stop];
        rows past the last repeat it (their outputs are written twice, alike)."""
        count, groups = words.shape[0], panels.shape[1]
        sums = stack_int32(size)
        for i in range(size):
            sums[i] = 0
        for g in range(groups):
            for p in range(panels_per_pass):
                offset = np.int64((min(panel + p, stop - 1) * groups + g) * 4 * WIDTH)
                if fetch:
                    read_ahead(panels, offset, 4 * WIDTH)
                for r in range(rows_per_pass):
                    i = min(row + r, count - 1)
                    for d in range(DIGITS):
                        at = ((r * DIGITS + d) * panels_per_pass + p) * WIDTH
                        dot_bytes(sums, at, panels, offset, words[i, d, g])
                        dot_bytes(sums, at + 16, panels, offset + 4 * 16, words[i, d, g])
        for r in range(rows_per_pass):
            i = min(row + r, count - 1)
            for p in range(panels_per_pass):
                for lane in range(WIDTH):
                    column = (panel + p) * WIDTH + lane
                    if panel + p < stop and column < out.shape[1]:
                        at = (r * DIGITS * panels_per_pass + p) * WIDTH + lane
                        high = np.int64(sums[at] - corrections[i, 0])
                        low = np.int64(sums[at + panels_per_pass * WIDTH] - corrections[i, 1])
                        exact = np.float64(high * 256 + low)  # below 2**53: exact
                        factor = factors[i] * np.float64(scales[panel + p, lane])
                        out[i, column] = np.float32(exact * factor)

    return run


def _cosines_py(
    words: np.ndarray,
    corrections: np.ndarray,
    factors: np.ndarray,
    panels: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
) -> None:
    """out[:, the columns of panels start to stop] from the rows' digits, GROUP panels at a
    time: by sixes per panel, then the rows left by threes across two panels, by twos across
    three, a last one across six, while the group's panels are still in the caches."""
    count = words.shape[0]
    whole = count - count % SIXES
    for first in range(start, stop, GROUP):
        end = min(first + GROUP, stop)
        for panel in range(first, end):
            if whole:  # the panel's first six rows read it ahead, the others find it cached
                _fetching_sixes(words, corrections, factors, panels, scales, out, panel, end, 0)
            for row in range(SIXES, whole, SIXES):
                _sixes(words, corrections, factors, panels, scales, out, panel, end, row)
        row = whole
        while count - row >= 3:
            for panel in range(first, end, 2):
                _threes(words, corrections, factors, panels, scales, out, panel, end, row)
            row += 3
        if count - row == 2:
            for panel in range(first, end, 3):
                _twos(words, corrections, factors, panels, scales, out, panel, end, row)
        elif count - row == 1:
            _ones(words, corrections, factors, panels, scales, out, first, end, row)


@functools.cache
def _kernels() -> Callable[..., Any] | None:
    """The cosines compiled, or None without numba or without VNNI in the code numba compiles
    (LLVM cannot emit vpdpbusd elsewhere)."""
    global _sixes, _fetching_sixes, _threes, _twos, _ones, dot_bytes, read_ahead, stack_int32
    try:
        from models import numba_intrinsics
    except ImportError:
        return None
    if not avx512_vnni():
        return None
    dot_bytes, stack_int32 = numba_intrinsics.dot_bytes, numba_intrinsics.stack_int32
    read_ahead = numba_intrinsics.read_ahead
    arguments = "int32[:, :, ::1], int32[:, ::1], float64[::1], uint8[:, :, ::1], float32[:, ::1]"
    signature = f"void({arguments}, float32[:, ::1], int64, int64, int64)"
    _sixes, _fetching_sixes, _threes, _twos, _ones = (
        compile_kernel(_across(rows, GROUP // rows if rows < SIXES else 1, fetch), signature)
        for rows, fetch in ((SIXES, False), (SIXES, True), (3, True), (2, True), (1, True))
    )
    return compile_kernel(_cosines_py, f"void({arguments}, float32[:, ::1], int64, int64)")


def available() -> bool:
    return _kernels() is not None


def _digits_py(grid: np.ndarray, digits: np.ndarray, corrections: np.ndarray) -> None:
    """grid (n, w) int16 into digits (n, DIGITS, w) int8, high first, and corrections
    (n, DIGITS) int32 = 128 times each digit's sum."""
    count, width = grid.shape
    for i in range(count):
        high_sum = low_sum = 0
        for k in range(width):
            value = np.int32(grid[i, k])
            low = ((value + 128) & 255) - 128
            high = (value - low) >> 8  # |value| <= 2**14, so within [-64, 64]
            digits[i, 0, k], digits[i, 1, k] = high, low
            high_sum += high
            low_sum += low
        corrections[i, 0], corrections[i, 1] = 128 * high_sum, 128 * low_sum


@functools.cache
def _digits_kernel() -> Callable[..., Any] | None:
    # A kernel: numpy's five steps took 14.3 us for one row, this 2.2 (AMD EPYC Zen 3).
    return compile_kernel(_digits_py, "void(int16[:, ::1], int8[:, :, ::1], int32[:, ::1])")


def split_digits(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(words (n, DIGITS, w / 4) int32 of four signed bytes each, high digit first;
    corrections (n, DIGITS) int32) of a grid (n, w) int16."""
    kernel = _digits_kernel()
    assert kernel is not None, "split_digits needs numba"
    digits = np.empty((grid.shape[0], DIGITS, grid.shape[1]), dtype=np.int8)  # (n, DIGITS, w)
    corrections = np.empty((grid.shape[0], DIGITS), dtype=np.int32)
    kernel(grid, digits, corrections)
    return digits.view(np.int32), corrections


def digits_of(rows: np.ndarray, groups: int) -> Digits:
    """Rows (n, dim) float32 on their grid, for panels of `groups` (dim / 4, rounded up)."""
    grid, factors = grid_of(rows, groups * 4)  # (n, 4 g) int16, (n,) float64
    return Digits(*split_digits(grid), factors)


def integer_cosines(
    digits: Digits, panels: np.ndarray, scales: np.ndarray, out: np.ndarray, start: int, stop: int
) -> None:
    """out[:, start:stop] = the rows of `digits` . the anchors of lay_out's panels times their
    scales (count, WIDTH); `start` a multiple of WIDTH."""
    kernel = _kernels()
    assert kernel is not None, "integer_cosines needs numba and AVX-512 VNNI"
    first, end = start // WIDTH, -(-stop // WIDTH)
    kernel(*digits, panels, scales, out, first, end)
