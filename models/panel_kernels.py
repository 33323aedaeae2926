"""The CPU kernel that multiplies rows with the anchor panels of models/anchor_panels.py.

Every output is one float32 sum over the dimensions in their order, fused multiply-adds, and
nothing else, so which rows are multiplied together, or where the anchors are split between
cores, cannot change a bit (models/cpu_products.py says why that matters). The kernel runs
along the anchors: per dimension it loads a panel's 32 anchors' values (float32, bfloat16's
bits widened as they are loaded, or int8, each sum times the anchor's power of two at its end)
and adds them, times each row of a group, to sums held in registers
(models/numba_intrinsics.py). With AVX-512's 32 vector registers, rows go by eights, 8 x 32
sums in 16 registers; the rows left, or a call of fewer than eight, go across GROUP panels, by
fours across two or by twos across four, so that 16 registers of sums are in flight, not the
four that one or two rows by one panel keep, each waiting on its last multiply-add: across
panels one int8 row (a query) took 0.160 ms against 0.193 at M = 10k and 1.66 against 2.01 at
100k, two rows (a pair) 0.160 against 0.194, eleven (what an exact search verifies) 0.637
against 0.703, bfloat16 rows 1.01-1.44x (one core, Intel Xeon with AMX, load 0.9; the
sixty-ninth session in docs/benchmarks.md). AVX2 has 16 registers, which eight rows overflow,
so there rows go by threes (12 registers), then twos: 3 x 32 ran 1.96-2.16x as fast as the
eights on one core, 56-57 GFLOP/s, where 6 x 16, 4 x 16, 5 x 16 and 12 x 8 ran 1.1-2.1x (int8
anchors, 120 rows at M = 100k and 96 at 10k, AMD EPYC Zen 3, load 1.0-1.5). With AVX-512 the
eights ran 1.17-1.19x as fast as the threes on the same rows (AMD EPYC Zen 4, load 0.9).
Widening a panel to float32 once, rather than for each group of rows, is the caller's choice
(models/anchor_panels.py's WIDEN_ROWS). Each sum rounds at every step where a sum over vector
lanes rounds fewer times (largest error against float64 4e-6 here, 6e-7 there), far below the
bfloat16 rounding of the anchors themselves (4e-3 relative).

Where the compiled code has AVX-512, each panel's first pass by eights, threes or twos reads it
ahead (models/numba_intrinsics.py's read_ahead), and so does every pass across panels, the first
for fewer than eight rows. With 10 ms idle before each call, on one core at M = 10k, bfloat16
panels by eights took one or two rows 1.10-1.15x as fast as without, three 1.32-1.35x, eleven
1.41-1.45x, 64 1.09-1.12x (at 100k one or two 1.06x, eleven 1.39x); by threes 1.34-1.41x for one
to three rows, eleven 1.21-1.24x; float32 panels 1.03-1.05x for one or two rows, 1.35x for
eleven; int8 ones 1.06-1.08x and 1.58-1.65x. Back to back, the matrix in the caches, 0.95-1.06x
(Intel Xeon with AMX, a script alternating both, load 0.4-0.5). Where AVX2 runs the threes and
twos, on an AMD EPYC Zen 3, the same read-ahead slowed int8 panels, the default, to 0.79-0.89x
for one or two rows and 0.86-1.02x for three to 128, whether the matrix came from the caches or
had been pushed out of them by reading 96 MB, and bfloat16 ones to 0.86-0.97x for 64 and 128
rows (a script alternating both kernels, load 0.5-1.0): that CPU's own prefetcher already keeps
up, so there the kernel does not read ahead.
"""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from models.numba_jit import avx512, compile_kernel

WIDTH = 32  # anchors per panel: two 512-bit registers of float32
GROUP = 4  # panels the rows left by eights go across: 16 registers of sums by fours or twos

# Bound by kernel(): numba resolves what a kernel calls among the module's globals when it
# compiles the kernel, and numba is imported only then (models/numba_jit.py).
_eight_rows: Any = None  # the compiled _eight_rows_py
_three_rows: Any = None  # the compiled _three_rows_py
_two_rows: Any = None  # the compiled _two_rows_py
_fours: Any = None  # four rows across half a group of panels (_across)
_twos: Any = None  # two rows across a group of panels (_across)
_rows: Any = None  # the compiled _rows_py
_widen: Any = None  # the compiled _widen_py
as_float32: Any = None
carray: Any = None
read_ahead: Any = None
reads_ahead: Any = None  # whether the passes call read_ahead: where AVX-512 runs them
stack_float32: Any = None


def _across(rows_per_pass: int, panels_per_pass: int) -> Callable[..., None]:
    """A pass of `rows_per_pass` rows across `panels_per_pass` panels. numba takes both as
    constants, so its loops over them unroll and the sums stay in registers."""
    size = rows_per_pass * panels_per_pass * WIDTH

    def run(
        rows: np.ndarray,
        panels: np.ndarray,
        scales: np.ndarray,
        out: np.ndarray,
        panel: int,
        row: int,
    ) -> None:
        """out[row:row + R, the columns of panels panel to panel + P] = rows[row:row + R]
        (R, dim) . those panels' anchors (P, dim, WIDTH) times their scales; rows past the last
        repeat it (their outputs are written twice, alike), and columns past out's are not
        written."""
        count, dim = rows.shape
        line = WIDTH * panels.itemsize  # one dimension of a panel, in bytes
        sums = carray(stack_float32(size), (rows_per_pass, panels_per_pass, WIDTH))
        for r in range(rows_per_pass):
            for p in range(panels_per_pass):
                for lane in range(WIDTH):
                    sums[r, p, lane] = 0.0
        for k in range(dim):
            for p in range(panels_per_pass):
                if reads_ahead:
                    read_ahead(panels, ((panel + p) * dim + k) * line, line)
                for lane in range(WIDTH):
                    # An unsigned index: numba then adds no wraparound test, and the loads
                    # vectorise.
                    anchor = as_float32(panels[panel + p, k, np.uint64(lane)])
                    for r in range(rows_per_pass):
                        sums[r, p, lane] += rows[min(row + r, count - 1), k] * anchor
        for r in range(rows_per_pass):
            for p in range(panels_per_pass):
                for lane in range(WIDTH):
                    at = (panel + p) * WIDTH + lane
                    if at < out.shape[1]:
                        factor = scales[panel + p, lane]
                        out[min(row + r, count - 1), at] = sums[r, p, lane] * factor

    return run


def _two_rows_py(
    rows: np.ndarray, panel: np.ndarray, scale: np.ndarray, out: np.ndarray, first: int, begin: int
) -> None:
    """out[begin:, first:first + WIDTH] = rows[begin:] (r, dim) . the anchors of one panel
    (dim, WIDTH) times their scales (WIDTH,), two rows per pass, a short last pair repeating
    its row; the columns past out's are not written. By twos, one or two rows (a query, a
    pair) took 0.31 ms against 0.34 by fours, 0.92-0.94 against 1.03-1.05 with the matrix out
    of the caches (bfloat16, M = 10k, one script, Intel Xeon with AMX). Its own code, though
    _across(2, 1) would do: that took 1.03-1.31x as long for one or two rows by threes (one
    core, Intel Xeon with AMX, load 0.8-0.9)."""
    count, dim = rows.shape
    width = min(WIDTH, out.shape[1] - first)
    a0 = carray(stack_float32(WIDTH), (WIDTH,))
    a1 = carray(stack_float32(WIDTH), (WIDTH,))
    line = WIDTH * panel.itemsize  # one dimension of the panel, in bytes
    for i in range(begin, count, 2):
        i1 = min(i + 1, count - 1)
        for lane in range(WIDTH):
            a0[lane] = a1[lane] = 0.0
        for k in range(dim):
            if reads_ahead and i == 0:  # the panel's first pass
                read_ahead(panel, k * line, line)
            x0, x1 = rows[i, k], rows[i1, k]
            for lane in range(WIDTH):
                anchor = as_float32(panel[k, np.uint64(lane)])
                a0[lane] += x0 * anchor
                a1[lane] += x1 * anchor
        for lane in range(width):
            column = first + lane
            out[i, column], out[i1, column] = a0[lane] * scale[lane], a1[lane] * scale[lane]


def _three_rows_py(
    rows: np.ndarray, panel: np.ndarray, scale: np.ndarray, out: np.ndarray, first: int
) -> int:
    """_two_rows_py's products for the rows in whole groups of three, the widest group whose
    3 x 32 accumulators fit AVX2's registers; returns the first row left."""
    count, dim = rows.shape
    width = min(WIDTH, out.shape[1] - first)
    a0 = carray(stack_float32(WIDTH), (WIDTH,))
    a1 = carray(stack_float32(WIDTH), (WIDTH,))
    a2 = carray(stack_float32(WIDTH), (WIDTH,))
    whole = count - count % 3
    line = WIDTH * panel.itemsize  # one dimension of the panel, in bytes
    for i in range(0, whole, 3):
        for lane in range(WIDTH):
            a0[lane] = a1[lane] = a2[lane] = 0.0
        for k in range(dim):
            if reads_ahead and i == 0:  # the panel's first pass
                read_ahead(panel, k * line, line)
            x0, x1, x2 = rows[i, k], rows[i + 1, k], rows[i + 2, k]
            for lane in range(WIDTH):
                anchor = as_float32(panel[k, np.uint64(lane)])
                a0[lane] += x0 * anchor
                a1[lane] += x1 * anchor
                a2[lane] += x2 * anchor
        for lane in range(width):
            column, factor = first + lane, scale[lane]
            out[i, column], out[i + 1, column] = a0[lane] * factor, a1[lane] * factor
            out[i + 2, column] = a2[lane] * factor
    return whole


def _eight_rows_py(
    rows: np.ndarray, panel: np.ndarray, scale: np.ndarray, out: np.ndarray, first: int
) -> int:
    """_two_rows_py's products for the rows in whole groups of eight; returns the first row
    left. Eight rows share each load of the panel: 8 rows took 0.78 ms against 0.90 by fours,
    11 rows 1.15 against 1.27 (bfloat16, M = 10k, one script, AMD EPYC Zen 4)."""
    count, dim = rows.shape
    width = min(WIDTH, out.shape[1] - first)
    a0 = carray(stack_float32(WIDTH), (WIDTH,))
    a1 = carray(stack_float32(WIDTH), (WIDTH,))
    a2 = carray(stack_float32(WIDTH), (WIDTH,))
    a3 = carray(stack_float32(WIDTH), (WIDTH,))
    a4 = carray(stack_float32(WIDTH), (WIDTH,))
    a5 = carray(stack_float32(WIDTH), (WIDTH,))
    a6 = carray(stack_float32(WIDTH), (WIDTH,))
    a7 = carray(stack_float32(WIDTH), (WIDTH,))
    whole = count - count % 8
    line = WIDTH * panel.itemsize  # one dimension of the panel, in bytes
    for i in range(0, whole, 8):
        for lane in range(WIDTH):
            a0[lane] = a1[lane] = a2[lane] = a3[lane] = 0.0
            a4[lane] = a5[lane] = a6[lane] = a7[lane] = 0.0
        for k in range(dim):
            if reads_ahead and i == 0:  # the panel's first pass
                read_ahead(panel, k * line, line)
            x0, x1, x2, x3 = rows[i, k], rows[i + 1, k], rows[i + 2, k], rows[i + 3, k]
            x4, x5, x6, x7 = rows[i + 4, k], rows[i + 5, k], rows[i + 6, k], rows[i + 7, k]
            for lane in range(WIDTH):
                anchor = as_float32(panel[k, np.uint64(lane)])
                a0[lane] += x0 * anchor
                a1[lane] += x1 * anchor
                a2[lane] += x2 * anchor
                a3[lane] += x3 * anchor
                a4[lane] += x4 * anchor
                a5[lane] += x5 * anchor
                a6[lane] += x6 * anchor
                a7[lane] += x7 * anchor
        for lane in range(width):
            column, factor = first + lane, scale[lane]
            out[i, column], out[i + 1, column] = a0[lane] * factor, a1[lane] * factor
            out[i + 2, column], out[i + 3, column] = a2[lane] * factor, a3[lane] * factor
            out[i + 4, column], out[i + 5, column] = a4[lane] * factor, a5[lane] * factor
            out[i + 6, column], out[i + 7, column] = a6[lane] * factor, a7[lane] * factor
    return whole


def _widen_py(panel: np.ndarray, wide: np.ndarray) -> None:
    """wide (dim, WIDTH) float32 = panel's values, exactly (bfloat16 and int8 fit float32)."""
    for k in range(panel.shape[0]):
        for lane in range(WIDTH):
            wide[k, np.uint64(lane)] = as_float32(panel[k, np.uint64(lane)])


def _rows_py(
    rows: np.ndarray,
    panel: np.ndarray,
    scale: np.ndarray,
    out: np.ndarray,
    first: int,
    eights: bool,
) -> None:
    """Every row times one panel: by eights where `eights` (AVX-512), else by threes, and the
    rest by twos."""
    if eights:
        begin = _eight_rows(rows, panel, scale, out, first)
    else:
        begin = _three_rows(rows, panel, scale, out, first)
    _two_rows(rows, panel, scale, out, first, begin)


def _panel_cosines_py(
    rows: np.ndarray,
    panels: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
    eights: bool,
    widen: bool,
) -> None:
    """out[:, start:stop] = rows (r, dim) . anchors[start:stop]^T, from their panels
    (count, dim, WIDTH) and scales (count, WIDTH); `start` is a multiple of WIDTH. Each
    panel's rows go by eights where `eights` (AVX-512), else by threes; the rows they leave
    go across GROUP panels a pass by eights, by fours or the last two by twos (save in a last,
    shorter group), else by twos per panel. With `widen`, each panel is copied into float32
    once and every pass reads the copy."""
    wide = np.empty((panels.shape[1] if widen else 0, WIDTH), dtype=np.float32)  # (dim, WIDTH)
    count = rows.shape[0]
    whole = count - count % 8
    p, end = start // WIDTH, -(-stop // WIDTH)
    while p < end:
        if eights and not widen and whole < count and p + GROUP <= end:
            for q in range(p, p + GROUP):
                _eight_rows(rows, panels[q], scales[q], out, q * WIDTH)
            row, half = whole, GROUP // 2
            while row < count:
                if count - row > 2:  # by fours, each across half the group
                    _fours(rows, panels, scales, out, p, row)
                    _fours(rows, panels, scales, out, p + half, row)
                    row += 4
                else:
                    _twos(rows, panels, scales, out, p, row)
                    row += 2
            p += GROUP
            continue
        if widen:
            _widen(panels[p], wide)
            _rows(rows, wide, scales[p], out, p * WIDTH, eights)
        else:
            _rows(rows, panels[p], scales[p], out, p * WIDTH, eights)
        p += 1


def _signatures(template: str) -> list[str]:
    return [template.format(anchors=anchors) for anchors in ("uint16", "float32", "int8")]


@functools.cache
def kernel() -> Callable[..., Any] | None:
    """The compiled product, or None without numba. Only fused multiply-adds are allowed
    (fastmath's "contract"), not reassociation: each sum keeps the order of the dimensions
    in every compiled variant, which is what makes any grouping of rows and panels, any
    dtype's panels and any split of the anchors give the same bits."""
    global _eight_rows, _three_rows, _two_rows, _fours, _twos, _rows, _widen
    global as_float32, carray, read_ahead, reads_ahead, stack_float32
    try:
        from models import numba_intrinsics
    except ImportError:
        return None
    as_float32, carray = numba_intrinsics.as_float32, numba_intrinsics.carray
    stack_float32 = numba_intrinsics.stack_float32
    read_ahead = numba_intrinsics.read_ahead
    # numba takes the flag as a constant; its cache keys each kernel by the CPU's features.
    reads_ahead = avx512()
    flags = {"contract"}
    rows, scale, scales = "float32[:, ::1]", "float32[::1]", "float32[:, ::1]"
    _two_rows = compile_kernel(
        _two_rows_py,
        _signatures(f"void({rows}, {{anchors}}[:, ::1], {scale}, {rows}, int64, int64)"),
        fastmath=flags,
    )
    _three_rows, _eight_rows = (
        compile_kernel(
            function,
            _signatures(f"int64({rows}, {{anchors}}[:, ::1], {scale}, {rows}, int64)"),
            fastmath=flags,
        )
        for function in (_three_rows_py, _eight_rows_py)
    )
    # A pass across panels reads all of them and their scales (count, WIDTH).
    panels = f"{{anchors}}[:, :, ::1], {scales}"
    passes = _signatures(f"void({rows}, {panels}, {rows}, int64, int64)")
    _fours, _twos = (
        compile_kernel(_across(count, across), passes, fastmath=flags)
        for count, across in ((4, GROUP // 2), (2, GROUP))
    )
    _rows = compile_kernel(
        _rows_py,
        _signatures(f"void({rows}, {{anchors}}[:, ::1], {scale}, {rows}, int64, boolean)"),
        fastmath=flags,
    )
    _widen = compile_kernel(
        _widen_py, _signatures("void({anchors}[:, ::1], float32[:, ::1])"), fastmath=flags
    )
    return compile_kernel(
        _panel_cosines_py,
        _signatures(f"void({rows}, {panels}, {rows}, int64, int64, boolean, boolean)"),
        fastmath=flags,
    )
