"""Alignment and uniformity of an embedding space (Wang and Isola, ICML 2020).

As used by RankEncoder (Table 2: base encoders against their rank vectors) and RankCSE
(Appendix H, Eq. 7-8). Both are "lower is better":

    l_align   = E_{(x, x+) ~ p_pos} ||f(x) - f(x+)||^2                  (RankCSE Eq. 7)
    l_uniform = log E_{x, y ~ p_data, i.i.d.} exp(-2 ||f(x) - f(y)||^2)   (RankCSE Eq. 8)

Positive pairs are STS-B dev pairs with a gold score of at least 4.0 (RankEncoder Section 5.5);
p_data is every distinct sentence of STS-B dev, and the uniformity expectation runs over all
pairs of distinct sentences, as in Wang and Isola's reference code (torch.pdist).

Rank vectors (RankEncoder Eq. 2-3) are unit vectors too, so both measures apply to them as they
are: ||z_i - z_j||^2 = 2 - 2 rho_ij, with rho the Spearman correlation of the anchor profiles.
"""

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.anchors import AnchorSet
from models.encoder import Encoder
from models.evaluation.senteval import StsTask

POSITIVE_MIN_GOLD = 4.0
UNIFORMITY_T = 2.0
ALIGNMENT_ALPHA = 2.0


def alignment(x: torch.Tensor, y: torch.Tensor, alpha: float = ALIGNMENT_ALPHA) -> float:
    """Mean ||x_i - y_i||^alpha over positive pairs (row i of x with row i of y); RankCSE Eq. 7."""
    if x.shape != y.shape or x.shape[0] == 0:
        raise ValueError(f"need two equal, non-empty batches of pairs, got {x.shape}, {y.shape}")
    return float((x - y).norm(dim=1).pow(alpha).mean())


def _squared_distances(x: torch.Tensor, rows: slice) -> torch.Tensor:
    """||x_i - x_j||^2 for the rows in `rows` against every row of x, through one matmul."""
    norms = (x * x).sum(dim=1)  # (n,)
    gram = x[rows] @ x.T  # (chunk, n)
    return (norms[rows, None] + norms[None, :] - 2.0 * gram).clamp_min(0.0)  # (chunk, n)


def uniformity(x: torch.Tensor, t: float = UNIFORMITY_T, chunk: int = 1024) -> float:
    """log of the mean of exp(-t ||x_i - x_j||^2) over all pairs i < j; RankCSE Eq. 8.

    Equal to Wang and Isola's `torch.pdist(x).pow(2).mul(-t).exp().mean().log()`, computed with
    a log-sum-exp over row chunks: no n(n-1)/2 vector, and no underflow for spread-out spaces.
    """
    n = x.shape[0]
    if n < 2:
        raise ValueError("uniformity needs at least two vectors")
    x = x.to(torch.float64)  # sums of millions of small exponentials
    partial = []
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        exponents = -t * _squared_distances(x, rows)  # (chunk, n)
        column = torch.arange(n, device=x.device)[None, :]
        row = torch.arange(rows.start, rows.stop, device=x.device)[:, None]
        upper = exponents.masked_fill(column <= row, -math.inf)  # keep pairs i < j only
        partial.append(torch.logsumexp(upper.flatten(), dim=0))
    pairs = n * (n - 1) / 2
    return float(torch.logsumexp(torch.stack(partial), dim=0) - math.log(pairs))


@dataclass(frozen=True)
class GeometryInputs:
    """The sentences of an STS task and the positive pairs among them, as row indices."""

    sentences: list[str]
    positives: tuple[list[int], list[int]]  # (left rows, right rows)


def geometry_inputs(task: StsTask, min_gold: float = POSITIVE_MIN_GOLD) -> GeometryInputs:
    """Distinct sentences of `task` and its pairs with gold >= min_gold."""
    sentences = list(dict.fromkeys(text for pair in task.pairs for text in pair))
    position = {text: i for i, text in enumerate(sentences)}
    keep = np.flatnonzero(task.gold >= min_gold)
    if keep.size == 0:
        raise ValueError(f"{task.name}: no pair has a gold score of at least {min_gold}")
    left = [position[task.pairs[i][0]] for i in keep]
    right = [position[task.pairs[i][1]] for i in keep]
    return GeometryInputs(sentences=sentences, positives=(left, right))


def geometry_of(vectors: torch.Tensor, inputs: GeometryInputs) -> dict[str, float]:
    left, right = inputs.positives
    return {
        "alignment": alignment(vectors[left], vectors[right]),
        "uniformity": uniformity(vectors),
    }


def evaluate_geometry(
    encoder: Encoder, anchors: AnchorSet, task: StsTask, *, label: str = ""
) -> dict[str, Any]:
    """Alignment and uniformity of the embeddings and of their rank vectors (RankEncoder Tab. 2)."""
    inputs = geometry_inputs(task)
    embeddings = encoder.encode(inputs.sentences)  # (n, dim)
    ranks = anchors.rank_vectors(embeddings)  # (n, m)
    return {
        "model": label or encoder.name,
        "task": task.name,
        "sentences": len(inputs.sentences),
        "positive_pairs": len(inputs.positives[0]),
        "anchors": anchors.count,
        "embeddings": geometry_of(embeddings, inputs),
        "rank_vectors": geometry_of(ranks, inputs),
    }
