"""Eq. 7 scores of text pairs for the routes that score pairs (/similarity, /rerank,
/similarity/explain): each distinct text encoded once through the batcher, then the one pair
scorer (models/scoring.py)."""

from collections.abc import Callable
from dataclasses import dataclass, field

from models.scoring import distinct_texts
from service.batching import Batcher, Encoded
from service.engine import Engine


@dataclass(frozen=True)
class NearestAnchors:
    """The anchors of highest cosine to one text, best first: the top of its rank vector."""

    index: list[int]
    cosine: list[float]


@dataclass(frozen=True)
class ScoredPairs:
    """Per pair, in input order."""

    score: list[float]  # Eq. 7
    cosine: list[float]
    rank: list[float]
    truncated: list[bool]  # either text of the pair was cut to the model's length
    # Only with `nearest_anchors=k`: the k nearest anchors of each pair's first, second text.
    left_anchors: list[NearestAnchors] = field(default_factory=list)
    right_anchors: list[NearestAnchors] = field(default_factory=list)


async def score_text_pairs(
    engine: Engine,
    batcher: Batcher,
    pairs: list[tuple[str, str]],
    lambda_inf: float,
    *,
    check: Callable[[Encoded, list[int], list[int]], None] | None = None,
    nearest_anchors: int = 0,
) -> ScoredPairs:
    """`check(encoded, left, right)` may refuse the request once the texts are encoded (rows
    `left[k]`, `right[k]` of `encoded` are pair k's texts), before any scoring."""
    unique, left, right = distinct_texts(pairs)
    encoded = await batcher.encode(engine, unique)
    if check is not None:
        check(encoded, left, right)
    scores = await batcher.run(engine.score_pairs, encoded.embeddings, left, right)
    nearest: list[NearestAnchors] = []
    if nearest_anchors > 0:
        # From the same embeddings the rank vectors were built from: one encoding per text.
        cosines, indices = await batcher.run(
            engine.anchors.nearest, encoded.embeddings, nearest_anchors
        )
        nearest = [
            NearestAnchors(index=i, cosine=c)
            for i, c in zip(indices.tolist(), cosines.tolist(), strict=True)
        ]
    cut = encoded.truncated
    return ScoredPairs(
        score=scores.blended(lambda_inf).tolist(),
        cosine=scores.cosine.tolist(),
        rank=scores.rank.tolist(),
        truncated=[cut[a] or cut[b] for a, b in zip(left, right, strict=True)],
        left_anchors=[nearest[a] for a in left] if nearest else [],
        right_anchors=[nearest[b] for b in right] if nearest else [],
    )
