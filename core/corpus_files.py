"""Corpus files: one JSON object per line, `{"id", "text", "metadata"}`, gzip-compressed when
the file name ends in `.gz`. Export, import and snapshots all read and write this format a line
at a time, so memory stays flat whatever the corpus size.
"""

import gzip
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar

from core.documents import NewDocument, StoredDocument
from core.strict_json import strict_loads

T = TypeVar("T")

FIELDS = ("id", "text", "metadata")
_GZIP_LEVEL = 6  # zlib's default: most of level 9's ratio at a fraction of its time


class CorpusFileError(ValueError):
    """A line that is not a document; the message names the line, never the file's path."""


def is_gzip(path: Path) -> bool:
    return path.name.endswith(".gz")


def open_corpus(path: Path, mode: Literal["r", "w"]) -> TextIO:
    """The file as UTF-8 text, through gzip when its name ends in .gz."""
    if is_gzip(path):
        return gzip.open(
            path, f"{mode}t", encoding="utf-8", newline="\n", compresslevel=_GZIP_LEVEL
        )
    return path.open(mode, encoding="utf-8", newline="\n")


@contextmanager
def writing(path: Path) -> Iterator[TextIO]:
    """Write `path` through a temporary sibling renamed into place on success: an export that
    is interrupted never leaves a truncated file under the name asked for."""
    # The temporary keeps the name's suffix: it decides whether open_corpus compresses.
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        with open_corpus(tmp, "w") as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def metadata_json(metadata: dict[str, Any]) -> str:
    """Compact JSON with sorted keys: the form the store keeps, so equal metadata compares
    equal as text (and `true` never equals `1`, as it would as Python values)."""
    return json.dumps(metadata, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def document_line(doc: NewDocument | StoredDocument) -> str:
    """The document's line, newline included; metadata keys sorted, as the store keeps them."""
    text = json.dumps(doc.text, ensure_ascii=False)
    return f'{{"id":{json.dumps(doc.id)},"text":{text},"metadata":{metadata_json(doc.metadata)}}}\n'


def parse_line(number: int, line: str) -> dict[str, Any]:
    """The JSON object of line `number` (1-based), checked for shape only: an object with a
    string `id`, a string `text` and, if present, an object `metadata` (default {}). What the
    API would refuse (id pattern, lengths, metadata values) is for the caller's validator."""
    try:
        value = strict_loads(line)
    except ValueError as error:
        raise CorpusFileError(f"line {number}: not JSON ({error})") from None
    except RecursionError:
        # Python's parser recurses per level of nesting; no document nests this deep.
        raise CorpusFileError(f"line {number}: not JSON (nested too deeply)") from None
    if not isinstance(value, dict):
        raise CorpusFileError(f"line {number}: not a JSON object")
    extra = sorted(set(value) - set(FIELDS))
    if extra:
        raise CorpusFileError(f"line {number}: unknown fields {extra}")
    if not isinstance(value.get("id"), str):
        raise CorpusFileError(f"line {number}: `id` must be a string")
    if not isinstance(value.get("text"), str):
        raise CorpusFileError(f"line {number}: `text` must be a string")
    value.setdefault("metadata", {})
    if not isinstance(value["metadata"], dict):
        raise CorpusFileError(f"line {number}: `metadata` must be an object")
    return value


def read_lines(handle: TextIO) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line."""
    for number, line in enumerate(handle, start=1):
        if line.strip():
            yield number, parse_line(number, line)


def read_documents(handle: TextIO, *, sorted_ids: bool = False) -> Iterator[NewDocument]:
    """The documents of a file; with `sorted_ids`, a file whose ids do not strictly increase
    (as every snapshot's do) is an error at the first line out of order."""
    previous: str | None = None
    for number, value in read_lines(handle):
        doc_id = value["id"]
        if sorted_ids and previous is not None and doc_id <= previous:
            raise CorpusFileError(f"line {number}: id {doc_id!r} is out of order")
        previous = doc_id
        yield NewDocument(doc_id, value["text"], value["metadata"])


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of `size` items (the last may be shorter); itertools.batched is Python 3.12."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
