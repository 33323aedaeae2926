"""Every document at one corpus revision, written to a corpus file in id order, while writes go
on: what a snapshot (and `rankserve corpus export`) stores.

Redis keeps only each document's latest state, so the read is in rounds:
1. read the revision r0, then scan every document (in id order) into a temporary file. A
   document not written after r0 has its state at r0 in the file; the others are named by the
   change log after r0.
2. re-read the documents the log names after r0, reading the revision r1 first: each is now
   right as of r1 unless written again after r1, which the log names after r1. Repeat from r1.
3. once few enough entries remain, one script (core/corpus_scripts.py READ_CHANGED) reads them,
   the revision R and the active model version at one instant: every document is then known
   as of R.
4. merge the file with the re-read states (kept in memory: only what was written during the
   read) into the output, in id order.

The change log after r0 must stay until the end, so the reader holds it as a replica does
(core/documents.py trim_changes); if it was trimmed anyway, the read starts over.
"""

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from redis.exceptions import RedisError

from core import corpus_scripts as scripts
from core.corpus_files import document_line, open_corpus
from core.documents import (
    ChangeLogGapError,
    DocumentStore,
    NewDocument,
    StoreUnavailableError,
)

_PAGE = 1000
_ATOMIC_ENTRIES = 2000  # at most this many change-log entries are re-read inside the script
_ROUNDS = 8  # catch-up rounds before the script reads whatever is left
_ATTEMPTS = 3  # reads started over after the change log was trimmed under them
_HOLD_S = 60.0  # how long one renewal holds the change log
_RENEW_S = 10.0

Progress = Callable[[int], None]


@dataclass(frozen=True)
class CorpusCut:
    """What a consistent read wrote: `count` documents as of `revision`."""

    revision: int
    count: int
    model_version: str | None  # the active bundle then; None = the settings model


class ChangeLogHold:
    """Registers a reader of the change log, so that trimming leaves what it still needs."""

    def __init__(self, store: DocumentStore, keep: int) -> None:
        self.store = store
        self.keep = keep
        self.reader = f"corpus-read-{uuid.uuid4().hex[:12]}"
        self.position = 0
        self._renewed = 0.0

    async def hold(self, position: int) -> None:
        self.position = position
        await self.store.trim_changes(self.reader, position, _HOLD_S, self.keep)
        self._renewed = time.monotonic()

    async def renew(self) -> None:
        if time.monotonic() - self._renewed > _RENEW_S:
            await self.hold(self.position)

    async def release(self) -> None:
        """Lapses at once: the reader stops holding anything back from the next trim on."""
        # Should Redis not answer, the registration lapses by itself within _HOLD_S.
        with contextlib.suppress(StoreUnavailableError):
            await self.store.trim_changes(self.reader, self.position, 0.001, self.keep)


async def read_consistent(
    store: DocumentStore,
    output: Path,
    workdir: Path,
    *,
    changes_keep: int,
    on_progress: Progress | None = None,
) -> CorpusCut:
    """Write every document as of one revision to `output` (gzip if it ends in .gz), id order.

    `workdir` holds the temporary scan; `changes_keep` is the deployment's
    RANKSERVE_CHANGES_KEEP, which a trim by this reader respects as every replica's does.
    """
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            return await _read_once(store, output, workdir, changes_keep, on_progress)
        except ChangeLogGapError:
            if attempt == _ATTEMPTS:
                raise
    raise AssertionError("unreachable")


async def _read_once(
    store: DocumentStore,
    output: Path,
    workdir: Path,
    changes_keep: int,
    on_progress: Progress | None,
) -> CorpusCut:
    hold = ChangeLogHold(store, changes_keep)
    scan = workdir / f"scan-{uuid.uuid4().hex[:8]}.tsv"
    try:
        start = await store.revision()
        await hold.hold(start)
        await _scan(store, scan, hold, on_progress)
        revision, model_version, changed = await _catch_up(store, start)
        count = await asyncio.to_thread(_merge, scan, changed, output)
        return CorpusCut(revision, count, model_version)
    finally:
        scan.unlink(missing_ok=True)
        await hold.release()


async def _scan(
    store: DocumentStore, scan: Path, hold: ChangeLogHold, on_progress: Progress | None
) -> None:
    """Every document as the scan finds it: `id <TAB> line`, so the merge never parses JSON."""
    with scan.open("w", encoding="utf-8", newline="\n") as handle:
        async for page in store.scan(_PAGE):
            lines = [f"{doc.id}\t{document_line(doc)}" for doc in page]
            await asyncio.to_thread(handle.writelines, lines)
            await hold.renew()
            if on_progress is not None:
                on_progress(len(page))


async def _catch_up(
    store: DocumentStore, start: int
) -> tuple[int, str | None, dict[str, NewDocument | None]]:
    """(R, the active version at R, the state at R of every id written after `start`)."""
    changed: dict[str, NewDocument | None] = {}
    position = start
    for round_ in range(_ROUNDS + 1):
        limit = _ATOMIC_ENTRIES if round_ < _ROUNDS else 2**62
        reply = await _read_changed(store, position, limit)
        revision, active, status = int(reply[0]), reply[1] or None, reply[2]
        if status == "gap":
            raise ChangeLogGapError(f"the change log no longer continues from {position}")
        if status == "ok":
            rest = reply[3:]
            for k in range(0, len(rest), 3):
                doc_id, text, metadata = rest[k : k + 3]
                changed[doc_id] = _document(doc_id, text, metadata)
            return revision, active, changed
        # Too many entries for one script: re-read them outside it, from `revision` on.
        while position < revision:
            changes = await store.changes_after(position, count=_PAGE)
            if not changes:
                break
            documents = await store.get_many([change.id for change in changes])
            for change, doc in zip(changes, documents, strict=True):
                changed[change.id] = (
                    None if doc is None else NewDocument(doc.id, doc.text, doc.metadata)
                )
            position = changes[-1].revision
    raise AssertionError("the last round reads without a limit")


async def _read_changed(store: DocumentStore, position: int, limit: int) -> list[str]:
    keys = store.keys
    script = store.client.register_script(scripts.READ_CHANGED)
    try:
        return await script(
            keys=[keys.corpus_revision, keys.corpus_changes, keys.active_version],
            args=[position, limit, keys.document("")],
        )
    except RedisError as error:
        raise StoreUnavailableError() from error


def _document(doc_id: str, text: str | None, metadata: str | None) -> NewDocument | None:
    if text is None or metadata is None:
        return None
    return NewDocument(doc_id, text, json.loads(metadata))


def _merge(scan: Path, changed: dict[str, NewDocument | None], output: Path) -> int:
    """The scanned lines with the re-read states in their place, in id order; the count."""
    updates = sorted(changed.items())
    count = 0
    k = 0
    with scan.open(encoding="utf-8", newline="\n") as source, open_corpus(output, "w") as out:

        def flush_until(doc_id: str | None) -> None:
            nonlocal k, count
            while k < len(updates) and (doc_id is None or updates[k][0] < doc_id):
                count += _write(out, updates[k][1])
                k += 1

        for row in source:
            doc_id, line = row.split("\t", 1)
            flush_until(doc_id)
            if k < len(updates) and updates[k][0] == doc_id:
                count += _write(out, updates[k][1])
                k += 1
            else:
                out.write(line)
                count += 1
        flush_until(None)
    return count


def _write(out: TextIO, doc: NewDocument | None) -> int:
    if doc is None:
        return 0
    out.write(document_line(doc))
    return 1
