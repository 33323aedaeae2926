"""Search candidates as Eq. 7 rescoring (models/rescoring.py) sees them: their ids, their
cosines to the query, and their embeddings, read only where a rank vector needs them.

faiss has already computed every candidate's inner product with the query, and most
candidates never need a rank vector (rescoring's bounds rule them out, or their rank codes
score them). Copying all 100 embeddings out of an IVF over 1M documents cost 0.15-0.19 ms of
a 2.1-2.3 ms search, and computing their cosines again 0.05 ms (AMD EPYC Zen 4, load 0.7), a
quarter of what the approximate path adds to cosine. So on CPU a search keeps faiss's
scores and reads embeddings later, under the index's lock (models/index.py): `from_scores`.

Two float32 sums of the same products may differ in their last bits, so bounds built on these
cosines widen by `cosine_error`, and rescoring stays exact whichever sum it was given.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from models.cpu_products import row_dots


class CandidatesChangedError(Exception):
    """A write reached the index after the candidates were found, before an embedding was read:
    their cosines may describe replaced or removed documents."""


def cosine_error(dim: int) -> float:
    """How far two float32 inner products of the same unit vectors (dim,) can lie apart.

    Each lies within gamma_dim * sum|x_i y_i| of the exact value whatever the order of its
    additions, gamma_dim = dim u / (1 - dim u) and u = 2**-24 (Higham, "Accuracy and Stability
    of Numerical Algorithms", 2nd ed., 2002, Section 3.1), and sum|x_i y_i| <= |x| |y|: 1 up to
    the vectors' own rounding. The 1 % covers both excesses over dim u.
    """
    return 2.02 * dim * 2.0**-24


@dataclass(frozen=True)
class Candidates:
    """faiss's candidates for one query; `read` may fail once a write has reached the index."""

    ids: np.ndarray  # (n,) int64
    cosine: np.ndarray  # (n,) float32, each within cosine_error of its embedding's row_dots
    cosine_error: float
    # positions (p,) into ids -> their embeddings (p, dim) float32; may raise CandidatesChangedError
    read: Callable[[np.ndarray], np.ndarray]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def cosine_low(self) -> np.ndarray:
        """The least each cosine can be (n,)."""
        return self.cosine - self.cosine_error

    @property
    def cosine_high(self) -> np.ndarray:
        """The most each cosine can be (n,)."""
        return self.cosine + self.cosine_error

    def rows(self, positions: np.ndarray, device: torch.device) -> torch.Tensor:
        """The embeddings (p, dim) of candidates at `positions` (p,), on `device`. numpy, not
        torch, selects rows on CPU: torch's indexing of even a dozen rows runs an OpenMP
        region, whose workers then spin on the core that models/spare_core.py's helper needs
        (at N = 300k IVF the approximate path took 3.9 ms instead of 2.3)."""
        return torch.from_numpy(self.read(positions)).to(device)


def with_embeddings(ids: np.ndarray, vectors: np.ndarray, query: np.ndarray) -> Candidates:
    """Candidates whose embeddings `vectors` (n, dim) are read already; their cosines are
    computed from them, against `query` (dim,)."""
    cosine = row_dots(torch.from_numpy(vectors), torch.from_numpy(query)).numpy()  # (n,)
    return from_scores(ids, cosine, vectors.shape[1], vectors.__getitem__)


def from_scores(
    ids: np.ndarray, cosine: np.ndarray, dim: int, read: Callable[[np.ndarray], np.ndarray]
) -> Candidates:
    """Candidates with inner products of dim-dimensional unit vectors computed on CPU by any
    float32 sum (faiss's, numpy's), `cosine` (n,), whose embeddings `read` returns."""
    return Candidates(ids, cosine, cosine_error(dim), read)
