"""The integer anchor products, on AVX-512 VNNI and on AVX2: exact sums of the rows put on one
grid, in any grouping, so both give the same bits."""

from collections.abc import Callable

import numpy as np
import pytest
import torch

from models import anchor_panels, cpu_products, integer_grid, vnni_products, word_products
from models.anchor_formats import hold, int8_grid
from models.anchor_panels import WIDTH, Panels, build_panels, panels_of
from models.cpu_products import anchor_cosines

PRODUCTS = {"vnni": vnni_products, "words": word_products}
needs_numba = pytest.mark.skipif(not anchor_panels.available(), reason="needs numba")


def unit_rows(rng: np.random.Generator, rows: int, dim: int) -> torch.Tensor:
    x = torch.from_numpy(rng.standard_normal((rows, dim), dtype=np.float32))
    return x / x.norm(dim=1, keepdim=True)


def reference_grid(rows: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The documented grid in int64 and float64: rows rounded to 2**14 at their largest
    value's power of two."""
    x = rows.numpy().astype(np.float64)
    exponents = np.frexp(np.abs(x).max(axis=1))[1]  # (n,) largest < 2**exponent
    shifts = integer_grid.SHIFT_BITS - exponents
    return np.rint(np.ldexp(x, shifts[:, None])).astype(np.int64), np.ldexp(1.0, -shifts)


def expected_cosines(rows: torch.Tensor, held: torch.Tensor) -> np.ndarray:
    """The integer sums of the grid with the int8 anchors, each scaled and rounded once."""
    q, scales = int8_grid(held)  # type: ignore[misc]
    grid, factors = reference_grid(rows)
    sums = grid @ q.numpy().astype(np.int64).T  # (n, m), exact
    scaled = factors[:, None] * scales.numpy().astype(np.float64)[None, :]
    return (sums.astype(np.float64) * scaled).astype(np.float32)


def default_product() -> str:
    return panels_of(hold(torch.eye(2), "int8")).product


needs_default_integer = pytest.mark.skipif(
    default_product() == "float", reason="no integer product runs by default on this CPU"
)


@needs_numba
def test_rows_go_on_the_grid_as_documented_and_a_bad_row_gets_a_nan_factor() -> None:
    rows = unit_rows(np.random.default_rng(0), 4, 9)
    rows[2] = 0.0
    rows[3, 5] = float("inf")
    grid, factors = integer_grid.grid_of(rows.numpy(), 12)
    expected, expected_factors = reference_grid(rows[:2])
    assert np.array_equal(grid[:2, :9], expected) and np.array_equal(factors[:2], expected_factors)
    assert np.abs(grid[:2]).max() <= 2**integer_grid.SHIFT_BITS and not grid[:, 9:].any()
    assert not grid[2].any() and factors[2] == 2.0**-0  # an all-zero row: zeros, shift 0
    assert not grid[3].any() and np.isnan(factors[3])


@needs_numba
def test_digits_cut_each_grid_value_into_two_signed_bytes() -> None:
    grid = np.array([[16384, -16384, 255, -129, 128, -128, 0, 12345]], dtype=np.int16)
    words, corrections = vnni_products.split_digits(grid)
    digits = words.view(np.int8).astype(np.int64)  # (1, 2, 8): high, low
    assert np.array_equal(256 * digits[0, 0] + digits[0, 1], grid[0].astype(np.int64))
    assert digits[0, 1].min() >= -128 and digits[0, 1].max() <= 127
    assert np.array_equal(corrections[0], 128 * digits[0].sum(axis=1))


@pytest.mark.skipif(not vnni_products.available(), reason="needs numba and AVX-512 VNNI")
def test_int8_anchors_take_the_byte_layout_where_the_cpu_has_vnni() -> None:
    held = hold(unit_rows(np.random.default_rng(0), 70, 10), "int8")  # 3 panels, 3 groups of 4
    panels = panels_of(held)
    assert panels.product == "vnni" and panels.values.shape == (3, 3, WIDTH * 4)
    q, _ = int8_grid(held)  # type: ignore[misc]
    anchor, lane = 37, 37 % WIDTH  # panel 1
    for k in range(10):
        assert int(panels.values[1, k // 4, lane * 4 + k % 4]) == int(q[anchor, k]) + 128
    assert (panels.values[1, 2, lane * 4 + 2 :: WIDTH * 4] == 128).all()  # dimensions past 10
    assert (panels.values[2, :, (70 - 2 * WIDTH) * 4 :] == 128).all()  # anchors past 70


def test_int8_anchors_in_pairs_of_dimensions_for_avx2() -> None:
    held = hold(unit_rows(np.random.default_rng(0), 70, 9), "int8")  # 3 panels, 5 pairs
    q, _ = int8_grid(held)  # type: ignore[misc]
    values = word_products.lay_out(q)
    assert values.dtype == np.int8 and values.shape == (3, 5, WIDTH * 2)
    anchor, lane = 37, 37 % WIDTH  # panel 1
    for k in range(9):
        assert int(values[1, k // 2, lane * 2 + k % 2]) == int(q[anchor, k])
    assert not values[1, 4, 1::2].any()  # the dimension past 9
    assert not values[2, :, (70 - 2 * WIDTH) * 2 :].any()  # anchors past 70


def test_anchors_off_the_grid_or_unasked_keep_the_float_kernel() -> None:
    rows = unit_rows(np.random.default_rng(0), 70, 10)
    assert build_panels(hold(rows, "int8"), integer=False).product == "float"
    assert panels_of(rows).product == "float"
    if vnni_products.available():
        assert default_product() == "vnni"
    elif word_products.available() and not anchor_panels.avx512():
        assert default_product() == "words"
    else:
        assert default_product() == "float"


# The passes by sixes, threes, twos and ones; 211 anchors are one group of six panels and a
# short last panel; from column 64 (a split) the passes start at panel 2.
@pytest.mark.parametrize("product", sorted(PRODUCTS))
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6, 11, 13])
@pytest.mark.parametrize("start", [0, 2 * WIDTH])
def test_each_cosine_is_the_exact_sum_of_its_rounded_row(
    product: str, count: int, start: int
) -> None:
    module = PRODUCTS[product]
    if not module.available():
        pytest.skip(f"the {product} product does not run on this CPU")
    rng = np.random.default_rng(count)
    held = hold(unit_rows(rng, 211, 385), "int8")  # 385 dimensions: the last group padded
    rows = unit_rows(rng, count, 385)
    q, scales = int8_grid(held)  # type: ignore[misc]
    padded = torch.ones(7 * WIDTH)
    padded[:211] = scales
    panels = Panels(module.lay_out(q), padded.view(7, WIDTH).numpy(), product)
    out = np.full((count, 211), np.nan, dtype=np.float32)
    anchor_panels.cosines_by_columns(rows.numpy(), panels, out)(start, 211)
    expected = expected_cosines(rows, held)
    assert np.array_equal(out[:, start:], expected[:, start:])
    assert np.isnan(out[:, :start]).all()


@needs_default_integer
@pytest.mark.parametrize("count", [1, 5, 13])
def test_a_row_alone_has_the_bits_it_has_in_any_batch(count: int) -> None:
    rng = np.random.default_rng(count)
    held = hold(unit_rows(rng, 211, 385), "int8")
    rows = unit_rows(rng, count, 385)
    expected = expected_cosines(rows, held)
    assert torch.equal(anchor_cosines(rows, held, split=True), torch.from_numpy(expected))
    for i in range(count):
        assert torch.equal(anchor_cosines(rows[i : i + 1], held)[0], torch.from_numpy(expected[i]))


@needs_default_integer
def test_rounding_the_rows_moves_the_cosines_far_less_than_the_int8_grid() -> None:
    rng = np.random.default_rng(1)
    anchors, rows = unit_rows(rng, 2000, 384), unit_rows(rng, 16, 384)
    held = hold(anchors, "int8")
    integer = anchor_cosines(rows, held).double()
    exact = rows.double() @ held.double().T
    grid_error = (exact - rows.double() @ anchors.double().T).abs().max()
    assert (integer - exact).abs().max() < 1e-4 < grid_error


@needs_default_integer
def test_a_row_that_is_not_finite_gets_nan_cosines_and_a_zero_row_zeros() -> None:
    rng = np.random.default_rng(2)
    held = hold(unit_rows(rng, 40, 16), "int8")
    rows = unit_rows(rng, 3, 16)
    rows[1, 3] = float("nan")
    rows[2] = 0.0
    out = anchor_cosines(rows, held)
    assert torch.isnan(out[1]).all() and torch.equal(out[2], torch.zeros(40))
    assert torch.equal(out[0], anchor_cosines(rows[:1], held)[0])


def test_the_avx2_product_splits_from_its_own_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    anchors, rows = unit_rows(rng, 64, 16), unit_rows(rng, 2, 16)
    thresholds: list[object] = []

    def one_core(function: Callable[[int, int], object], stop: int, **options: object) -> None:
        thresholds.append(options["min_elements"])
        function(0, stop)

    monkeypatch.setattr(cpu_products, "split_range", one_core)
    anchor_cosines(rows, hold(anchors, "int8"), split=True)
    anchor_cosines(rows, anchors, split=True)
    words = default_product() == "words"
    assert thresholds == [word_products.MIN_SPLIT_ELEMENTS if words else None, None]
