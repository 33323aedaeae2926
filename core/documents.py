"""The document store in Redis: the corpus's source of truth and its ordered change log.

Each write is one Lua script, so a document's hash, the id listing and the change-log entry
change together or not at all, and the call returns only after Redis has executed it. The
scripts carry the `#!lua` shebang: Redis then refuses a script up front when it is out of
memory, instead of failing half-way through.

Revisions are one counter; the change-log entry of revision r has the stream id "r-0", so
"every change after revision r" is a plain XREAD from "r-0". Every id gets an int64 number once
(the faiss id) and keeps it across delete and re-create, so id <-> number is a bijection every
replica agrees on.

Durability: with a ReplicaWait (core/redis_clients.py, `redis_wait_replicas`), each write script
is followed by WAIT on the same connection, and the write is acknowledged only once that many
replicas have it; short of that, StoreUnavailableError although the master applied it.

The change log is trimmed (`trim_changes`) to the oldest revision some live reader still
needs. A reader whose position was trimmed away, or whose history a failover rewrote, gets
ChangeLogGapError from `changes_after` and must rebuild from a full scan.
"""

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from core import document_scripts as scripts
from core.redis_clients import ReplicaWait, replica_wait_of
from core.redis_keys import RedisKeys
from models.index import Scalar

T = TypeVar("T")


class StoreUnavailableError(ConnectionError):
    """Redis did not answer, or did not confirm a write to as many replicas as the settings
    require. Nothing was read; a write may or may not have been applied (retrying it is safe:
    writes are by id). The cause stays on `__cause__` for the log; the message is fixed, since
    a client must never see a host or port."""

    def __init__(self) -> None:
        super().__init__("the document store is unavailable")


class ChangeLogGapError(RuntimeError):
    """The change log no longer continues from a reader's position: the entries after it were
    trimmed, or the entry at it is gone or another change (a failover lost writes the reader
    had applied, and the revisions were reused). Only a rebuild from a full scan is correct."""


_FIELDS = ("text", "metadata", "number", "revision")


@dataclass(frozen=True)
class NewDocument:
    id: str
    text: str
    metadata: dict[str, Scalar]


@dataclass(frozen=True)
class StoredDocument:
    id: str
    text: str
    metadata: dict[str, Scalar]
    number: int  # the document's id in the search index
    revision: int  # the corpus revision of its last write


@dataclass(frozen=True)
class Change:
    revision: int
    op: Literal["upsert", "delete"]
    id: str
    number: int


@dataclass(frozen=True)
class AnchorRecord:
    """Anchor texts sampled from the documents, shared by every replica."""

    checksum: str
    texts: list[str]
    corpus_size: int  # documents in the corpus when they were sampled


def _metadata_json(metadata: dict[str, Scalar]) -> str:
    return json.dumps(metadata, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


class DocumentStore:
    """Typed access to the corpus keys; every Redis failure becomes StoreUnavailableError.

    `wait` defaults to the one the client carries (core/redis_clients.py), so a store on a
    client from there acknowledges writes only as the settings require.
    """

    def __init__(
        self, client: aioredis.Redis, keys: RedisKeys, wait: ReplicaWait | None = None
    ) -> None:
        self.client = client
        self.keys = keys
        self.wait = wait if wait is not None else replica_wait_of(client)
        self._upsert = client.register_script(scripts.UPSERT)
        self._delete = client.register_script(scripts.DELETE)
        self._set_anchors = client.register_script(scripts.SET_ANCHORS)
        self._trim_changes = client.register_script(scripts.TRIM_CHANGES)
        self._read = client.register_script(scripts.READ)

    async def upsert(self, documents: Sequence[NewDocument]) -> tuple[list[int], int]:
        """Write documents (insert or replace); returns their numbers and the new revision."""
        result = await self._write(documents, only_if_unseeded=False)
        return result[:-1], result[-1]

    async def seed(self, documents: Sequence[NewDocument]) -> bool:
        """Write `documents` only on a store's first seeding with an empty corpus; True if so."""
        return bool(await self._write(documents, only_if_unseeded=True))

    async def _write(self, documents: Sequence[NewDocument], only_if_unseeded: bool) -> list[int]:
        keys = self.keys
        args: list[str] = ["1" if only_if_unseeded else "0"]
        for doc in documents:
            args += [doc.id, doc.text, _metadata_json(doc.metadata)]
        script_keys = [
            keys.corpus_revision,
            keys.corpus_changes,
            keys.document_ids,
            keys.document_numbers,
            keys.document_number_counter,
            keys.demo_seeded,
            *(keys.document(doc.id) for doc in documents),
        ]
        result = await self._call(lambda: self._write_script(self._upsert, script_keys, args))
        return [int(value) for value in result]

    async def delete(self, ids: Sequence[str]) -> tuple[list[bool], int]:
        """Delete documents; returns, per id, whether it existed, and the revision after."""
        script_keys = [
            self.keys.corpus_revision,
            self.keys.corpus_changes,
            self.keys.document_ids,
            *(self.keys.document(doc_id) for doc_id in ids),
        ]
        result = await self._call(lambda: self._write_script(self._delete, script_keys, list(ids)))
        return [bool(flag) for flag in result[:-1]], int(result[-1])

    async def get(self, doc_id: str) -> StoredDocument | None:
        return (await self.get_many([doc_id]))[0]

    async def get_many(self, ids: Sequence[str]) -> list[StoredDocument | None]:
        """Current state of each id, None where it does not exist; one round trip, one reply:
        a pipeline of HMGETs took the event loop 0.21 ms of CPU for 10 documents, the script
        0.10 (a script alternating them, load 0.1-0.3)."""
        if not ids:
            return []
        keys = [self.keys.document(doc_id) for doc_id in ids]
        rows = await self._call(lambda: self._read(keys=keys, args=_FIELDS))
        return [_document(doc_id, row) for doc_id, row in zip(ids, rows, strict=True)]

    async def list_page(
        self, cursor: str | None, limit: int
    ) -> tuple[list[StoredDocument], str | None]:
        """Documents in id order after `cursor` (exclusive); the next cursor, None at the end."""
        start = f"({cursor}" if cursor else "-"
        ids = await self._call(
            lambda: self.client.zrange(
                self.keys.document_ids, start, "+", bylex=True, offset=0, num=limit + 1
            )
        )
        page = ids[:limit]
        # A document deleted between the two calls is left out of this page.
        documents = [doc for doc in await self.get_many(page) if doc is not None]
        return documents, (page[-1] if len(ids) > limit else None)

    async def count(self) -> int:
        return int(await self._call(lambda: self.client.zcard(self.keys.document_ids)))

    async def revision(self) -> int:
        value = await self._call(lambda: self.client.get(self.keys.corpus_revision))
        return int(value or 0)

    async def scan(self, page: int = 1000) -> AsyncIterator[list[StoredDocument]]:
        """Every live document, in id order, a page at a time."""
        cursor: str | None = None
        while True:
            documents, cursor = await self.list_page(cursor, page)
            if documents:
                yield documents
            if cursor is None:
                return

    async def changes_after(
        self,
        revision: int,
        *,
        last: Change | None = None,
        count: int = 512,
        block_ms: int | None = None,
    ) -> list[Change]:
        """Change-log entries after `revision`, oldest first; waits up to block_ms for one.

        Raises ChangeLogGapError when the log does not continue from `revision`: its first
        entry after it is not `revision + 1` (trimmed), or, given `last` (the change the caller
        applied at `revision`), the entry at `revision` is gone or differs from it.
        """
        key = self.keys.corpus_changes
        streams = {key: f"{revision}-0"}
        if last is None:
            reply = await self._call(
                lambda: self.client.xread(streams, count=count, block=block_ms)
            )
        else:

            async def checked_read() -> list[Any]:
                # One round trip: the entry at `revision` and what follows it.
                async with self.client.pipeline(transaction=False) as pipe:
                    pipe.xrange(key, f"{revision}-0", f"{revision}-0")
                    pipe.xread(streams, count=count, block=block_ms)
                    return await pipe.execute()

            at, reply = await self._call(checked_read)
            if not at or _change(*at[0]) != last:
                raise ChangeLogGapError(
                    f"the change log's entry at revision {revision} is gone or was rewritten"
                )
        if not reply:
            return []
        _, entries = reply[0]
        changes = [_change(entry_id, fields) for entry_id, fields in entries]
        if changes and changes[0].revision != revision + 1:
            raise ChangeLogGapError(
                f"the change log jumps from revision {revision} to {changes[0].revision}"
            )
        return changes

    async def anchor_record(self, count: int, seed: int) -> AnchorRecord | None:
        key = self.keys.document_anchors(count, seed)
        values = await self._call(
            lambda: self.client.hmget(key, ["checksum", "texts", "corpus_size"])
        )
        if values[0] is None:
            return None
        return AnchorRecord(
            checksum=values[0], texts=json.loads(values[1]), corpus_size=int(values[2])
        )

    async def replace_anchor_record(
        self, count: int, seed: int, expected: str | None, record: AnchorRecord
    ) -> bool:
        """Install `record` if the stored checksum is still `expected` (None = no record)."""
        key = self.keys.document_anchors(count, seed)
        args = [expected or "", record.checksum, json.dumps(record.texts), record.corpus_size]
        return bool(await self._call(lambda: self._write_script(self._set_anchors, [key], args)))

    async def trim_changes(self, reader: str, position: int, lifetime_s: float, keep: int) -> int:
        """Record that `reader` still needs the change log after `position` (for `lifetime_s`,
        renewed by calling again), and trim it to the oldest position any live reader
        recorded; keeps the newest `keep` entries. Returns the oldest position."""
        script_keys = [
            self.keys.corpus_changes,
            self.keys.corpus_readers,
            self.keys.corpus_reader_deadlines,
        ]
        args = [reader, position, max(1, round(lifetime_s * 1000)), keep]
        oldest, _ = await self._call(lambda: self._trim_changes(keys=script_keys, args=args))
        return int(oldest)

    async def _write_script(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Run a write script; with a ReplicaWait, WAIT right after it on the same connection.

        WAIT counts the replicas that have everything its own connection wrote, so it must
        share the script's connection: one pipeline, never two pool round trips.
        """
        if not self.wait.replicas:
            return await script(keys=keys, args=args)
        async with self.client.pipeline(transaction=False) as pipe:
            await script(keys=keys, args=args, client=pipe)
            pipe.wait(self.wait.replicas, self.wait.timeout_ms)
            result, acknowledged = await pipe.execute()
        self.wait.check(int(acknowledged))
        return result

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        try:
            return await operation()
        except RedisError as error:
            raise StoreUnavailableError() from error


def _change(entry_id: str, fields: dict[str, str]) -> Change:
    return Change(
        revision=int(entry_id.split("-")[0]),
        op=fields["op"],  # the scripts write only upsert or delete
        id=fields["id"],
        number=int(fields["number"]),
    )


def _document(doc_id: str, row: list[str | None]) -> StoredDocument | None:
    text, metadata, number, revision = row
    if text is None or metadata is None or number is None or revision is None:
        return None
    return StoredDocument(
        id=doc_id,
        text=text,
        metadata=json.loads(metadata),
        number=int(number),
        revision=int(revision),
    )
