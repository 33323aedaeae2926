"""Shared by the snapshot and restore tests: a store under a key prefix of its own, the
corpus as a plain dict, and corpus files."""

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from core.corpus_files import document_line, open_corpus, read_documents
from core.documents import DocumentStore, NewDocument
from core.redis_keys import RedisKeys
from core.settings import Settings

State = dict[str, tuple[str, dict[str, Any]]]  # id -> (text, metadata)


def fresh_keys(label: str) -> RedisKeys:
    return RedisKeys(f"rankserve-test-{label}-{uuid.uuid4().hex[:8]}")


def delete_keys(keys: RedisKeys) -> None:
    client = redis.Redis.from_url(Settings().redis_url)
    for key in client.scan_iter(match=keys.pattern, count=1000):
        client.delete(key)
    client.close()


def store_of(keys: RedisKeys) -> DocumentStore:
    client = aioredis.Redis.from_url(Settings().redis_url, decode_responses=True)
    return DocumentStore(client, keys)


def docs(state: State) -> list[NewDocument]:
    return [NewDocument(i, text, metadata) for i, (text, metadata) in sorted(state.items())]


async def stored(store: DocumentStore) -> State:
    out: State = {}
    async for page in store.scan(500):
        out.update((doc.id, (doc.text, doc.metadata)) for doc in page)
    return out


def write_file(path: Path, state: State) -> Path:
    with open_corpus(path, "w") as handle:
        handle.writelines(document_line(doc) for doc in docs(state))
    return path


def read_file(path: Path) -> State:
    with open_corpus(path, "r") as handle:
        return {d.id: (d.text, d.metadata) for d in read_documents(handle, sorted_ids=True)}


def corpus(count: int, label: str = "v1", start: int = 0) -> State:
    """Documents with every kind of metadata value; `label` varies their texts."""
    values: list[Any] = [1, 2.5, True, None, "ü-τ", -(2**53)]
    return {
        f"doc-{i:06d}": (
            f'{label} text {i} — ünïcode "quoted" \\ tab\t',
            {"n": i, "v": values[i % len(values)], "tag": f"t{i % 7}"},
        )
        for i in range(start, start + count)
    }


async def upsert_all(store: DocumentStore, state: State, batch: int = 500) -> int:
    documents = docs(state)
    revision = 0
    for start in range(0, len(documents), batch):
        _, revision = await store.upsert(documents[start : start + batch])
    return revision


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
