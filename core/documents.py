"""The document store in Redis: the corpus's source of truth and its ordered change log.

Each write is one Lua script, so a document's hash, the id listing and the change-log entry
change together or not at all, and the call returns only after Redis has executed it. The
scripts carry the `#!lua` shebang: Redis then refuses a script up front when it is out of
memory, instead of failing half-way through.

Revisions are one counter; the change-log entry of revision r has the stream id "r-0", so
"every change after revision r" is a plain XREAD from "r-0". Every id gets an int64 number once
(the faiss id) and keeps it across delete and re-create, so id <-> number is a bijection every
replica agrees on.
"""

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from core.redis_keys import RedisKeys
from models.index import Scalar

T = TypeVar("T")


class StoreUnavailableError(ConnectionError):
    """Redis did not answer: nothing was written or read. The cause stays on `__cause__` for
    the log; the message is fixed, since a client must never see a host or port."""

    def __init__(self) -> None:
        super().__init__("the document store is unavailable")


_UPSERT = """#!lua
-- KEYS: revision, changes, ids, numbers, number counter, demo marker, then one hash per doc.
-- ARGV: only-if-unseeded flag, then (id, text, metadata JSON) per document.
local first = 7
if ARGV[1] == '1' then
  local seeded = redis.call('EXISTS', KEYS[6]) == 1
  redis.call('SET', KEYS[6], '1')
  if seeded or redis.call('ZCARD', KEYS[3]) > 0 then
    return {}
  end
end
local numbers = {}
local revision = 0
for i = first, #KEYS do
  local j = (i - first) * 3 + 2
  local id = ARGV[j]
  local number = redis.call('HGET', KEYS[4], id)
  if not number then
    number = redis.call('INCR', KEYS[5])
    redis.call('HSET', KEYS[4], id, number)
  end
  revision = redis.call('INCR', KEYS[1])
  redis.call('HSET', KEYS[i], 'text', ARGV[j + 1], 'metadata', ARGV[j + 2],
             'number', number, 'revision', revision)
  redis.call('ZADD', KEYS[3], 0, id)
  redis.call('XADD', KEYS[2], revision .. '-0', 'op', 'upsert', 'id', id, 'number', number)
  numbers[#numbers + 1] = tonumber(number)
end
numbers[#numbers + 1] = revision
return numbers
"""

_DELETE = """#!lua
-- KEYS: revision, changes, ids, then one hash per doc. ARGV: the ids.
-- Returns one 0/1 per id (1 = it existed), then the corpus revision after the call.
local first = 4
local out = {}
for i = first, #KEYS do
  local id = ARGV[i - first + 1]
  local number = redis.call('HGET', KEYS[i], 'number')
  if number then
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', KEYS[3], id)
    local revision = redis.call('INCR', KEYS[1])
    redis.call('XADD', KEYS[2], revision .. '-0', 'op', 'delete', 'id', id, 'number', number)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
out[#out + 1] = tonumber(redis.call('GET', KEYS[1]) or '0')
return out
"""

_SET_ANCHORS = """#!lua
-- KEYS: the anchor record. ARGV: expected checksum ('' = absent), checksum, texts, corpus size.
if (redis.call('HGET', KEYS[1], 'checksum') or '') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'checksum', ARGV[2], 'texts', ARGV[3], 'corpus_size', ARGV[4])
return 1
"""

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
    """Typed access to the corpus keys; every Redis failure becomes StoreUnavailableError."""

    def __init__(self, client: aioredis.Redis, keys: RedisKeys) -> None:
        self.client = client
        self.keys = keys
        self._upsert = client.register_script(_UPSERT)
        self._delete = client.register_script(_DELETE)
        self._set_anchors = client.register_script(_SET_ANCHORS)

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
        result = await self._call(lambda: self._upsert(keys=script_keys, args=args))
        return [int(value) for value in result]

    async def delete(self, ids: Sequence[str]) -> tuple[list[bool], int]:
        """Delete documents; returns, per id, whether it existed, and the revision after."""
        script_keys = [
            self.keys.corpus_revision,
            self.keys.corpus_changes,
            self.keys.document_ids,
            *(self.keys.document(doc_id) for doc_id in ids),
        ]
        result = await self._call(lambda: self._delete(keys=script_keys, args=list(ids)))
        return [bool(flag) for flag in result[:-1]], int(result[-1])

    async def get(self, doc_id: str) -> StoredDocument | None:
        return (await self.get_many([doc_id]))[0]

    async def get_many(self, ids: Sequence[str]) -> list[StoredDocument | None]:
        """Current state of each id, None where it does not exist; one round trip."""
        if not ids:
            return []

        async def fetch() -> list[Any]:
            async with self.client.pipeline(transaction=False) as pipe:
                for doc_id in ids:
                    pipe.hmget(self.keys.document(doc_id), _FIELDS)
                return await pipe.execute()

        rows = await self._call(fetch)
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
        self, revision: int, *, count: int = 512, block_ms: int | None = None
    ) -> list[Change]:
        """Change-log entries after `revision`, oldest first; waits up to block_ms for one."""
        streams = {self.keys.corpus_changes: f"{revision}-0"}
        reply = await self._call(lambda: self.client.xread(streams, count=count, block=block_ms))
        if not reply:
            return []
        _, entries = reply[0]
        return [
            Change(
                revision=int(entry_id.split("-")[0]),
                op=fields["op"],
                id=fields["id"],
                number=int(fields["number"]),
            )
            for entry_id, fields in entries
        ]

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
        return bool(await self._call(lambda: self._set_anchors(keys=[key], args=args)))

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        try:
            return await operation()
        except RedisError as error:
            raise StoreUnavailableError() from error


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
