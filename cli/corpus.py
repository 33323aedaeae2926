"""`rankserve corpus export FILE` and `rankserve corpus import FILE`: the document corpus as
JSON lines, `{"id", "text", "metadata"}`, gzip-compressed when the name ends in `.gz`.

Both talk to the Redis the settings name (RANKSERVE_REDIS_URL, RANKSERVE_REDIS_PREFIX, Sentinel
included), stream a page or a batch at a time, and show a progress bar on stderr.

- export writes every document as of one corpus revision, in id order, while writes go on
  (core/corpus_snapshot.py), into a temporary file renamed into place when complete;
- import checks every line first, as `POST /documents` would check it (id pattern, text and
  metadata limits), and writes nothing if one fails; then it writes, through the same
  store upsert as the API (core/corpus_import.py), only the documents that are new or
  different, so every replica follows them through the change log and re-embeds nothing its
  embedding cache holds. Running it again writes nothing.
"""

import asyncio
import os
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from core.corpus_files import CorpusFileError, open_corpus, read_documents, read_lines
from core.corpus_import import BATCH, import_documents
from core.corpus_snapshot import read_consistent
from core.documents import DocumentStore, StoreUnavailableError
from core.redis_clients import async_redis
from core.redis_keys import RedisKeys
from core.settings import Settings, get_settings
from service.corpus.schemas import DocumentLimits, document_models
from service.errors import validation_message

T = TypeVar("T")

app = typer.Typer(
    help="Export and import the document corpus as JSON lines (.gz compresses).",
    no_args_is_help=True,
)
_MAX_REPORTED = 10  # invalid lines listed before the rest are only counted

CorpusFile = Annotated[
    Path, typer.Argument(help="FILE.jsonl or FILE.jsonl.gz", dir_okay=False, resolve_path=True)
]


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )


def _run(settings: Settings, work: Callable[[DocumentStore], Coroutine[Any, Any, T]]) -> T:
    """`work` on a document store for the settings' Redis; an outage is a clean exit 1."""

    async def main() -> T:
        client = async_redis(
            settings, decode_responses=True, socket_connect_timeout=5, socket_timeout=60
        )
        try:
            return await work(DocumentStore(client, RedisKeys(settings.redis_prefix)))
        finally:
            await client.aclose()

    try:
        return asyncio.run(main())
    except StoreUnavailableError as error:
        typer.echo(f"error: {error} ({error.__cause__})", err=True)
        raise typer.Exit(code=1) from None


@app.command("export")
def export(path: CorpusFile) -> None:
    """Every document, as of one corpus revision, in id order."""
    settings = get_settings()
    path.parent.mkdir(parents=True, exist_ok=True)

    async def work(store: DocumentStore) -> tuple[int, int, str | None]:
        total = await store.count()
        with (
            tempfile.TemporaryDirectory(dir=path.parent, prefix=".rankserve-export-") as work_dir,
            _progress() as progress,
        ):
            task = progress.add_task("exporting", total=total)
            partial = Path(work_dir) / path.name
            cut = await read_consistent(
                store,
                partial,
                Path(work_dir),
                changes_keep=settings.changes_keep,
                on_progress=lambda done: progress.advance(task, done),
            )
            os.replace(partial, path)
        return cut.count, cut.revision, cut.model_version

    count, revision, model = _run(settings, work)
    typer.echo(
        f"exported {count} documents at corpus revision {revision} "
        f"(model {model or 'from the settings'}) to {path}"
    )


def _check(path: Path, model: type[BaseModel]) -> int:
    """Every line as the API would check it; the number of documents, or exit 1."""
    problems: list[str] = []
    count = 0
    with open_corpus(path, "r") as handle, _progress() as progress:
        task = progress.add_task("checking", total=None)
        try:
            for number, value in read_lines(handle):
                count += 1
                try:
                    model.model_validate(value)
                except ValidationError as error:
                    problems.append(f"line {number}: {validation_message(list(error.errors()))}")
                if count % BATCH == 0:
                    progress.update(task, completed=count)
        except (CorpusFileError, UnicodeDecodeError, EOFError, OSError) as error:
            problems.append(str(error))
        progress.update(task, completed=count, total=count)
    if problems:
        for problem in problems[:_MAX_REPORTED]:
            typer.echo(f"error: {problem}", err=True)
        if len(problems) > _MAX_REPORTED:
            typer.echo(f"error: and {len(problems) - _MAX_REPORTED} more", err=True)
        typer.echo("nothing was imported", err=True)
        raise typer.Exit(code=1)
    return count


@app.command("import")
def import_(
    path: Annotated[
        Path,
        typer.Argument(
            help="FILE.jsonl or FILE.jsonl.gz", exists=True, dir_okay=False, resolve_path=True
        ),
    ],
    batch_size: Annotated[int, typer.Option(min=1, max=10_000, help="Documents per write")] = BATCH,
) -> None:
    """Write the file's documents that are new or different; idempotent by id."""
    settings = get_settings()
    limits = DocumentLimits.from_settings(settings)
    document = document_models(limits).document
    total = _check(path, document)

    async def work(store: DocumentStore) -> tuple[int, int, int, int | None]:
        with open_corpus(path, "r") as handle, _progress() as progress:
            task = progress.add_task("importing", total=total)
            counts = await import_documents(
                store,
                read_documents(handle),
                batch_size=batch_size,
                on_batch=lambda done: progress.advance(task, done),
            )
        return counts.documents, counts.written, counts.unchanged, counts.revision

    documents, written, unchanged, revision = _run(settings, work)
    at = f", corpus revision {revision}" if revision is not None else ""
    typer.echo(
        f"imported {documents} documents from {path}: {written} written, {unchanged} unchanged{at}"
    )
