"""Anchor cosines as exact integer sums on AVX2: the CPU product for int8 anchors where the
compiled code has AVX2 but not AVX-512 (models/anchor_panels.py chooses; on AVX-512 the float
kernel by eights was not measured against it).

The input rows go on the grid of models/integer_grid.py, X = round(x * 2**s) with |X| <= 2**14,
which an int16 holds whole: two dimensions of a row make one int32 word. vpmaddwd multiplies
a word, spread over eight lanes, with the same two dimensions of eight anchors (their int8 q
widened to int16 as they are loaded) and adds each lane's two products into one int32, exactly
(|X q| <= 2**21, so 384 dimensions sum below 2**31); each sum is scaled in float64 (powers of
two: exact) and rounded to float32 once. These are the integer sums of models/vnni_products.py,
so a cosine has the same bits on AVX2 and AVX-512 VNNI, and, as there, it cannot depend on the
rows beside it, on how the passes group them, or on where the anchors are split between cores.

Against the float kernel of models/panel_kernels.py on the same int8 anchors, which widens each
value to float32 and adds it with fused multiply-adds, on one core with 10 ms idle before each
call, M = 10k: 1.10-1.18x as fast for one to three rows, 1.24-1.38x for 6, 11, 64 and 128; M =
100k 1.16-1.33x and 1.24-1.29x; split between both cores as a replica does, 0.99-1.04x for one
to three rows at 10k, 1.09-1.32x at 100k, 1.15-1.46x for six or more. Back to back, the matrix
in the caches, 1.06-2.42x on one core and 1.07-1.37x split (AMD EPYC Zen 3, a script
alternating the two, load 1.0-1.2; docs/benchmarks.md, seventy-seventh session). AVX2 has no
multiply-add of integers into float sums, but one vpmaddwd does the work of two float32
multiply-adds, with no conversion.

Rows go by threes across one panel (3 x 4 vectors of 8 sums: 12 of AVX2's 16 registers, with
three for the rows' words and one for the panel's values), then the last one or two rows. A
panel holds WIDTH anchors as (dim / 2, WIDTH * 2) int8, the two dimensions of one anchor side by
side.
"""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from models.integer_grid import grid_of
from models.numba_jit import avx2, compile_kernel
from models.panel_kernels import WIDTH

THREES = 3
VECTOR = 8  # int32 sums per AVX2 register
# Below this many elements a product stays on one core (models/spare_core.py's split_range), so a
# pair for /similarity at M = 10k does. One or two rows at 10k took 0.42 ms alone against
# 0.50-0.58 split with 10 ms idle before each call, 0.10-0.17 against 0.21-0.23 back to back;
# three rows 0.56 and 0.32 against 0.57 and 0.25. One pair's whole rank part right after its
# encode took 0.742 and 0.892 ms at p50 on one core against 0.839 and 0.944 split, 0.727 and
# 0.751 against 0.810 and 0.866 back to back (scripts alternating both, 300 rounds, AMD EPYC
# Zen 3, load 0.7-1.6). The float kernel's float32 and bfloat16 panels went the other way there
# (1.254 and 0.958 ms on one core against 1.082 and 0.910), so they keep the default.
MIN_SPLIT_ELEMENTS = 24_576

# Bound by _kernel(): numba resolves what a kernel calls among the module's globals when it
# compiles the kernel, and numba is imported only then (models/numba_jit.py).
_threes: Any = None
_twos: Any = None
_ones: Any = None
madd_words: Any = None
stack_int32: Any = None


def lay_out(q: torch.Tensor) -> np.ndarray:
    """Panels (count, pairs, WIDTH * 2) int8 of int8 anchors q (m, dim): anchors past m and
    dimensions past dim padded with zeros. torch makes the transposing copy
    (models/anchor_panels.py)."""
    m, dim = q.shape
    count, pairs = -(-m // WIDTH), -(-dim // 2)
    padded = torch.zeros((count * WIDTH, pairs * 2), dtype=torch.int8)  # (count W, 2 pairs)
    padded[:m, :dim] = q
    lanes = padded.view(count, WIDTH, pairs, 2).transpose(1, 2)  # (count, pairs, WIDTH, 2)
    return lanes.contiguous().view(count, pairs, WIDTH * 2).numpy()


def _rows(rows_per_pass: int) -> Callable[..., None]:
    """A pass of `rows_per_pass` rows across one panel; numba takes it as a constant, so the
    loops over it unroll and the sums stay in registers."""
    size = rows_per_pass * WIDTH

    def run(
        words: np.ndarray,
        factors: np.ndarray,
        panels: np.ndarray,
        scales: np.ndarray,
        out: np.ndarray,
        panel: int,
        row: int,
    ) -> None:
        """out[row:row + R, the columns of the panel]; columns past out's are not written."""
        pairs = words.shape[1]
        sums = stack_int32(size)
        for i in range(size):
            sums[i] = 0
        for k in range(pairs):
            offset = np.int64((panel * pairs + k) * 2 * WIDTH)
            for v in range(WIDTH // VECTOR):
                for r in range(rows_per_pass):
                    at = r * WIDTH + v * VECTOR
                    madd_words(sums, at, panels, offset + 2 * VECTOR * v, words[row + r, k])
        for r in range(rows_per_pass):
            i = row + r
            for lane in range(WIDTH):
                column = panel * WIDTH + lane
                if column < out.shape[1]:
                    factor = factors[i] * np.float64(scales[panel, lane])
                    out[i, column] = np.float32(np.float64(sums[r * WIDTH + lane]) * factor)

    return run


def _cosines_py(
    words: np.ndarray,
    factors: np.ndarray,
    panels: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
) -> None:
    """out[:, the columns of panels start to stop], panel by panel: each stays in the L1 cache
    (12 KB at 384 dimensions) while every row goes over it."""
    count = words.shape[0]
    whole = count - count % THREES
    for panel in range(start, stop):
        for row in range(0, whole, THREES):
            _threes(words, factors, panels, scales, out, panel, row)
        if count - whole == 2:
            _twos(words, factors, panels, scales, out, panel, whole)
        elif count - whole == 1:
            _ones(words, factors, panels, scales, out, panel, whole)


@functools.cache
def _kernel() -> Callable[..., Any] | None:
    """The cosines compiled, or None without numba or without AVX2 in the code numba
    compiles."""
    global _threes, _twos, _ones, madd_words, stack_int32
    try:
        from models import numba_intrinsics
    except ImportError:
        return None
    if not avx2():
        return None
    madd_words, stack_int32 = numba_intrinsics.madd_words, numba_intrinsics.stack_int32
    arguments = "int32[:, ::1], float64[::1], int8[:, :, ::1], float32[:, ::1], float32[:, ::1]"
    _threes, _twos, _ones = (
        compile_kernel(_rows(rows), f"void({arguments}, int64, int64)") for rows in (3, 2, 1)
    )
    return compile_kernel(_cosines_py, f"void({arguments}, int64, int64)")


def available() -> bool:
    return _kernel() is not None


def words_of(rows: np.ndarray, pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """(words (n, pairs) int32, two grid values each, factors (n,) float64) of rows (n, dim)
    float32, for panels of `pairs` (dim / 2, rounded up)."""
    grid, factors = grid_of(rows, 2 * pairs)  # (n, 2 pairs) int16
    return grid.view(np.int32), factors  # little-endian: the lower dimension in the low half


def integer_cosines(
    words: tuple[np.ndarray, np.ndarray],
    panels: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
) -> None:
    """out[:, start:stop] = the rows of `words` . the anchors of lay_out's panels times their
    scales (count, WIDTH); `start` a multiple of WIDTH."""
    kernel = _kernel()
    assert kernel is not None, "integer_cosines needs numba and AVX2"
    kernel(*words, panels, scales, out, start // WIDTH, -(-stop // WIDTH))
