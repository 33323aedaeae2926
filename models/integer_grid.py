"""Input rows on an integer grid, for the integer anchor products (models/vnni_products.py on
AVX-512 VNNI, models/word_products.py on AVX2).

Each row is X = round(x * 2**s), with s the largest shift that keeps |X| <= 2**14: 15 bits
below the power of two over the row's largest value. Against anchors on the int8 grid
(q * 2**e, |q| <= 127, models/anchor_formats.py) a cosine is then 2**(e - s) times the integer
sum X . q, which each product computes exactly in its own instructions and rounds to float32
once, so both give the same bits. Rounding the input moves the cosines far less than the grid
moves the anchors (models/vnni_products.py gives the figures).
"""

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from models.numba_jit import compile_kernel

SHIFT_BITS = 14  # |X| <= 2**14: an int16, or two signed bytes 256 * high + low


def _grid_py(rows: np.ndarray, grid: np.ndarray, factors: np.ndarray) -> None:
    """rows (n, dim) float32 into grid (n, width >= dim) int16 (zeros past dim) and factors
    (n,) float64 = 2**-s; a row that is not finite gets a zero grid and a NaN factor."""
    count, dim = rows.shape
    for i in range(count):
        largest, finite = 0.0, True
        for k in range(dim):
            size = abs(np.float64(rows[i, k]))
            largest = max(largest, size)
            finite = finite and math.isfinite(size)  # max() passes over a NaN
        if not finite:
            factors[i] = math.nan
            continue
        # largest < 2**exponent; an all-zero row keeps shift 0 and a zero grid.
        exponent = math.frexp(largest)[1] if largest > 0 else SHIFT_BITS
        shift = SHIFT_BITS - exponent
        unit = math.ldexp(1.0, shift)
        for k in range(dim):
            grid[i, k] = np.int16(np.rint(np.float64(rows[i, k]) * unit))
        factors[i] = math.ldexp(1.0, -shift)


@functools.cache
def _kernel() -> Callable[..., Any] | None:
    return compile_kernel(_grid_py, "void(float32[:, ::1], int16[:, ::1], float64[::1])")


def grid_of(rows: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(grid (n, width) int16, factors (n,) float64) of rows (n, dim <= width) float32."""
    kernel = _kernel()
    assert kernel is not None, "grid_of needs numba, as the integer products do"
    grid = np.zeros((rows.shape[0], width), dtype=np.int16)
    factors = np.empty(rows.shape[0], dtype=np.float64)
    kernel(rows, grid, factors)
    return grid, factors
