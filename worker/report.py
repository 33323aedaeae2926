"""A version's diagnostics (HEROS, geometry, ranking, similar pairs), written for its bundle."""

import json
from pathlib import Path

from core.bundle_manifest import REPORT_JSON
from core.settings import Settings
from models.anchors import AnchorSet
from models.encoder import Encoder
from models.evaluation.diagnostics import ScoredModel, diagnostics_report
from models.evaluation.heros import read_heros
from models.evaluation.senteval import load_sts_tasks


def write_report(
    settings: Settings, label: str, encoder: Encoder, anchors: AnchorSet, folder: Path
) -> Path:
    """Run the diagnostics on the dev sets (and the HEROS file when present) into `folder`."""
    heros = read_heros(settings.heros_data) if settings.heros_data.is_file() else None
    report = diagnostics_report(
        ScoredModel(label=label, encoder=encoder, anchors=anchors),
        sts_tasks=load_sts_tasks(settings.senteval_dir),
        heros=heros,
        lambda_inf=settings.lambda_inf,
        chart_dir=folder,
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REPORT_JSON).write_text(json.dumps(report.data, indent=2), encoding="utf-8")
    return folder
