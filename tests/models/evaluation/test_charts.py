from pathlib import Path

import matplotlib.image
import pytest

from models.evaluation.charts import geometry_chart, heros_chart, similar_pairs_chart
from models.evaluation.heros import HerosResult, Subset
from models.evaluation.sts import Scoring


def heros_result(model: str, shift: float) -> HerosResult:
    subsets = [Subset.SYNONYM, Subset.TYPO, Subset.NEGATION_MAIN]
    means = {s: {sub: 0.5 + shift + 0.1 * k for k, sub in enumerate(subsets)} for s in Scoring}
    return HerosResult(
        model=model,
        lambda_inf=0.1,
        originals=10,
        baseline_half=5,
        baseline=dict.fromkeys(Scoring, 0.2),
        mean_raw=means,
        mean_normalised=means,
        pairs=dict.fromkeys(subsets, 10),
    )


def read_png(path: Path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(path)


def test_heros_chart_draws_one_panel_per_scoring(tmp_path: Path) -> None:
    results = [heros_result("a", 0.0), heros_result("b", -0.6)]  # b goes below zero
    one = read_png(heros_chart(results, tmp_path / "one.png", scorings=[Scoring.COSINE]))
    three = read_png(heros_chart(results, tmp_path / "sub" / "three.png", scorings=list(Scoring)))
    assert three.shape[1] > 2 * one.shape[1]  # wider: three panels side by side
    with pytest.raises(ValueError):
        heros_chart([], tmp_path / "none.png")


def test_similar_pairs_and_geometry_charts_are_written(tmp_path: Path) -> None:
    rows = [
        {"row": "E", "model": "m", "similar": 40.0},
        {"row": "RankEncoder_E", "model": "m", "similar": 42.5},
    ]
    assert read_png(similar_pairs_chart(rows, tmp_path / "similar.png")).ndim == 3
    point = {"alignment": 0.3, "uniformity": -2.0}
    geometry = [{"model": "m", "embeddings": point, "rank_vectors": point}]
    assert read_png(geometry_chart(geometry, tmp_path / "geometry.png")).ndim == 3
