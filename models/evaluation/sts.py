"""STS evaluation as in SentEval: Spearman x 100 between gold and predicted scores."""

from collections.abc import Callable, Sequence
from enum import StrEnum

import numpy as np
from scipy.stats import spearmanr

from models.anchors import AnchorSet
from models.encoder import Encoder
from models.evaluation.senteval import StsTask
from models.scoring import score_pairs

PRIMARY_METRIC = "avg"  # mean over the benchmark tasks present; the promotion gate compares it


class Scoring(StrEnum):
    COSINE = "cosine"
    RANK = "rank"
    BLEND = "blend"


# Given pairs, the predicted similarity of each pair under every requested scoring.
PairScorer = Callable[[list[tuple[str, str]]], dict[Scoring, np.ndarray]]


def spearman_x100(gold: np.ndarray, predicted: np.ndarray) -> float:
    if len(gold) < 2:
        raise ValueError("Spearman needs at least two scored pairs")
    return float(spearmanr(gold, predicted).statistic * 100)


def evaluate_sts(
    tasks: Sequence[StsTask], scorer: PairScorer, scorings: Sequence[Scoring]
) -> dict[Scoring, dict[str, float]]:
    """Per scoring: Spearman x 100 for each task, plus `avg` over the benchmark tasks."""
    results: dict[Scoring, dict[str, float]] = {scoring: {} for scoring in scorings}
    for task in tasks:
        predicted = scorer(task.pairs)
        for scoring in scorings:
            results[scoring][task.name] = spearman_x100(task.gold, predicted[scoring])
    benchmark = [task.name for task in tasks if task.in_average]
    for per_task in results.values():
        per_task[PRIMARY_METRIC] = float(np.mean([per_task[name] for name in benchmark]))
    return results


def model_scorer(
    encoder: Encoder, anchors: AnchorSet, lambda_inf: float, *, progress: bool = False
) -> PairScorer:
    """A PairScorer over an encoder and its anchor set (Eq. 7 for `blend`)."""

    def score(pairs: list[tuple[str, str]]) -> dict[Scoring, np.ndarray]:
        scores = score_pairs(encoder, anchors, pairs, progress=progress)
        return {
            Scoring.COSINE: scores.cosine.cpu().numpy(),
            Scoring.RANK: scores.rank.cpu().numpy(),
            Scoring.BLEND: scores.blended(lambda_inf).cpu().numpy(),
        }

    return score
