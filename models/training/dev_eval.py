"""Before/after evaluation of a student on the dev sets (STS-B dev, SICK trial).

Cosine and Eq. 7 (lambda_inf z_i.z_j + (1 - lambda_inf) cos), with rank vectors z computed by
the evaluated encoder itself over its own embedding of the anchor corpus (RankEncoder Sec. 3.6).
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from models.anchors import load_anchor_set
from models.atomic import atomic_write_json
from models.checksums import sha256_file, sha256_texts
from models.encoder import Encoder
from models.evaluation.senteval import load_sts_tasks
from models.evaluation.sts import Scoring, evaluate_sts, model_scorer

DEV_TASKS = ("STSBenchmark-dev", "SICKRelatedness-trial")


@dataclass(frozen=True)
class DevSetup:
    data_dir: Path  # SentEval layout; only its dev splits are read
    anchor_corpus: Path
    anchor_count: int | None
    anchor_seed: int | None
    lambda_inf: float
    cache_dir: Path | None


def evaluate_dev(
    encoder: Encoder, setup: DevSetup, *, progress: bool = False
) -> dict[str, dict[str, float]]:
    """{"cosine": {task: Spearman x 100, ..., "avg"}, "blend": {...}} over the dev tasks.

    Cached on disk by encoder checksum, dev pairs and scoring setup: every run of one base
    model compares against the same numbers without re-encoding them.
    """
    tasks = [task for task in load_sts_tasks(setup.data_dir) if task.name in DEV_TASKS]
    if not tasks:
        raise FileNotFoundError(f"{setup.data_dir}: neither STS-B dev nor SICK trial present")
    key = {
        "encoder": encoder.checksum,
        "pairs": sha256_texts(a + "\t" + b for task in tasks for a, b in task.pairs),
        "gold": sha256_texts(str(g) for task in tasks for g in task.gold.tolist()),
        "corpus": sha256_file(setup.anchor_corpus),
        "anchors": [setup.anchor_count, setup.anchor_seed],
        "lambda_inf": setup.lambda_inf,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    cache = setup.cache_dir / "dev-metrics" / f"{digest}.json" if setup.cache_dir else None
    if cache is not None and cache.is_file():
        return json.loads(cache.read_text(encoding="utf-8"))
    anchors = load_anchor_set(
        encoder,
        setup.anchor_corpus,
        setup.anchor_count,
        seed=setup.anchor_seed,
        cache_dir=setup.cache_dir,
    )
    results = evaluate_sts(
        tasks,
        model_scorer(encoder, anchors, setup.lambda_inf, progress=progress),
        [Scoring.COSINE, Scoring.BLEND],
    )
    metrics = {str(scoring): per_task for scoring, per_task in results.items()}
    if cache is not None:
        atomic_write_json(cache, metrics)
    return metrics
