"""`rankserve diagnose {heros,geometry,ranking,similar-pairs,report}`: what a model considers
similar, beyond one STS number. The metrics live in models/evaluation; this module loads models,
prints tables and writes JSON and charts (default under <var>/diagnostics)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from cli.diagnose_common import (
    AnchorsOption,
    DataDirOption,
    JsonOption,
    LambdaOption,
    ModelOption,
    diagnostics_dir,
    lambda_or_default,
    load_model,
    load_models,
    rich_table,
    sts_tasks,
    write_json,
)
from core.settings import Settings, get_settings
from models.anchors import read_sentences
from models.evaluation.charts import geometry_chart, heros_chart, similar_pairs_chart
from models.evaluation.diagnostics import STSB_DEV, diagnostics_report
from models.evaluation.geometry import evaluate_geometry
from models.evaluation.heros import (
    HerosData,
    HerosFormatError,
    HerosResult,
    evaluate_heros,
    read_heros,
    write_heros,
)
from models.evaluation.heros_generate import generate_heros
from models.evaluation.ranking_metrics import evaluate_ranking
from models.evaluation.similar_pairs import find_similar_task, similar_pairs_rows
from models.evaluation.sts import Scoring, model_scorer

app = typer.Typer(
    help="Diagnostics per model: HEROS minimal pairs, alignment/uniformity, ranking metrics, "
    "similar pairs (RankEncoder Table 5).",
    no_args_is_help=True,
)


def render_heros(results: Sequence[HerosResult], scorings: Sequence[Scoring]) -> Table:
    """One row per subset, one column per (model, scoring): mean normalised similarity."""
    table = Table(title="HEROS: mean normalised similarity (HEROS Appendix D)")
    table.add_column("subset")
    table.add_column("pairs", justify="right")
    for result in results:
        for scoring in scorings:
            table.add_column(f"{result.model}\n{scoring}", justify="right")
    for subset in results[0].mean_normalised[Scoring.COSINE]:
        cells = [
            f"{result.mean_normalised[scoring][subset]:.3f}"
            for result in results
            for scoring in scorings
        ]
        table.add_row(str(subset), str(results[0].pairs[subset]), *cells)
    baseline = [f"{result.baseline[scoring]:.3f}" for result in results for scoring in scorings]
    table.add_row("[dim]baseline (raw)[/dim]", str(results[0].baseline_half ** 2), *baseline)
    return table


@app.command("heros")
def heros(
    data: Annotated[
        Path | None, typer.Option(help="heros.tsv-format file; default: the shipped sample")
    ] = None,
    generate: Annotated[
        Path | None,
        typer.Option(
            help="Sentence file (one per line): build Typo and Negation (Main) subsets from it "
            "and diagnose those instead of --data"
        ),
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option(help="Where --generate writes its TSV; default: <var>/diagnostics/"),
    ] = None,
    limit: Annotated[int, typer.Option(min=2, help="Originals --generate keeps")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of --generate's sampling and typos")] = 0,
    model: ModelOption = None,
    anchors: AnchorsOption = None,
    lambda_: LambdaOption = None,
    scoring: Annotated[
        list[Scoring] | None,
        typer.Option(help="Chart panels and table columns, repeatable; default: cosine, blend"),
    ] = None,
    chart: Annotated[
        Path | None, typer.Option(help="PNG path; default: <var>/diagnostics/heros.png")
    ] = None,
    title: Annotated[str, typer.Option(help="Chart title")] = "",
    json_out: JsonOption = None,
) -> None:
    """Mean normalised cosine and Eq. 7 similarity per HEROS subset, per model, with a chart."""
    settings = get_settings()
    console = Console()
    out_dir = diagnostics_dir(settings)
    if generate is not None and data is not None:
        console.print("[red]error:[/red] give --data or --generate, not both")
        raise typer.Exit(code=2)
    if generate is not None:
        if not generate.is_file():
            console.print(f"[red]error:[/red] {generate}: file not found")
            raise typer.Exit(code=2)
        heros_data, stats = generate_heros(read_sentences(generate), limit=limit, seed=seed)
        if len(heros_data.originals) < 2:
            console.print(f"[red]error:[/red] {generate}: too few sentences to negate ({stats})")
            raise typer.Exit(code=2)
        target = save or out_dir / f"heros-{generate.stem}.tsv"
        write_heros(target, heros_data)
        console.print(
            f"generated {stats.kept} minimal-pair rows from {generate} ({stats.eligible} "
            f"eligible of {stats.read}; {stats.no_negation} not negatable) -> {target}"
        )
    else:
        try:
            heros_data = read_heros(data or settings.heros_data)
        except HerosFormatError as error:
            console.print(f"[red]error:[/red] {error}")
            raise typer.Exit(code=2) from None
    results = _heros_results(
        settings, heros_data, model, anchors, lambda_or_default(settings, lambda_)
    )
    scorings = scoring or [Scoring.COSINE, Scoring.BLEND]
    console.print(render_heros(results, scorings))
    for note in results[0].notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    path = heros_chart(results, chart or out_dir / "heros.png", scorings=scorings, title=title)
    console.print(f"chart written to {path}")
    write_json(json_out, {"results": [r.to_dict() for r in results], "chart": str(path)}, console)


def _heros_results(
    settings: Settings,
    data: HerosData,
    paths: Sequence[Path] | None,
    anchors: int | None,
    lambda_inf: float,
) -> list[HerosResult]:
    return [
        evaluate_heros(m.encoder, m.anchors, data, lambda_inf, label=m.label)
        for m in load_models(settings, paths, anchors)
    ]


@app.command("geometry")
def geometry(
    data: DataDirOption = None,
    model: ModelOption = None,
    anchors: AnchorsOption = None,
    chart: Annotated[
        Path | None, typer.Option(help="PNG path; default: <var>/diagnostics/geometry.png")
    ] = None,
    json_out: JsonOption = None,
) -> None:
    """Alignment and uniformity (Wang and Isola) of embeddings and rank vectors on STS-B dev."""
    settings = get_settings()
    console = Console()
    task, _ = find_similar_task(sts_tasks(settings, data, console), STSB_DEV)
    results = [
        evaluate_geometry(m.encoder, m.anchors, task, label=m.label)
        for m in load_models(settings, model, anchors)
    ]
    table = rich_table(
        f"{task.name}: {results[0]['positive_pairs']} positive pairs (gold ≥ 4.0), "
        f"{results[0]['sentences']} sentences; lower is better",
        ("model", "space"),
        ("alignment", "uniformity"),
    )
    for result in results:
        for space in ("embeddings", "rank_vectors"):
            table.add_row(
                result["model"],
                f"{space.replace('_', ' ')} ({result['anchors']} anchors)"
                if space == "rank_vectors"
                else space,
                f"{result[space]['alignment']:.4f}",
                f"{result[space]['uniformity']:.4f}",
            )
    console.print(table)
    path = geometry_chart(results, chart or diagnostics_dir(settings) / "geometry.png")
    console.print(f"chart written to {path}")
    write_json(json_out, {"results": results, "chart": str(path)}, console)


@app.command("ranking")
def ranking(
    data: DataDirOption = None,
    model: ModelOption = None,
    anchors: AnchorsOption = None,
    lambda_: LambdaOption = None,
    json_out: JsonOption = None,
) -> None:
    """RankCSE Appendix G: per STS task, lists of sentences with 4+ scored partners; mean
    Kendall's tau and NDCG (x 100) of the predicted order against the gold order."""
    settings = get_settings()
    console = Console()
    tasks = [t for t in sts_tasks(settings, data, console) if t.in_average]
    lambda_inf = lambda_or_default(settings, lambda_)
    payload = {}
    table = rich_table(
        f"Ranking tasks (RankCSE App. G), x 100, lambda={lambda_inf}",
        ("model", "task", "scoring"),
        ("lists", "Kendall tau", "NDCG"),
    )
    for m in load_models(settings, model, anchors):
        scorer = model_scorer(m.encoder, m.anchors, lambda_inf)
        results = evaluate_ranking(tasks, scorer, list(Scoring))
        payload[m.label] = results
        for task_name, per_scoring in results.items():
            for scoring_name, metrics in per_scoring.items():
                table.add_row(
                    m.label,
                    task_name,
                    scoring_name,
                    str(metrics["lists"]),
                    f"{metrics['kendall_tau']:.2f}",
                    f"{metrics['ndcg']:.2f}",
                )
    if not any(payload.values()):
        console.print("[yellow]no sentence has more than three scored partners[/yellow]")
    console.print(table)
    write_json(json_out, {"lambda_inf": lambda_inf, "results": payload}, console)


@app.command("similar-pairs")
def similar_pairs(
    data: DataDirOption = None,
    model: Annotated[
        Path | None, typer.Option(help="Base encoder E; default: settings model")
    ] = None,
    student: Annotated[
        list[Path] | None, typer.Option(help="Retrained student checkpoint, repeatable")
    ] = None,
    anchors: AnchorsOption = None,
    lambda_: LambdaOption = None,
    chart: Annotated[
        Path | None, typer.Option(help="PNG path; default: <var>/diagnostics/similar-pairs.png")
    ] = None,
    json_out: JsonOption = None,
) -> None:
    """RankEncoder Table 5 / Figure 5: Spearman x 100 on STS-B dev pairs with normalised gold
    in [0.67, 1.0], for the base encoder, its rank vectors, and each student with and without
    Eq. 7."""
    settings = get_settings()
    console = Console()
    task, similar = find_similar_task(sts_tasks(settings, data, console), STSB_DEV)
    lambda_inf = lambda_or_default(settings, lambda_)
    base = load_model(settings, model or settings.model_path, anchors)
    students = load_models(settings, student, anchors) if student else []
    rows = similar_pairs_rows(
        (base.label, model_scorer(base.encoder, base.anchors, lambda_inf)),
        [(s.label, model_scorer(s.encoder, s.anchors, lambda_inf)) for s in students],
        task,
        similar,
    )
    table = rich_table(
        f"Similar pairs: {len(similar.pairs)} of {len(task.pairs)} {task.name} pairs, "
        f"Spearman x 100, lambda={lambda_inf}",
        ("row (RankEncoder Table 5)", "model", "scoring"),
        ("similar", "all pairs"),
    )
    for row in rows:
        table.add_row(
            row["row"], row["model"], row["scoring"], f"{row['similar']:.2f}", f"{row['all']:.2f}"
        )
    console.print(table)
    path = similar_pairs_chart(rows, chart or diagnostics_dir(settings) / "similar-pairs.png")
    console.print(f"chart written to {path}")
    write_json(json_out, {"lambda_inf": lambda_inf, "rows": rows, "chart": str(path)}, console)


@app.command("report")
def report(
    out: Annotated[Path, typer.Option(help="Directory for report.json and the charts")],
    model: Annotated[
        Path | None, typer.Option(help="The version's checkpoint; default: settings model")
    ] = None,
    base: Annotated[
        Path | None,
        typer.Option(help="Base encoder, making --model the retrained student in Table 5"),
    ] = None,
    heros_data: Annotated[
        Path | None, typer.Option("--heros", help="HEROS-format file; default: shipped sample")
    ] = None,
    data: DataDirOption = None,
    anchors: AnchorsOption = None,
    lambda_: LambdaOption = None,
) -> None:
    """Everything above for one model, as the worker will store it with a version."""
    settings = get_settings()
    console = Console()
    tasks = sts_tasks(settings, data, console)
    try:
        heros_rows = read_heros(heros_data or settings.heros_data)
    except HerosFormatError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(code=2) from None
    result = diagnostics_report(
        load_model(settings, model or settings.model_path, anchors),
        sts_tasks=tasks,
        heros=heros_rows,
        lambda_inf=lambda_or_default(settings, lambda_),
        chart_dir=out,
        base=load_model(settings, base, anchors) if base else None,
    )
    write_json(out / "report.json", result.data, console)
    for name, path in result.charts.items():
        console.print(f"{name}: {path}")
