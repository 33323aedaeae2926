"""The anchor matrix in panels: its layout, its cache, and the kernel's sums."""

import gc

import numpy as np
import pytest
import torch

from models import anchor_panels, numba_jit, panel_kernels
from models.anchor_formats import hold, int8_grid
from models.anchor_panels import (
    WIDEN_ROWS,
    WIDTH,
    Panels,
    build_panels,
    panel_cosines,
    panels_of,
)
from models.cpu_products import anchor_cosines, prepare_anchors

pytestmark = pytest.mark.skipif(not anchor_panels.available(), reason="needs numba")


def unit_rows(rng: np.random.Generator, rows: int, dim: int) -> torch.Tensor:
    x = torch.from_numpy(rng.standard_normal((rows, dim), dtype=np.float32))
    return x / x.norm(dim=1, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_panels_hold_the_anchors_thirty_two_at_a_time_padded_with_zeros(
    dtype: torch.dtype,
) -> None:
    anchors = unit_rows(np.random.default_rng(0), 70, 5).to(dtype)  # (70, 5): 3 panels
    panels = panels_of(anchors).values
    assert panels.shape == (3, 5, WIDTH)
    bits = anchors.view(torch.int16).numpy().view(np.uint16) if dtype == torch.bfloat16 else None
    expected = anchors.numpy() if bits is None else bits  # (70, 5)
    assert panels.dtype == expected.dtype
    for j in (0, 31, 32, 69):
        assert np.array_equal(panels[j // WIDTH, :, j % WIDTH], expected[j])
    assert not panels[2, :, 70 - 2 * WIDTH :].any()


# By twos; eights and twos, eights and fours; threes, threes and twos. By eights, 167 anchors
# are one group of four panels, the rows left going across them, and two more panels, the last
# short; from column 64 on (a split), the group holds the short panel.
@pytest.mark.parametrize("count", [1, 2, 5, 9, 13])
@pytest.mark.parametrize("eights", [True, False])
@pytest.mark.parametrize("start", [0, 2 * WIDTH])
def test_each_sum_runs_over_the_dimensions_in_order(count: int, eights: bool, start: int) -> None:
    """The documented order: one float32 fused multiply-add per dimension, first to last,
    which fixes every bit whatever the grouping of rows and panels, by AVX-512's eights or
    AVX2's threes."""
    rng = np.random.default_rng(1)
    rows, anchors = unit_rows(rng, count, 40), unit_rows(rng, 167, 40)
    wide_rows, wide_anchors = rows.numpy().astype(np.float64), anchors.numpy().astype(np.float64)
    expected = np.zeros((count, 167), dtype=np.float32)
    for k in range(40):
        # float64 holds a float32 product exactly, so rounding the sum to float32 is the
        # fused multiply-add (bar a double rounding, about once in 2^29 sums).
        exact = expected + np.outer(wide_rows[:, k], wide_anchors[:, k])  # (count, 167) float64
        expected = exact.astype(np.float32)
    out = np.full((count, 167), np.nan, dtype=np.float32)
    panel_cosines(rows.numpy(), panels_of(anchors), out, start, 167, eights=eights)
    assert np.array_equal(out[:, start:], expected[:, start:])
    assert np.isnan(out[:, :start]).all()
    assert torch.equal(anchor_cosines(rows, anchors), torch.from_numpy(expected))


def test_the_panels_of_a_matrix_are_built_once_and_follow_in_place_changes() -> None:
    rng = np.random.default_rng(2)
    anchors, rows = unit_rows(rng, 100, 16), unit_rows(rng, 3, 16)
    assert panels_of(anchors) is panels_of(anchors)
    before = anchor_cosines(rows, anchors)
    anchors[7] = -anchors[7]  # the same tensor, a new version
    after = anchor_cosines(rows, anchors)
    assert torch.equal(after[:, 7], -before[:, 7])
    torch.testing.assert_close(after, rows @ anchors.T, atol=1e-6, rtol=0)


def test_the_panels_go_with_their_matrix() -> None:
    anchors = unit_rows(np.random.default_rng(3), 64, 8)
    panels_of(anchors)
    key = id(anchors)
    assert key in anchor_panels._panels
    del anchors
    gc.collect()
    assert key not in anchor_panels._panels


def test_preparing_a_matrix_builds_its_panels_before_any_product() -> None:
    anchors = unit_rows(np.random.default_rng(4), 64, 8).to(torch.bfloat16)
    prepare_anchors(anchors)
    assert anchor_panels._panels[id(anchors)][2] is panels_of(anchors)
    prepare_anchors(anchors.to(torch.float16))  # a dtype the kernel does not read: nothing


@pytest.mark.parametrize("eights", [True, False])
def test_anchors_on_the_int8_grid_are_read_at_a_byte_a_value_with_the_same_bits(
    eights: bool,
) -> None:
    """Eleven rows: by eights the three left go across a group of four panels, then by panel
    in the last two."""
    rng = np.random.default_rng(5)
    held = hold(unit_rows(rng, 167, 48), "int8")  # (167, 48) bfloat16 on the grid: 6 panels
    rows = unit_rows(rng, 11, 48)
    panels = build_panels(held, integer=False)  # where an integer product runs, not panels_of's
    assert panels.values.dtype == np.int8
    q, scales = int8_grid(held)  # type: ignore[misc]
    assert np.array_equal(panels.values[1, :, 3], q[WIDTH + 3].numpy())
    assert panels.scales[1, 3] == scales[WIDTH + 3] and panels.scales[5, 167 - 5 * WIDTH] == 1
    bits = held.view(torch.int16).numpy().view(np.uint16)  # the same matrix as bfloat16 panels
    wide = np.zeros((6 * WIDTH, 48), dtype=np.uint16)
    wide[:167] = bits
    bfloat16_panels = Panels(
        np.ascontiguousarray(wide.reshape(6, WIDTH, 48).transpose(0, 2, 1)),
        np.ones((6, WIDTH), dtype=np.float32),
    )
    outputs = []
    for source in (panels, bfloat16_panels):
        for widen in (False, True):  # widened once per panel, or per group of rows
            outputs.append(np.empty((11, 167), np.float32))
            panel_cosines(rows.numpy(), source, outputs[-1], 0, 167, eights=eights, widen=widen)
    for other in outputs[1:]:
        assert np.array_equal(outputs[0], other)
    torch.testing.assert_close(
        torch.from_numpy(outputs[0]), rows @ held.float().T, atol=1e-6, rtol=0
    )


def test_rows_go_by_eights_and_bytes_by_vnni_only_where_the_compiled_code_has_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The grouping follows the features numba compiles for, a user's NUMBA_CPU_FEATURES
    included, not the host's alone."""
    import numba
    from llvmlite import binding

    features = binding.get_host_cpu_features()
    checks = (numba_jit.avx512, numba_jit.avx512_vnni)
    for check in checks:
        check.cache_clear()
    try:
        assert numba_jit.avx512() is bool(features.get("avx512f", False))
        assert numba_jit.avx512_vnni() is bool(features.get("avx512vnni", False))
        for check in checks:
            check.cache_clear()
        monkeypatch.setattr(numba.config, "CPU_FEATURES", "+avx2,+fma,-avx512f")
        assert numba_jit.avx512() is False and numba_jit.avx512_vnni() is False
        for check in checks:
            check.cache_clear()
        monkeypatch.setattr(
            numba.config, "CPU_FEATURES", "+avx2,+avx512f,+avx512vnni,-prefer-256-bit"
        )
        assert numba_jit.avx512() is True and numba_jit.avx512_vnni() is True
    finally:
        for check in checks:
            check.cache_clear()


@pytest.mark.parametrize(
    ("dtype", "count", "eights", "widened"),
    [
        ("int8", WIDEN_ROWS, False, True),
        ("bfloat16", WIDEN_ROWS + 5, False, True),
        ("int8", WIDEN_ROWS - 1, False, False),  # few rows: widening costs more than it saves
        ("int8", 4 * WIDEN_ROWS, True, False),  # by eights: not measured, so never
        ("float32", 4 * WIDEN_ROWS, False, False),  # nothing to widen
    ],
)
def test_narrow_panels_are_widened_once_for_many_rows_by_threes(
    monkeypatch: pytest.MonkeyPatch, dtype: str, count: int, eights: bool, widened: bool
) -> None:
    rng = np.random.default_rng(6)
    anchors = unit_rows(rng, 40, 16)
    matrix = anchors if dtype == "float32" else hold(anchors, dtype)
    panels = build_panels(matrix, integer=False)
    calls: list[bool] = []
    monkeypatch.setattr(panel_kernels, "kernel", lambda: lambda *args: calls.append(args[-1]))
    out = np.empty((count, 40), np.float32)
    panel_cosines(unit_rows(rng, count, 16).numpy(), panels, out, 0, 40, eights=eights)
    assert calls == [widened]
