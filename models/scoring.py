"""Pair scores: cosine, rank similarity (Eq. 2-3, Appendix A.1) and their Eq. 7 blend.

The one place that scores sentence pairs: /similarity, STS evaluation and HEROS all call it.
"""

from dataclasses import dataclass

import torch

from models.anchors import AnchorSet
from models.cpu_products import pair_dots
from models.encoder import Encoder
from models.ranking import DEFAULT_LAMBDA_INF, blend


@dataclass(frozen=True)
class PairScores:
    cosine: torch.Tensor  # (n,)
    rank: torch.Tensor  # (n,) Spearman correlation of the two anchor-cosine profiles

    def blended(self, lambda_inf: float = DEFAULT_LAMBDA_INF) -> torch.Tensor:
        return blend(self.cosine, self.rank, lambda_inf)  # (n,)


def distinct_texts(pairs: list[tuple[str, str]]) -> tuple[list[str], list[int], list[int]]:
    """Each distinct text once (encoded once), and where each pair's two texts sit in it."""
    unique = list(dict.fromkeys(text for pair in pairs for text in pair))
    position = {text: i for i, text in enumerate(unique)}
    return unique, [position[a] for a, _ in pairs], [position[b] for _, b in pairs]


def pair_scores(
    embeddings: torch.Tensor, ranks: torch.Tensor, left: torch.Tensor, right: torch.Tensor
) -> PairScores:
    """Scores of rows `left[k]` against `right[k]`, from unit embeddings (u, dim) and their
    normalised rank vectors (u, m); `left`, `right` are (n,) row indices."""
    return PairScores(
        cosine=pair_dots(embeddings, left, right),  # (n,)
        rank=pair_dots(ranks, left, right),  # (n,)
    )


def score_embedded_pairs(
    embeddings: torch.Tensor, anchors: AnchorSet, left: list[int], right: list[int]
) -> PairScores:
    """Scores of rows `left[k]`, `right[k]` of unit embeddings (u, dim), rank vectors taken
    against `anchors` on the anchors' device; the result is on the CPU."""
    embeddings = embeddings.to(anchors.device)  # (u, dim)
    ranks = anchors.rank_vectors(embeddings)  # (u, m)
    index = {"dtype": torch.long, "device": embeddings.device}
    scores = pair_scores(
        embeddings, ranks, torch.tensor(left, **index), torch.tensor(right, **index)
    )
    return PairScores(cosine=scores.cosine.cpu(), rank=scores.rank.cpu())


def score_pairs(
    encoder: Encoder,
    anchors: AnchorSet,
    pairs: list[tuple[str, str]],
    *,
    progress: bool = False,
) -> PairScores:
    """Encode every distinct sentence once, then score each pair."""
    unique, left, right = distinct_texts(pairs)
    embeddings = encoder.encode(unique, progress=progress)  # (u, dim)
    return score_embedded_pairs(embeddings, anchors, left, right)
