"""Paired bootstrap of the difference between two models' STS scores on the same pairs.

The promotion gate asks whether a candidate is better than the active model, not merely
whether its dev average is higher: on about 2,000 dev pairs a difference of 0.1 point is
noise. Each round resamples the pairs of every task with replacement (the same resample for
both models, so their shared difficulty cancels), recomputes Spearman x 100 per task, averages
over the tasks, and records candidate minus active. The percentile interval of those
differences is what the gate compares with its margin (Efron & Tibshirani, "An Introduction
to the Bootstrap", 1993, Ch. 13; Koehn, "Statistical Significance Tests for Machine
Translation Evaluation", EMNLP 2004, for the paired resampling of a test set).
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import rankdata

DEFAULT_SAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class TaskScores:
    """One dev task: gold scores and the two models' predictions, all (n,)."""

    gold: np.ndarray
    active: np.ndarray
    candidate: np.ndarray


@dataclass(frozen=True)
class Interval:
    difference: float  # candidate minus active on the full dev sets, points of Spearman x 100
    low: float
    high: float
    confidence: float
    samples: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _rowwise_spearman_x100(gold: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Spearman x 100 of each row pair; (rounds, n) inputs, average ranks for ties."""
    a = rankdata(gold, axis=1)  # (rounds, n)
    b = rankdata(predicted, axis=1)  # (rounds, n)
    a -= a.mean(axis=1, keepdims=True)
    b -= b.mean(axis=1, keepdims=True)
    denominator = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))  # (rounds,)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (a * b).sum(axis=1) / denominator
    # A resample whose gold or predictions are all tied has no correlation: count it as 0.
    return np.nan_to_num(rho, nan=0.0) * 100  # (rounds,)


def paired_bootstrap(
    tasks: Sequence[TaskScores],
    *,
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """Percentile interval of (candidate - active) of the task-averaged Spearman x 100."""
    if not tasks:
        raise ValueError("the bootstrap needs at least one task")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    full = np.zeros(1)
    rounds = np.zeros(samples)
    for task in tasks:
        n = len(task.gold)
        if n < 2 or not len(task.active) == len(task.candidate) == n:
            raise ValueError("each task needs two or more pairs scored by both models")
        whole = np.arange(n)[None, :]  # (1, n)
        picks = rng.integers(0, n, size=(samples, n))  # (samples, n)
        for rows, total in ((whole, full), (picks, rounds)):
            gold = task.gold[rows]
            total += _rowwise_spearman_x100(gold, task.candidate[rows])
            total -= _rowwise_spearman_x100(gold, task.active[rows])
    full /= len(tasks)
    rounds /= len(tasks)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(rounds, [tail, 100 - tail])
    return Interval(float(full[0]), float(low), float(high), confidence, samples)
