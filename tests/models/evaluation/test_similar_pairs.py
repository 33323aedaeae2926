from pathlib import Path

import numpy as np
import pytest

from models.evaluation.senteval import load_sts_tasks
from models.evaluation.similar_pairs import find_similar_task, similar_pairs_rows
from models.evaluation.sts import Scoring

GOLD = [5.0, 4.0, 3.5, 1.0, 0.5, 4.5]  # scaled: 1, .8, .7, .2, .1, .9 -> pairs 0 1 2 5 are similar
PAIRS = [(f"s{i}", f"t{i}") for i in range(len(GOLD))]


def table_scorer(columns: dict[Scoring, list[float]]):
    def score(pairs):
        return {
            scoring: np.array([values[PAIRS.index(p)] for p in pairs])
            for scoring, values in columns.items()
        }

    return score


@pytest.fixture
def stsb_tasks(tmp_path: Path):
    path = tmp_path / "STS" / "STSBenchmark" / "sts-dev.csv"
    path.parent.mkdir(parents=True)
    path.write_text(
        "".join(
            f"g\tf\t2012\t{i}\t{s}\t{a}\t{b}\n"
            for i, ((a, b), s) in enumerate(zip(PAIRS, GOLD, strict=True))
        )
    )
    return load_sts_tasks(tmp_path)


def test_table5_rows_by_hand(stsb_tasks) -> None:
    task, similar = find_similar_task(stsb_tasks, "STSBenchmark-dev")
    assert [p for p in similar.pairs] == [PAIRS[i] for i in (0, 1, 2, 5)]
    base = table_scorer(
        {
            Scoring.COSINE: [0.9, 0.7, 0.8, 0.1, 0.2, 0.6],
            Scoring.RANK: [0.95, 0.8, 0.7, 0.1, 0.05, 0.9],
            Scoring.BLEND: [0.9, 0.8, 0.7, 0.1, 0.2, 0.95],
        }
    )
    student = table_scorer(
        {Scoring.COSINE: GOLD, Scoring.RANK: GOLD, Scoring.BLEND: [-g for g in GOLD]}
    )
    rows = similar_pairs_rows(("base", base), [("student", student)], task, similar)
    assert [(r["row"], r["model"], r["scoring"]) for r in rows] == [
        ("E", "base", "cosine"),
        ("RankEncoder_E", "base", "rank"),
        ("E + Eq. 7", "base", "blend"),
        ("RankEncoder_E - retrain", "student", "cosine"),
        ("RankEncoder_E - retrain - inf", "student", "blend"),
    ]
    by_row = {r["row"]: r for r in rows}
    # similar pairs: gold ranks 4 2 1 3; cosine ranks 4 2 3 1 -> sum d^2 = 8 -> 1 - 48/60 = 0.2
    assert by_row["E"]["similar"] == pytest.approx(20.0)
    # all six pairs: gold ranks 6 4 3 2 1 5, cosine 6 4 5 1 2 3 -> sum d^2 = 10 -> 1 - 60/210
    assert by_row["E"]["all"] == pytest.approx(100 * (1 - 60 / 210))
    assert by_row["RankEncoder_E"]["similar"] == pytest.approx(100.0)
    # blend on similar pairs: ranks 3 2 1 4 against 4 2 1 3 -> sum d^2 = 2 -> 1 - 12/60
    assert by_row["E + Eq. 7"]["similar"] == pytest.approx(80.0)
    assert by_row["RankEncoder_E - retrain"]["similar"] == pytest.approx(100.0)
    assert by_row["RankEncoder_E - retrain - inf"]["all"] == pytest.approx(-100.0)
    assert {r["pairs_similar"] for r in rows} == {4}
    assert {r["pairs_all"] for r in rows} == {6}


def test_missing_similar_subset_is_an_error(stsb_tasks) -> None:
    with pytest.raises(ValueError, match="SICKRelatedness-trial"):
        find_similar_task(stsb_tasks, "SICKRelatedness-trial")
