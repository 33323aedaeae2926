"""`rankserve train`: train a student encoder and compare it with its base on the dev sets."""

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from core.loading import settings_dev_setup
from core.settings import get_settings
from models.training.config import Recipe, TrainConfig
from models.training.methods import Method, method_config, method_spec
from models.training.trainer import ResumeMismatchError
from models.training.trainer import train as run_training

DEFAULT_TEACHER = "default"  # the packaged all-MiniLM-L6-v2


def _teacher_paths(spec: str | None) -> list[Path | None]:
    if not spec:
        return []
    return [None if part == DEFAULT_TEACHER else Path(part) for part in spec.split(",") if part]


TASK_LABELS = {"STSBenchmark-dev": "STS-B dev", "SICKRelatedness-trial": "SICK trial"}


def render_comparison(metadata: dict) -> Table:
    """One row per dev task and average: base and student, cosine and Eq. 7; the last column
    is the student's Eq. 7 gain over the base model's cosine, the number the target names."""
    metrics = metadata["dev_metrics"]
    table = Table(
        title=f"{metadata['method']}: Spearman x 100 on dev sets, "
        f"{metrics['setup']['anchors']} anchors, lambda={metrics['setup']['lambda_inf']}"
    )
    for column in ("task", "base cos", "base Eq7", "student cos", "student Eq7", "gain"):
        table.add_column(column, justify="left" if column == "task" else "right")
    base, student = metrics["base"], metrics["student"]
    for task in base["cosine"]:
        table.add_row(
            TASK_LABELS.get(task, task),
            f"{base['cosine'][task]:.2f}",
            f"{base['blend'][task]:.2f}",
            f"{student['cosine'][task]:.2f}",
            f"{student['blend'][task]:.2f}",
            f"{student['blend'][task] - base['cosine'][task]:+.2f}",
        )
    return table


def train(
    method: Annotated[Method, typer.Option(help="Training objective")],
    out: Annotated[Path, typer.Option(help="Output sentence-transformers directory")],
    base: Annotated[
        Path | None, typer.Option(help="Student's starting checkpoint; default: settings model")
    ] = None,
    teacher: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated teacher directories ('default' = packaged MiniLM); RankCSE "
            "mixes two as alpha*T1 + (1-alpha)*T2"
        ),
    ] = None,
    data: Annotated[
        list[Path] | None,
        typer.Option(
            help="Training file, repeatable; default: Wikipedia + SNLI sentences (mnrl: SNLI)"
        ),
    ] = None,
    recipe: Annotated[
        Recipe, typer.Option(help="quick: a smoke run; full: about an hour on 2 CPU cores")
    ] = Recipe.QUICK,
    config: Annotated[
        Path | None, typer.Option(help="JSON or TOML overrides of the recipe")
    ] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar")] = False,
) -> None:
    """Train a student (SimCSE, RankEncoder, RankCSE ListNet/ListMLE, MNRL) and evaluate it."""
    settings = get_settings()
    console = Console()
    train_config = method_config(method, recipe)
    if config:
        train_config = TrainConfig.from_file(config, base=train_config)
    if method_spec(method).teachers[0] > 0 and not teacher:
        teacher = DEFAULT_TEACHER
    data_paths = data or settings.training_files(supervised=method_spec(method).supervised)
    dev = settings_dev_setup(settings, train_config.eval_anchor_count, train_config.eval_data)
    try:
        result = run_training(
            method,
            base or settings.model_path,
            _teacher_paths(teacher),
            data_paths,
            out,
            train_config,
            cache_dir=settings.cache_dir,
            dev=dev,
            progress=not quiet,
        )
    except (ResumeMismatchError, ValueError, FileNotFoundError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(code=2) from None
    if result.resumed_from:
        console.print(f"resumed at step {result.resumed_from} of {result.steps}")
    console.print(render_comparison(result.metadata))
    console.print(f"student written to {result.out_dir}")
