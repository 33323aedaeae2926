import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from models.anchors import AnchorSet
from models.encoder import Encoder
from models.evaluation.geometry import alignment, evaluate_geometry, geometry_inputs, uniformity
from models.evaluation.senteval import StsTask


def test_alignment_by_hand() -> None:
    # ||(1,0)-(0,1)||^2 = 2 and ||(0,1)-(0,1)||^2 = 0 -> mean 1
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    assert alignment(x, y) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        alignment(x, y[:1])


def test_uniformity_by_hand() -> None:
    # two antipodal points: d^2 = 4 -> log exp(-8) = -8
    assert uniformity(torch.tensor([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(-8.0)
    # three points 120 degrees apart: every d^2 = 3 -> -6
    angles = torch.tensor([0.0, 2 * math.pi / 3, 4 * math.pi / 3])
    triangle = torch.stack([angles.cos(), angles.sin()], dim=1)
    assert uniformity(triangle) == pytest.approx(-6.0, abs=1e-6)
    # square: four neighbour pairs at d^2 = 2, two opposite pairs at d^2 = 4
    square = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    expected = math.log((4 * math.exp(-4) + 2 * math.exp(-8)) / 6)
    assert uniformity(square) == pytest.approx(expected)
    assert uniformity(square, chunk=1) == pytest.approx(expected)  # row chunks change nothing


def test_uniformity_matches_the_wang_isola_reference_formula() -> None:
    x = torch.nn.functional.normalize(
        torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    )
    reference = torch.pdist(x.double(), p=2).pow(2).mul(-2).exp().mean().log()
    assert uniformity(x, chunk=7) == pytest.approx(float(reference), abs=1e-9)


def test_inputs_dedupe_sentences_and_keep_gold_at_least_four() -> None:
    task = StsTask(
        "t",
        [("a", "b"), ("a", "c"), ("d", "b"), ("e", "f")],
        np.array([4.0, 3.9, 5.0, 1.0]),
    )
    inputs = geometry_inputs(task)
    assert inputs.sentences == ["a", "b", "c", "d", "e", "f"]
    assert inputs.positives == ([0, 3], [1, 1])
    with pytest.raises(ValueError, match="no pair"):
        geometry_inputs(StsTask("low", [("a", "b")], np.array([2.0])))


@pytest.mark.slow
def test_rank_vector_alignment_is_two_minus_two_spearman(
    encoder: Encoder, anchors: AnchorSet
) -> None:
    task = StsTask(
        "tiny",
        [
            ("a man is playing a guitar .", "a man plays the guitar ."),
            ("the cat sleeps on the sofa .", "a cat is sleeping on a couch ."),
            ("stocks fell sharply on monday .", "a dog runs through the snow ."),
        ],
        np.array([4.8, 4.5, 0.0]),
    )
    result = evaluate_geometry(encoder, anchors, task)
    assert (result["sentences"], result["positive_pairs"]) == (6, 2)
    # Through scipy on the raw anchor cosines: ||z_i - z_j||^2 = 2 - 2 * Spearman(i, j).
    anchor_matrix = anchors.embeddings.cpu().numpy()
    rhos = []
    for left, right in task.pairs[:2]:
        cosines = encoder.encode([left, right]).numpy() @ anchor_matrix.T
        rhos.append(spearmanr(cosines[0], cosines[1]).statistic)
    assert result["rank_vectors"]["alignment"] == pytest.approx(2 - 2 * np.mean(rhos), abs=1e-4)
    embeddings = encoder.encode([t for pair in task.pairs[:2] for t in pair]).numpy()
    direct = np.mean([np.sum((embeddings[i] - embeddings[i + 1]) ** 2) for i in (0, 2)])
    assert result["embeddings"]["alignment"] == pytest.approx(direct, abs=1e-5)
    for space in ("embeddings", "rank_vectors"):
        assert -8.0 <= result[space]["uniformity"] <= 0.0
