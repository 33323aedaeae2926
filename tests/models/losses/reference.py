"""Plain numpy helpers for the loss reference tests: no torch maths, loops where it matters."""

import numpy as np
import torch


def unit_rows(rng: np.random.Generator, rows: int, dim: int = 6) -> np.ndarray:
    x = rng.normal(size=(rows, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def ref_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of every row of a with every row of b, one pair at a time."""
    out = np.zeros((len(a), len(b)))
    for i in range(len(a)):
        for j in range(len(b)):
            out[i, j] = a[i] @ b[j] / (np.linalg.norm(a[i]) * np.linalg.norm(b[j]))
    return out
