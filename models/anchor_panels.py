"""The anchor matrix in panels, as the CPU kernel of models/panel_kernels.py reads it.

Rank vectors (Eq. 2) need the cosine of each input to every anchor, a (rows, dim) x (dim, m)
product, and each output must have the same bits whatever else is in the batch
(models/cpu_products.py says why); the kernel's sums see to that.

The anchors are copied once into panels of 32 (m / 32 panels of (dim, 32), the last padded with
zeros; bfloat16 anchors stay bfloat16, and anchors on the int8 grid of models/anchor_formats.py
go in as int8 with each anchor's power of two beside them), so the kernel reads 32 anchors'
values of one dimension at a time; where an integer product runs, int8 anchors go in its layout
instead: models/vnni_products.py's on a CPU with AVX-512 VNNI, models/word_products.py's where
the compiled code has AVX2 and no AVX-512. Both give the same bits. The panels are built on
first use of an anchor matrix (one pass over it) and kept while that tensor lives and is not
modified in place: 7.7 MB for 10k bfloat16 anchors of 384 dimensions, 77 MB at 100k, half that
on the int8 grid, beside the matrix itself.
"""

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Literal, NamedTuple

import numpy as np
import torch

from models import panel_kernels, vnni_products, word_products
from models.anchor_formats import int8_grid
from models.numba_jit import avx512
from models.panel_kernels import WIDTH

# Rows by threes from which int8 and bfloat16 panels are widened to float32 once per panel, not
# once per group: at M = 100k on one core, 16 rows took 54 ms against 61, 64 rows 156 against
# 228 and 128 rows 290 against 443 (as fast as float32 panels, 285), where 11 rows took 42
# against 40 and a single row 23 against 9 (int8; bfloat16 alike; AMD EPYC Zen 1, load 0.1-0.7).
# Rows by eights (AVX-512) widen each value once for eight rows already, and a widened copy did
# not pay: 128 int8 rows took 160-214 ms against 169-206, 64 rows 105-113 against 96-110, 16
# rows 33-50 against 18-27 (Intel Xeon with AMX, two runs, one core, load 1.0-1.4): never.
WIDEN_ROWS = 16


class Panels(NamedTuple):
    # (count, dim, WIDTH): float32, bfloat16's bits as uint16, or int8; or, for int8 anchors,
    # an integer product's layout: (count, dim / 4, WIDTH * 4) uint8 (models/vnni_products.py)
    # or (count, dim / 2, WIDTH * 2) int8 (models/word_products.py)
    values: np.ndarray
    scales: np.ndarray  # (count, WIDTH) float32: each anchor's 2**e on the int8 grid, else 1
    product: Literal["float", "vnni", "words"] = "float"  # the product the layout is for


_panels: dict[int, tuple[weakref.ref[torch.Tensor], int, Panels]] = {}
_lock = threading.Lock()


def panels_of(anchors: torch.Tensor) -> Panels:
    """The anchors (m, dim) in panels. Built once per tensor (CPU, float32 or bfloat16) and
    version of it; an inference tensor has no version, and none can change it outside
    inference mode."""
    key = id(anchors)
    version = -1 if anchors.is_inference() else anchors._version
    with _lock:  # one build at a time: at M = 100k a second copy would be 77 MB more
        entry = _panels.get(key)
        if entry is not None and entry[0]() is anchors and entry[1] == version:
            return entry[2]
        panels = build_panels(anchors)
        _panels[key] = (weakref.ref(anchors, lambda _: _panels.pop(key, None)), version, panels)
        return panels


def build_panels(anchors: torch.Tensor, *, integer: bool = True) -> Panels:
    """Anchors on their int8 grid (models/anchor_formats.py) go in as int8, at half the bytes
    of bfloat16, and, where an integer product runs and `integer` is left true, in its layout.
    torch makes the copy: numpy's transposing copy took 339 ms for 100k bfloat16 anchors,
    torch's 47-55 (AMD EPYC Zen 4)."""
    matrix = anchors.detach()
    m, dim = matrix.shape
    count = -(-m // WIDTH)
    padded_scales = torch.ones(count * WIDTH)  # (count * WIDTH,)
    grid = int8_grid(matrix)
    if grid is not None:
        matrix, scales = grid
        padded_scales[:m] = scales
        laid_out = padded_scales.view(count, WIDTH).numpy()
        if integer and vnni_products.available():
            return Panels(vnni_products.lay_out(matrix), laid_out, "vnni")
        if integer and word_products.available() and not avx512():
            return Panels(word_products.lay_out(matrix), laid_out, "words")
    elif matrix.dtype == torch.bfloat16:
        matrix = matrix.view(torch.int16)  # the bits: numpy has no bfloat16
    padded = matrix.new_zeros((count * WIDTH, dim))  # (count * WIDTH, dim)
    padded[:m] = matrix
    values = padded.view(count, WIDTH, dim).transpose(1, 2).contiguous().numpy()
    if values.dtype == np.int16:
        values = values.view(np.uint16)
    return Panels(values, padded_scales.view(count, WIDTH).numpy())


def available() -> bool:
    return panel_kernels.kernel() is not None


def cosines_by_columns(
    rows: np.ndarray, panels: Panels, out: np.ndarray
) -> Callable[[int, int], None]:
    """A function (start, stop) that sets out[:, start:stop] to the cosines of rows (r, dim)
    float32 with those anchors (start a multiple of WIDTH), by the product that the panels'
    layout is for; whatever is done once per call for the rows is done here."""
    if panels.product == "vnni":
        digits = vnni_products.digits_of(rows, panels.values.shape[1])
        return functools.partial(
            vnni_products.integer_cosines, digits, panels.values, panels.scales, out
        )
    if panels.product == "words":
        words = word_products.words_of(rows, panels.values.shape[1])
        return functools.partial(
            word_products.integer_cosines, words, panels.values, panels.scales, out
        )
    return functools.partial(panel_cosines, rows, panels, out)


def min_split_elements(panels: Panels) -> int | None:
    """The fewest elements of a product with these panels worth splitting between both cores,
    where their product measured its own (models/word_products.py); None: the default."""
    return word_products.MIN_SPLIT_ELEMENTS if panels.product == "words" else None


def panel_cosines(
    rows: np.ndarray,
    panels: Panels,
    out: np.ndarray,
    start: int,
    stop: int,
    *,
    eights: bool | None = None,
    widen: bool | None = None,
) -> None:
    """out[:, start:stop] = rows (r, dim) float32 . the anchors of panels_of (columns start to
    stop; start a multiple of WIDTH). Needs numba (`available`). `eights`: group rows by
    eights, by default where the compiled code has AVX-512; `widen`: copy each panel into
    float32 first, by default for WIDEN_ROWS rows or more by threes. Every choice gives the
    same bits."""
    kernel = panel_kernels.kernel()
    assert kernel is not None, "panel_cosines needs numba"
    eights = avx512() if eights is None else eights
    if widen is None:
        narrow = panels.values.dtype != np.float32
        widen = narrow and not eights and rows.shape[0] >= WIDEN_ROWS
    kernel(rows, panels.values, panels.scales, out, start, stop, eights, widen)
