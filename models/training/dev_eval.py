"""Evaluation of a model on the dev sets (STS-B dev, SICK trial): its per-pair predictions,
which the promotion gate resamples, and the Spearman metrics derived from them.

Cosine and Eq. 7 (lambda_inf z_i.z_j + (1 - lambda_inf) cos), with rank vectors z computed by
the evaluated encoder itself over its own embedding of the anchor corpus (RankEncoder Sec. 3.6).
"""

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.anchors import load_anchor_set
from models.atomic import atomic_write_bytes
from models.cache_paths import CachePaths
from models.checksums import sha256_file, sha256_texts
from models.encoder import Encoder
from models.evaluation.senteval import load_sts_tasks
from models.evaluation.sts import PRIMARY_METRIC, Scoring, model_scorer, spearman_x100

DEV_TASKS = ("STSBenchmark-dev", "SICKRelatedness-trial")
SCORINGS = (Scoring.COSINE, Scoring.BLEND)


@dataclass(frozen=True)
class DevSetup:
    data_dir: Path  # SentEval layout; only its dev splits are read
    anchor_corpus: Path
    anchor_count: int | None
    anchor_seed: int | None
    lambda_inf: float
    cache_dir: Path | None


@dataclass(frozen=True)
class DevPredictions:
    task: str
    gold: np.ndarray  # (n,)
    scores: dict[Scoring, np.ndarray]  # scoring -> (n,) predicted similarity of each pair


def dev_predictions(
    encoder: Encoder, setup: DevSetup, *, progress: bool = False
) -> list[DevPredictions]:
    """Every dev pair's cosine and Eq. 7 score by `encoder`, per task.

    Cached on disk by encoder cache key (checksum and backend), dev pairs and scoring setup:
    every job that compares against one model reads the same predictions without re-encoding
    them.
    """
    tasks = [task for task in load_sts_tasks(setup.data_dir) if task.name in DEV_TASKS]
    if not tasks:
        raise FileNotFoundError(f"{setup.data_dir.name}: neither STS-B dev nor SICK trial present")
    key = {
        "encoder": encoder.cache_key,
        "pairs": sha256_texts(a + "\t" + b for task in tasks for a, b in task.pairs),
        "gold": sha256_texts(str(g) for task in tasks for g in task.gold.tolist()),
        "corpus": sha256_file(setup.anchor_corpus),
        "anchors": [setup.anchor_count, setup.anchor_seed],
        "lambda_inf": setup.lambda_inf,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    cache = (
        CachePaths(setup.cache_dir).dev_predictions / f"{digest}.npz" if setup.cache_dir else None
    )
    if cache is not None and cache.is_file():
        with np.load(cache, allow_pickle=False) as stored:
            return [
                DevPredictions(
                    task.name, task.gold, {s: stored[f"{task.name}/{s}"] for s in SCORINGS}
                )
                for task in tasks
            ]
    anchors = load_anchor_set(
        encoder,
        setup.anchor_corpus,
        setup.anchor_count,
        seed=setup.anchor_seed,
        cache_dir=setup.cache_dir,
    )
    scorer = model_scorer(encoder, anchors, setup.lambda_inf, progress=progress)
    predictions = []
    for task in tasks:
        scored = scorer(task.pairs)
        predictions.append(DevPredictions(task.name, task.gold, {s: scored[s] for s in SCORINGS}))
    if cache is not None:
        buffer = io.BytesIO()
        np.savez(buffer, **{f"{p.task}/{s}": p.scores[s] for p in predictions for s in SCORINGS})
        atomic_write_bytes(cache, buffer.getvalue())
    return predictions


def dev_metrics(predictions: list[DevPredictions]) -> dict[str, dict[str, float]]:
    """{"cosine": {task: Spearman x 100, ..., "avg"}, "blend": {...}}."""
    metrics: dict[str, dict[str, float]] = {}
    for scoring in SCORINGS:
        per_task = {p.task: spearman_x100(p.gold, p.scores[scoring]) for p in predictions}
        per_task[PRIMARY_METRIC] = float(np.mean(list(per_task.values())))
        metrics[str(scoring)] = per_task
    return metrics


def evaluate_dev(
    encoder: Encoder, setup: DevSetup, *, progress: bool = False
) -> dict[str, dict[str, float]]:
    """Spearman x 100 per dev task and their average, for cosine and Eq. 7."""
    return dev_metrics(dev_predictions(encoder, setup, progress=progress))
