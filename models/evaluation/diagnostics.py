"""One model version's diagnostics as a JSON-able dict plus PNG charts.

Meant for whoever publishes a version (the retraining worker): it stores `report.data` beside the
version's metrics and serves the files in `report.charts`. Everything runs on the version's own
encoder and anchor set; pass the base encoder as `base` to get the retrain rows of RankEncoder
Table 5 (the version as the student), or leave it out to get the base rows for the version.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.anchors import AnchorSet
from models.encoder import Encoder
from models.evaluation.charts import geometry_chart, heros_chart, similar_pairs_chart
from models.evaluation.geometry import evaluate_geometry
from models.evaluation.heros import HerosData, evaluate_heros
from models.evaluation.ranking_metrics import evaluate_ranking
from models.evaluation.senteval import StsTask
from models.evaluation.similar_pairs import find_similar_task, similar_pairs_rows
from models.evaluation.sts import Scoring, model_scorer

STSB_DEV = "STSBenchmark-dev"


@dataclass(frozen=True)
class ScoredModel:
    """An encoder with the anchor set it encoded itself, under a display label."""

    label: str
    encoder: Encoder
    anchors: AnchorSet


@dataclass(frozen=True)
class DiagnosticsReport:
    data: dict[str, Any]
    charts: dict[str, Path]


def diagnostics_report(
    model: ScoredModel,
    *,
    sts_tasks: Sequence[StsTask],
    heros: HerosData | None,
    lambda_inf: float,
    chart_dir: Path,
    base: ScoredModel | None = None,
) -> DiagnosticsReport:
    """HEROS (when data is given), geometry and similar pairs on STS-B dev, ranking on every
    task with lists; charts written under `chart_dir`."""
    charts: dict[str, Path] = {}
    data: dict[str, Any] = {
        "model": model.label,
        "model_checksum": model.encoder.checksum,
        "anchors": model.anchors.count,
        "lambda_inf": lambda_inf,
    }
    if heros is not None:
        result = evaluate_heros(model.encoder, model.anchors, heros, lambda_inf, label=model.label)
        data["heros"] = result.to_dict()
        charts["heros"] = heros_chart([result], chart_dir / "heros.png")
    task, similar = find_similar_task(sts_tasks, STSB_DEV)
    geometry = evaluate_geometry(model.encoder, model.anchors, task, label=model.label)
    data["geometry"] = geometry
    charts["geometry"] = geometry_chart([geometry], chart_dir / "geometry.png")
    scorer = model_scorer(model.encoder, model.anchors, lambda_inf)
    benchmark = [t for t in sts_tasks if t.in_average]
    data["ranking"] = evaluate_ranking(benchmark, scorer, list(Scoring))
    if base is None:
        rows = similar_pairs_rows((model.label, scorer), [], task, similar)
    else:
        base_scorer = model_scorer(base.encoder, base.anchors, lambda_inf)
        rows = similar_pairs_rows((base.label, base_scorer), [(model.label, scorer)], task, similar)
    data["similar_pairs"] = rows
    charts["similar_pairs"] = similar_pairs_chart(rows, chart_dir / "similar-pairs.png")
    data["charts"] = {name: path.name for name, path in charts.items()}
    return DiagnosticsReport(data=data, charts=charts)
