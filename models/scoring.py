"""Pair scores for a list of sentence pairs: cosine, rank similarity, and their Eq. 7 blend."""

from dataclasses import dataclass

import torch

from models.anchors import AnchorSet
from models.encoder import Encoder
from models.ranking import DEFAULT_LAMBDA_INF, blend, paired_similarity


@dataclass(frozen=True)
class PairScores:
    cosine: torch.Tensor  # (n,)
    rank: torch.Tensor  # (n,) Spearman correlation of the two anchor-cosine profiles

    def blended(self, lambda_inf: float = DEFAULT_LAMBDA_INF) -> torch.Tensor:
        return blend(self.cosine, self.rank, lambda_inf)  # (n,)


def score_pairs(
    encoder: Encoder,
    anchors: AnchorSet,
    pairs: list[tuple[str, str]],
    *,
    progress: bool = False,
) -> PairScores:
    """Encode every distinct sentence once, then score each pair."""
    unique = list(dict.fromkeys(text for pair in pairs for text in pair))
    position = {text: i for i, text in enumerate(unique)}
    embeddings = encoder.encode(unique, progress=progress)  # (u, dim)
    ranks = anchors.rank_vectors(embeddings)  # (u, m)
    left = torch.tensor([position[a] for a, _ in pairs], device=embeddings.device, dtype=torch.long)
    right = torch.tensor(
        [position[b] for _, b in pairs], device=embeddings.device, dtype=torch.long
    )
    return PairScores(
        cosine=paired_similarity(embeddings[left], embeddings[right]),
        rank=paired_similarity(ranks[left], ranks[right]),
    )
