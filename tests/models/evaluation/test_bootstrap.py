"""The gate's paired bootstrap on synthetic cases whose answer is known."""

import numpy as np
import pytest
from scipy.stats import spearmanr

from models.evaluation.bootstrap import TaskScores, paired_bootstrap


def _task(rng: np.random.Generator, n: int, active_noise: float, candidate_noise: float):
    gold = rng.uniform(0, 5, n)
    return TaskScores(
        gold=gold,
        active=gold + rng.normal(0, active_noise, n),
        candidate=gold + rng.normal(0, candidate_noise, n),
    )


def test_difference_is_the_full_sample_difference_of_averaged_spearman():
    rng = np.random.default_rng(1)
    tasks = [_task(rng, 300, 1.0, 0.8), _task(rng, 200, 1.0, 1.2)]
    expected = np.mean(
        [
            (spearmanr(t.gold, t.candidate).statistic - spearmanr(t.gold, t.active).statistic) * 100
            for t in tasks
        ]
    )
    interval = paired_bootstrap(tasks, samples=200)
    assert interval.difference == pytest.approx(expected, abs=1e-9)
    assert interval.low <= interval.difference <= interval.high


def test_identical_models_give_a_zero_width_interval_at_zero():
    rng = np.random.default_rng(2)
    task = _task(rng, 100, 1.0, 1.0)
    same = TaskScores(task.gold, task.active, task.active.copy())
    interval = paired_bootstrap([same], samples=100)
    assert (interval.difference, interval.low, interval.high) == (0.0, 0.0, 0.0)


def test_a_clearly_better_candidate_has_a_positive_lower_bound():
    rng = np.random.default_rng(3)
    interval = paired_bootstrap([_task(rng, 1500, 2.0, 0.5)], samples=300)
    assert interval.low > 0


def test_noise_sized_gain_straddles_zero():
    # Both models are the gold plus independent noise of the same size: any difference is
    # sampling noise, and a 95 % interval must contain 0.
    rng = np.random.default_rng(4)
    interval = paired_bootstrap([_task(rng, 2000, 1.0, 1.0)], samples=500)
    assert interval.low < 0 < interval.high


def test_coverage_of_the_true_difference_is_near_the_confidence():
    # Known answer: draw many independent dev sets from one population; the 90 % interval
    # should contain the population difference in about 90 % of them.
    rng = np.random.default_rng(5)
    population = _task(rng, 200_000, 1.0, 0.9)
    truth = (
        spearmanr(population.gold, population.candidate).statistic
        - spearmanr(population.gold, population.active).statistic
    ) * 100
    covered = 0
    trials = 60
    for trial in range(trials):
        rows = rng.integers(0, 200_000, 400)
        task = TaskScores(
            population.gold[rows], population.active[rows], population.candidate[rows]
        )
        interval = paired_bootstrap([task], samples=300, confidence=0.9, seed=trial)
        covered += interval.low <= truth <= interval.high
    assert 0.75 <= covered / trials <= 1.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="at least one task"):
        paired_bootstrap([])
    one = TaskScores(np.array([1.0]), np.array([1.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="two or more pairs"):
        paired_bootstrap([one])
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([_task(np.random.default_rng(0), 10, 1, 1)], confidence=1.5)
