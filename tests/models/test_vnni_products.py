"""The integer anchor product on AVX-512 VNNI: exact sums of the rounded rows, in any grouping."""

import numpy as np
import pytest
import torch

from models import anchor_panels, vnni_products
from models.anchor_formats import hold, int8_grid
from models.anchor_panels import WIDTH, build_panels, panels_of
from models.cpu_products import anchor_cosines

pytestmark = pytest.mark.skipif(
    not vnni_products.available(), reason="needs numba and a CPU with AVX-512 VNNI"
)


def unit_rows(rng: np.random.Generator, rows: int, dim: int) -> torch.Tensor:
    x = torch.from_numpy(rng.standard_normal((rows, dim), dtype=np.float32))
    return x / x.norm(dim=1, keepdim=True)


def expected_cosines(rows: torch.Tensor, held: torch.Tensor) -> np.ndarray:
    """The documented arithmetic in int64 and float64: rows rounded to 2**14 at their largest
    value's power of two, times the int8 grid, each sum scaled and rounded once."""
    q, scales = int8_grid(held)  # type: ignore[misc]
    x = rows.numpy().astype(np.float64)
    exponents = np.frexp(np.abs(x).max(axis=1))[1]  # (n,) largest < 2**exponent
    shifts = vnni_products.SHIFT_BITS - exponents
    grid = np.rint(np.ldexp(x, shifts[:, None])).astype(np.int64)  # (n, dim)
    sums = grid @ q.numpy().astype(np.int64).T  # (n, m), exact
    factors = np.ldexp(1.0, -shifts)[:, None] * scales.numpy().astype(np.float64)[None, :]
    return (sums.astype(np.float64) * factors).astype(np.float32)


def test_int8_anchors_take_the_byte_layout_where_the_cpu_has_vnni() -> None:
    held = hold(unit_rows(np.random.default_rng(0), 70, 10), "int8")  # 3 panels, 3 groups of 4
    panels = panels_of(held)
    assert panels.values.dtype == np.uint8 and panels.values.shape == (3, 3, WIDTH * 4)
    q, _ = int8_grid(held)  # type: ignore[misc]
    anchor, lane = 37, 37 % WIDTH  # panel 1
    for k in range(10):
        assert int(panels.values[1, k // 4, lane * 4 + k % 4]) == int(q[anchor, k]) + 128
    assert (panels.values[1, 2, lane * 4 + 2 :: WIDTH * 4] == 128).all()  # dimensions past 10
    assert (panels.values[2, :, (70 - 2 * WIDTH) * 4 :] == 128).all()  # anchors past 70
    assert build_panels(held, bytes_for_vnni=False).values.dtype == np.int8
    float_panels = panels_of(unit_rows(np.random.default_rng(0), 70, 10))
    assert float_panels.values.dtype == np.float32  # anchors off the grid keep the float kernel


# Sixes, and what is left by threes, twos and ones; 211 anchors are one group of six panels
# and a short last panel; from column 64 (a split) the groups start at panel 2.
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6, 11, 13])
@pytest.mark.parametrize("start", [0, 2 * WIDTH])
def test_each_cosine_is_the_exact_sum_of_its_rounded_row(count: int, start: int) -> None:
    rng = np.random.default_rng(count)
    held = hold(unit_rows(rng, 211, 385), "int8")  # 385 dimensions: the last group padded
    rows = unit_rows(rng, count, 385)
    panels = panels_of(held)
    out = np.full((count, 211), np.nan, dtype=np.float32)
    columns = anchor_panels.cosines_by_columns(rows.numpy(), panels, out)
    columns(start, 211)
    expected = expected_cosines(rows, held)
    assert np.array_equal(out[:, start:], expected[:, start:])
    assert np.isnan(out[:, :start]).all()
    for i in range(count):  # a row alone has the bits it has in any batch
        assert torch.equal(anchor_cosines(rows[i : i + 1], held)[0], torch.from_numpy(expected[i]))


def test_rounding_the_rows_moves_the_cosines_far_less_than_the_int8_grid() -> None:
    rng = np.random.default_rng(1)
    anchors, rows = unit_rows(rng, 2000, 384), unit_rows(rng, 16, 384)
    held = hold(anchors, "int8")
    integer = anchor_cosines(rows, held).double()
    exact = rows.double() @ held.double().T
    grid_error = (exact - rows.double() @ anchors.double().T).abs().max()
    assert (integer - exact).abs().max() < 1e-4 < grid_error


def test_a_row_that_is_not_finite_gets_nan_cosines_and_a_zero_row_zeros() -> None:
    rng = np.random.default_rng(2)
    held = hold(unit_rows(rng, 40, 16), "int8")
    rows = unit_rows(rng, 3, 16)
    rows[1, 3] = float("nan")
    rows[2] = 0.0
    out = anchor_cosines(rows, held)
    assert torch.isnan(out[1]).all() and torch.equal(out[2], torch.zeros(40))
    assert torch.equal(out[0], anchor_cosines(rows[:1], held)[0])
