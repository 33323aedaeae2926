"""`rankserve evaluate`: STS Spearman x 100 on a SentEval-layout directory."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from core.loading import settings_anchors, settings_encoder
from core.settings import get_settings
from models.evaluation.senteval import SentEvalFormatError, load_sts_tasks
from models.evaluation.sts import PRIMARY_METRIC, Scoring, evaluate_sts, model_scorer


def render_table(results: dict[Scoring, dict[str, float]], title: str) -> Table:
    """One row per task, one column per scoring."""
    table = Table(title=title)
    table.add_column("task")
    for scoring in results:
        table.add_column(str(scoring), justify="right")
    for task in next(iter(results.values())):
        table.add_row(task, *(f"{per_task[task]:.2f}" for per_task in results.values()))
    return table


def evaluate(
    data: Annotated[
        Path | None, typer.Option(help="SentEval-layout directory; default: the bundled dev sets")
    ] = None,
    model: Annotated[
        Path | None, typer.Option(help="sentence-transformers directory; default: settings")
    ] = None,
    scoring: Annotated[
        list[Scoring] | None, typer.Option(help="Repeat to pick several; default: all three")
    ] = None,
    lambda_: Annotated[
        float | None, typer.Option("--lambda", min=0.0, max=1.0, help="Eq. 7 weight for blend")
    ] = None,
    anchors: Annotated[
        int | None, typer.Option(min=2, help="Number of anchor sentences M; default: settings")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the results here")] = None,
) -> None:
    """Spearman x 100 per STS task present, and their average, for each scoring."""
    settings = get_settings()
    console = Console()
    data_dir = data or settings.senteval_dir
    try:
        tasks = load_sts_tasks(data_dir)
    except SentEvalFormatError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(code=2) from None
    encoder = settings_encoder(settings, model)
    anchor_set = settings_anchors(settings, encoder, anchors)
    lambda_inf = settings.lambda_inf if lambda_ is None else lambda_
    scorings = scoring or list(Scoring)
    results = evaluate_sts(
        tasks, model_scorer(encoder, anchor_set, lambda_inf, progress=True), scorings
    )
    title = (
        f"{encoder.name}: Spearman x 100, {anchor_set.count} anchors, "
        f"lambda={lambda_inf} ({PRIMARY_METRIC} excludes *-similar)"
    )
    console.print(render_table(results, title))
    if json_out:
        payload = {
            "model": encoder.name,
            "model_checksum": encoder.checksum,
            "anchors": anchor_set.count,
            "lambda_inf": lambda_inf,
            "primary_metric": PRIMARY_METRIC,
            "results": {str(k): v for k, v in results.items()},
        }
        json_out.write_text(json.dumps(payload, indent=2))
