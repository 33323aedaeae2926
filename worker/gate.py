"""The promotion gate: is the candidate better than the active version on the dev sets,
beyond what resampling the dev pairs can explain?

Both models score the same dev pairs (STS-B dev, SICK trial) with Eq. 7, the score the service
serves. The candidate's advantage in the dev average (Spearman x 100) gets a paired bootstrap
interval (models/evaluation/bootstrap.py); it is promoted when the interval's lower bound lies
above the margin (RANKSERVE_GATE_MARGIN, default 0), or when the job says `force`. The
decision, interval included, goes into the bundle's manifest.
"""

from typing import Any

from models.evaluation.bootstrap import TaskScores, paired_bootstrap
from models.evaluation.sts import PRIMARY_METRIC, Scoring
from models.training.dev_eval import DevPredictions, dev_metrics

GATED_SCORING = Scoring.BLEND  # Eq. 7, what the service serves


def primary_score(predictions: list[DevPredictions]) -> float:
    return dev_metrics(predictions)[str(GATED_SCORING)][PRIMARY_METRIC]


def gate(
    candidate: list[DevPredictions],
    active: list[DevPredictions] | None,
    *,
    active_version: str,
    margin: float,
    confidence: float,
    samples: int,
    force: bool,
) -> dict[str, Any]:
    """The decision; `active` None means the active version could not be scored here, so
    only `force` promotes."""
    decision: dict[str, Any] = {
        "metric": f"{GATED_SCORING}.{PRIMARY_METRIC}",
        "candidate": primary_score(candidate),
        "active_version": active_version,
        "active_score": None,
        "interval": None,
        "margin": margin,
        "passed": False,
        "forced": force,
    }
    if active is not None:
        if [p.task for p in active] != [p.task for p in candidate]:
            raise ValueError("the two models were scored on different dev tasks")
        tasks = [
            TaskScores(c.gold, a.scores[GATED_SCORING], c.scores[GATED_SCORING])
            for c, a in zip(candidate, active, strict=True)
        ]
        interval = paired_bootstrap(tasks, samples=samples, confidence=confidence)
        decision["active_score"] = primary_score(active)
        decision["interval"] = interval.as_dict()
        # Strictly above: a candidate identical to the active one has the interval [0, 0].
        decision["passed"] = interval.low > margin
    decision["promote"] = decision["passed"] or force
    return decision
