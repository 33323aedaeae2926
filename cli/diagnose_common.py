"""Options, model loading and output helpers shared by the `rankserve diagnose` commands."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from core.loading import settings_anchors, settings_encoder
from core.settings import Settings
from models.encoder import default_model_path
from models.evaluation.diagnostics import ScoredModel
from models.evaluation.senteval import SentEvalFormatError, StsTask, load_sts_tasks

DEFAULT_MODEL = "default"  # names the packaged all-MiniLM-L6-v2 among other --model paths
ModelOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--model",
        help="sentence-transformers directory, repeatable ('default' = packaged MiniLM); "
        "default: settings model",
    ),
]
AnchorsOption = Annotated[
    int | None, typer.Option(min=2, help="Anchor sentences M; default: settings")
]
LambdaOption = Annotated[
    float | None, typer.Option("--lambda", min=0.0, max=1.0, help="Eq. 7 weight; default: settings")
]
DataDirOption = Annotated[
    Path | None, typer.Option("--data", help="SentEval-layout directory; default: bundled dev sets")
]
JsonOption = Annotated[Path | None, typer.Option("--json", help="Write the results here")]


def diagnostics_dir(settings: Settings) -> Path:
    return settings.var_dir / "diagnostics"


def load_model(settings: Settings, path: Path | None, anchors: int | None) -> ScoredModel:
    # 'default' is the packaged MiniLM itself, whatever RANKSERVE_MODEL_PATH names.
    encoder = settings_encoder(
        settings, default_model_path() if path is not None and str(path) == DEFAULT_MODEL else path
    )
    anchor_set = settings_anchors(settings, encoder, anchors)
    return ScoredModel(label=encoder.name, encoder=encoder, anchors=anchor_set)


def load_models(
    settings: Settings, paths: Sequence[Path] | None, anchors: int | None
) -> list[ScoredModel]:
    """One model per --model (the settings model when none), labels made unique."""
    models = [load_model(settings, path, anchors) for path in (paths or [settings.model_path])]
    labels = [model.label for model in models]
    return [
        ScoredModel(f"{model.label} #{k + 1}", model.encoder, model.anchors)
        if labels.count(model.label) > 1
        else model
        for k, model in enumerate(models)
    ]


def sts_tasks(settings: Settings, data: Path | None, console: Console) -> list[StsTask]:
    try:
        return load_sts_tasks(data or settings.senteval_dir)
    except SentEvalFormatError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(code=2) from None


def lambda_or_default(settings: Settings, value: float | None) -> float:
    return settings.lambda_inf if value is None else value


def rich_table(title: str, text_columns: Sequence[str], number_columns: Sequence[str]) -> Table:
    table = Table(title=title)
    for column in text_columns:
        table.add_column(column)
    for column in number_columns:
        table.add_column(column, justify="right")
    return table


def write_json(path: Path | None, payload: Any, console: Console) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))
    console.print(f"results written to {path}")
