import numpy as np
import pytest

from models.evaluation.senteval import StsTask
from models.evaluation.sts import PRIMARY_METRIC, Scoring, evaluate_sts, spearman_x100


def fixed_scorer(table: dict[tuple[str, str], float]):
    def score(pairs):
        values = np.array([table[pair] for pair in pairs])
        return {Scoring.COSINE: values, Scoring.BLEND: -values}

    return score


def test_spearman_by_hand() -> None:
    # gold ranks 1 2 3 4, predicted ranks 1 3 2 4: sum d^2 = 2, rho = 1 - 6*2/(4*15) = 0.8
    assert spearman_x100(np.array([1, 2, 3, 4.0]), np.array([0.1, 0.3, 0.2, 0.4])) == pytest.approx(
        80.0
    )


def test_evaluate_reports_each_task_and_the_average_of_benchmark_tasks() -> None:
    a = StsTask(
        "A", [("a1", "b1"), ("a2", "b2"), ("a3", "b3"), ("a4", "b4")], np.array([1, 2, 3, 4.0])
    )
    # gold ranks 1 2 3, predicted ranks 3 2 1: rho = -1
    b = StsTask("B", [("c1", "d1"), ("c2", "d2"), ("c3", "d3")], np.array([0, 1, 2.0]))
    similar = StsTask("B-similar", b.pairs[1:], b.gold[1:], in_average=False)
    table = {
        ("a1", "b1"): 0.1, ("a2", "b2"): 0.3, ("a3", "b3"): 0.2, ("a4", "b4"): 0.4,
        ("c1", "d1"): 0.9, ("c2", "d2"): 0.5, ("c3", "d3"): 0.1,
    }  # fmt: skip
    results = evaluate_sts([a, b, similar], fixed_scorer(table), [Scoring.COSINE, Scoring.BLEND])
    cosine = results[Scoring.COSINE]
    assert cosine["A"] == pytest.approx(80.0)
    assert cosine["B"] == pytest.approx(-100.0)
    assert cosine["B-similar"] == pytest.approx(-100.0)
    assert cosine[PRIMARY_METRIC] == pytest.approx((80.0 - 100.0) / 2)  # B-similar excluded
    assert results[Scoring.BLEND]["A"] == pytest.approx(-80.0)


def test_too_few_pairs_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least two"):
        spearman_x100(np.array([1.0]), np.array([1.0]))
