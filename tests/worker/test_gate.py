"""The promotion gate: the candidate's Eq. 7 dev advantage must clear the margin with its
paired bootstrap interval, or the job says `force`."""

import numpy as np
import pytest

from models.evaluation.sts import Scoring
from models.training.dev_eval import DevPredictions
from worker.gate import gate

GATE = {"margin": 0.0, "confidence": 0.95, "samples": 300}


def _model(gold: np.ndarray, noise: float, seed: int) -> list[DevPredictions]:
    """Two dev tasks whose Eq. 7 predictions are the gold plus noise of a given size."""
    rng = np.random.default_rng(seed)
    tasks = []
    for name, rows in (
        ("STSBenchmark-dev", slice(0, 1500)),
        ("SICKRelatedness-trial", slice(1500, None)),
    ):
        predicted = gold[rows] + rng.normal(0, noise, len(gold[rows]))
        tasks.append(
            DevPredictions(name, gold[rows], {Scoring.COSINE: predicted, Scoring.BLEND: predicted})
        )
    return tasks


@pytest.fixture(scope="module")
def gold() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 5, 2000)


def test_a_clearly_better_candidate_is_promoted_with_its_interval(gold):
    active, candidate = _model(gold, 1.5, 1), _model(gold, 1.0, 2)
    decision = gate(candidate, active, active_version="v1", force=False, **GATE)
    interval = decision["interval"]
    assert decision["promote"] and decision["passed"]
    assert 0 < interval["low"] <= interval["difference"] <= interval["high"]
    assert decision["candidate"] - decision["active_score"] == pytest.approx(interval["difference"])
    assert (decision["metric"], decision["active_version"]) == ("blend.avg", "v1")


def test_a_gain_within_noise_is_not_promoted(gold):
    # Same noise level, independent draws: any difference is sampling noise.
    active, candidate = _model(gold, 1.0, 3), _model(gold, 1.0, 4)
    decision = gate(candidate, active, active_version="v1", force=False, **GATE)
    assert decision["interval"]["low"] < 0 and not decision["promote"]


def test_a_margin_raises_the_bar_and_force_overrides_it(gold):
    active, candidate = _model(gold, 1.5, 1), _model(gold, 1.0, 2)
    strict = GATE | {"margin": 50.0}
    assert gate(candidate, active, active_version="v1", force=False, **strict)["promote"] is False
    forced = gate(candidate, active, active_version="v1", force=True, **strict)
    assert (forced["passed"], forced["forced"], forced["promote"]) == (False, True, True)


def test_an_identical_candidate_is_not_an_improvement(gold):
    active = _model(gold, 1.0, 5)
    decision = gate(active, active, active_version="v1", force=False, **GATE)
    assert decision["interval"]["low"] == 0.0 and not decision["promote"]


def test_an_active_version_that_cannot_be_scored_needs_force(gold):
    candidate = _model(gold, 0.1, 6)
    refused = gate(candidate, None, active_version="gone", force=False, **GATE)
    assert (refused["active_score"], refused["interval"], refused["promote"]) == (None, None, False)
    assert gate(candidate, None, active_version="gone", force=True, **GATE)["promote"] is True


def test_predictions_on_different_tasks_are_refused(gold):
    candidate = _model(gold, 1.0, 7)
    with pytest.raises(ValueError, match="different dev tasks"):
        gate(candidate, candidate[:1], active_version="v1", force=False, **GATE)
