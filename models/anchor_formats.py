"""How the API holds the anchor matrix (RANKSERVE_ANCHOR_DTYPE): float32, bfloat16 or int8.

The matrix is read whole by every rank vector (Eq. 2), so its bytes bound what one pair or one
query costs once the matrix has left the caches. bfloat16 halves them. `int8` rounds every
anchor to a grid of 8-bit integers times a power of two of its own, q * 2**e with |q| <= 127,
and holds the result in bfloat16, which represents each such value exactly (seven significant
bits at most). So every product, on CPU or GPU, sees one matrix of plain values, and the CPU
kernel (models/anchor_panels.py) reads its panels at one byte a value and applies 2**e to each
sum: a power of two scales a float32 rounding exactly, so the bits are those of the bfloat16
matrix's own product. On a CPU with AVX-512 VNNI, or with AVX2 and no AVX-512, the input rows
are put on a grid as well, and the product is one of integers (models/integer_grid.py).
"""

import torch

FORMATS = ("float32", "bfloat16", "int8")
INT8_LIMIT = 127


def hold(matrix: torch.Tensor, name: str) -> torch.Tensor:
    """The anchor matrix (m, dim) as the format `name` holds it."""
    if name == "float32":
        return matrix.to(torch.float32)
    if name == "bfloat16":
        return matrix.to(torch.bfloat16)
    if name == "int8":
        scales = _power_of_two_scales(matrix.to(torch.float32))  # (m, 1)
        grid = torch.round(matrix.to(torch.float32) / scales).clamp(-INT8_LIMIT, INT8_LIMIT)
        return (grid * scales).to(torch.bfloat16)  # exact: |grid| < 2**7
    raise ValueError(f"unknown anchor format {name!r}; expected one of {FORMATS}")


def int8_grid(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(q (m, dim) int8, scales (m,) float32) with matrix == q * scales[:, None] exactly, when
    every anchor lies on its int8 grid (as `hold(..., "int8")` leaves it); else None."""
    if matrix.dtype not in (torch.float32, torch.bfloat16) or not matrix.numel():
        return None
    values = matrix.to(torch.float32)
    scales = _power_of_two_scales(values)  # (m, 1)
    grid = values / scales  # exact: a power of two
    if not torch.equal(grid, torch.round(grid)) or grid.abs().max() > INT8_LIMIT:
        return None
    return grid.to(torch.int8), scales.squeeze(1)


def _power_of_two_scales(values: torch.Tensor) -> torch.Tensor:
    """Per anchor 2**e with max |value| / 2**e in [64, 128): exact, from the float exponent of
    its largest value, so a matrix already on the grid gives back its own scales."""
    largest = values.abs().amax(dim=1, keepdim=True)  # (m, 1)
    _, exponents = torch.frexp(largest)  # largest = mantissa * 2**exponent, mantissa in [0.5, 1)
    return torch.ldexp(torch.ones_like(largest), exponents - 7)  # (m, 1)
