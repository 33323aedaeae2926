"""Anchor formats: the int8 grid that RANKSERVE_ANCHOR_DTYPE=int8 rounds the anchors to."""

import pytest
import torch

from models.anchor_formats import INT8_LIMIT, hold, int8_grid


def unit_rows(rows: int, dim: int, seed: int) -> torch.Tensor:
    x = torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=1, keepdim=True)


def test_int8_anchors_are_each_a_row_of_small_integers_times_a_power_of_two() -> None:
    anchors = unit_rows(200, 64, 0)
    held = hold(anchors, "int8")
    assert held.dtype == torch.bfloat16
    grid = int8_grid(held)
    assert grid is not None
    q, scales = grid
    assert q.dtype == torch.int8 and int(q.abs().max()) <= INT8_LIMIT
    assert torch.equal(q.float() * scales[:, None], held.float())
    assert torch.equal(torch.exp2(torch.log2(scales).round()), scales)
    # Each anchor's largest value uses at least 7 bits of its grid.
    assert int(q.abs().amax(dim=1).min()) >= 64
    # Rounding to the nearest grid point: at most half a step from the anchor.
    assert bool(((held.float() - anchors).abs() <= scales[:, None] / 2).all())


def test_the_grid_of_a_held_matrix_is_found_again_and_no_other_matrix_has_one() -> None:
    anchors = unit_rows(50, 32, 1)
    held = hold(anchors, "int8")
    assert torch.equal(hold(held.float(), "int8"), held)  # rounding twice changes nothing
    assert int8_grid(held.float()) is not None
    assert int8_grid(anchors) is None
    assert int8_grid(anchors.to(torch.bfloat16)) is None
    assert int8_grid(torch.zeros(3, 4)) is not None  # all zero: on every grid


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_the_other_formats_are_plain_casts(name: str) -> None:
    anchors = unit_rows(10, 8, 2)
    assert torch.equal(hold(anchors, name), anchors.to(getattr(torch, name)))


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown anchor format"):
        hold(unit_rows(2, 4, 3), "float16")
