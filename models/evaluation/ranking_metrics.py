"""Ranking tasks built from STS data (RankCSE, Liu et al. ACL 2023, Appendix G, Table 13).

"For one sentence x_i, if there are more than three sentence pairs (x_i, x_i^j) containing x_i
with similarity score label y_i^j in the dataset, we view {x_i, x_i^j, y_i^j}_{j=1..k} (k > 3)
as a sample of the ranking task." Each list is scored by Kendall's tau (tau-b, which handles the
ties that STS gold scores have) between gold and predicted similarities, and by NDCG with the
gold scores as linear gains and a log2 discount (Jarvelin and Kekalainen, 2002). Both are
averaged over lists and reported x 100, as in Table 13.

A sentence counts on either side of a pair; lists whose Kendall's tau is undefined (all gold
scores equal) or whose NDCG is undefined (all gold scores zero) are left out of that mean and
counted.
"""

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import kendalltau
from sklearn.metrics import ndcg_score

from models.evaluation.senteval import StsTask
from models.evaluation.sts import PairScorer, Scoring

MIN_PARTNERS = 4  # "more than three" scored partners


@dataclass(frozen=True)
class RankingList:
    query: str
    partners: list[str]
    gold: np.ndarray  # (k,)


def ranking_lists(
    pairs: Sequence[tuple[str, str]], gold: np.ndarray, min_partners: int = MIN_PARTNERS
) -> list[RankingList]:
    """One list per sentence that appears in at least `min_partners` scored pairs."""
    partners: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for (left, right), score in zip(pairs, gold, strict=True):
        partners[left].append((right, float(score)))
        partners[right].append((left, float(score)))
    return [
        RankingList(
            query=query,
            partners=[text for text, _ in scored],
            gold=np.asarray([score for _, score in scored], dtype=np.float64),
        )
        for query, scored in partners.items()
        if len(scored) >= min_partners
    ]


def kendall_tau(gold: np.ndarray, predicted: np.ndarray) -> float:
    """Kendall's tau-b; NaN when either side is constant."""
    return float(kendalltau(gold, predicted).statistic)


def ndcg(gold: np.ndarray, predicted: np.ndarray) -> float:
    """NDCG of the order `predicted` induces, gains = gold; NaN when every gain is zero.

    Ties in `predicted` are averaged over their orders (scikit-learn's default).
    """
    if not np.any(gold > 0):
        return math.nan
    return float(ndcg_score(gold[None, :], predicted[None, :]))


def ranking_metrics(lists: Sequence[RankingList], predicted: Sequence[np.ndarray]) -> dict:
    """Mean Kendall's tau and NDCG (x 100) over lists, with the counts behind each mean."""
    taus = np.asarray([kendall_tau(item.gold, p) for item, p in zip(lists, predicted, strict=True)])
    gains = np.asarray([ndcg(item.gold, p) for item, p in zip(lists, predicted, strict=True)])
    return {
        "kendall_tau": float(np.nanmean(taus) * 100) if np.isfinite(taus).any() else math.nan,
        "ndcg": float(np.nanmean(gains) * 100) if np.isfinite(gains).any() else math.nan,
        "lists": len(lists),
        "lists_without_tau": int(np.isnan(taus).sum()),
        "lists_without_ndcg": int(np.isnan(gains).sum()),
    }


def evaluate_ranking(
    tasks: Sequence[StsTask], scorer: PairScorer, scorings: Sequence[Scoring]
) -> dict[str, Any]:
    """Per task with at least one list, per scoring: the metrics of `ranking_metrics`."""
    results: dict[str, Any] = {}
    for task in tasks:
        lists = ranking_lists(task.pairs, task.gold)
        if not lists:
            continue
        flat = [(item.query, partner) for item in lists for partner in item.partners]
        scores = scorer(flat)
        bounds = np.cumsum([0] + [len(item.partners) for item in lists])
        results[task.name] = {
            str(scoring): ranking_metrics(
                lists,
                [scores[scoring][bounds[i] : bounds[i + 1]] for i in range(len(lists))],
            )
            for scoring in scorings
        }
    return results
