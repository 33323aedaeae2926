import math

import numpy as np
import pytest

from models.evaluation.ranking_metrics import (
    evaluate_ranking,
    kendall_tau,
    ndcg,
    ranking_lists,
    ranking_metrics,
)
from models.evaluation.senteval import StsTask
from models.evaluation.sts import Scoring

# NDCG of the fully reversed order of gains 3, 2, 1 (linear gains, log2 discount):
# DCG = 1/log2(2) + 2/log2(3) + 3/log2(4); IDCG = 3/log2(2) + 2/log2(3) + 1/log2(4)
REVERSED_NDCG = (1 + 2 / math.log2(3) + 3 / 2) / (3 + 2 / math.log2(3) + 1 / 2)


def test_kendall_tau_by_hand() -> None:
    gold = np.array([3.0, 2.0, 1.0])
    assert kendall_tau(gold, np.array([0.9, 0.8, 0.7])) == pytest.approx(1.0)
    assert kendall_tau(gold, np.array([0.7, 0.8, 0.9])) == pytest.approx(-1.0)
    # one discordant pair of three: (2 - 1) / 3
    assert kendall_tau(gold, np.array([0.9, 0.7, 0.8])) == pytest.approx(1 / 3)
    assert math.isnan(kendall_tau(np.array([2.0, 2.0, 2.0]), np.array([0.1, 0.2, 0.3])))


def test_ndcg_by_hand() -> None:
    gold = np.array([3.0, 2.0, 1.0])
    assert ndcg(gold, np.array([0.9, 0.8, 0.7])) == pytest.approx(1.0)
    assert ndcg(gold, np.array([0.7, 0.8, 0.9])) == pytest.approx(REVERSED_NDCG)
    assert pytest.approx(0.79000, abs=1e-5) == REVERSED_NDCG  # the value sklearn prints
    assert math.isnan(ndcg(np.zeros(3), np.array([0.1, 0.2, 0.3])))


def test_lists_need_more_than_three_partners_on_either_side_of_a_pair() -> None:
    pairs = [("q", "a"), ("b", "q"), ("q", "c"), ("d", "q"), ("r", "a"), ("r", "b"), ("c", "r")]
    gold = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 1.0, 1.0])
    lists = ranking_lists(pairs, gold)
    assert [item.query for item in lists] == ["q"]  # r has three partners only
    assert lists[0].partners == ["a", "b", "c", "d"]
    assert lists[0].gold.tolist() == [5.0, 4.0, 3.0, 2.0]


def test_metrics_average_over_lists_and_count_undefined_ones() -> None:
    lists = ranking_lists(
        [
            ("q", "a"),
            ("q", "b"),
            ("q", "c"),
            ("q", "d"),
            ("p", "a"),
            ("p", "b"),
            ("p", "c"),
            ("p", "d"),
        ],
        np.array([4.0, 3.0, 2.0, 1.0, 2.0, 2.0, 2.0, 2.0]),
    )
    # q: perfectly ordered (tau 1, NDCG 1); p: constant gold (tau undefined, NDCG 1)
    result = ranking_metrics(
        lists, [np.array([0.9, 0.8, 0.7, 0.6]), np.array([0.1, 0.2, 0.3, 0.4])]
    )
    assert result == {
        "kendall_tau": pytest.approx(100.0),
        "ndcg": pytest.approx(100.0),
        "lists": 2,
        "lists_without_tau": 1,
        "lists_without_ndcg": 0,
    }


def test_evaluate_ranking_scores_each_list_with_the_scorer() -> None:
    table = {("q", "a"): 0.1, ("q", "b"): 0.2, ("q", "c"): 0.3, ("q", "d"): 0.4}

    def scorer(pairs):
        values = np.array([table[pair] for pair in pairs])
        return {Scoring.COSINE: values, Scoring.BLEND: -values}

    task = StsTask("T", list(table), np.array([4.0, 3.0, 2.0, 1.0]))
    no_lists = StsTask("U", [("x", "y")], np.array([1.0]))
    result = evaluate_ranking([task, no_lists], scorer, [Scoring.COSINE, Scoring.BLEND])
    assert set(result) == {"T"}
    assert result["T"]["cosine"]["kendall_tau"] == pytest.approx(-100.0)
    assert result["T"]["blend"]["kendall_tau"] == pytest.approx(100.0)
    assert result["T"]["blend"]["ndcg"] == pytest.approx(100.0)
    # cosine reverses gains 4 3 2 1: DCG = 1 + 2/log2 3 + 3/2 + 4/log2 5
    dcg = 1 + 2 / math.log2(3) + 3 / 2 + 4 / math.log2(5)
    idcg = 4 + 3 / math.log2(3) + 2 / 2 + 1 / math.log2(5)
    assert result["T"]["cosine"]["ndcg"] == pytest.approx(100 * dcg / idcg)
