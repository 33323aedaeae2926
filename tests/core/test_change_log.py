"""The change log's trimming and gap detection, WAIT on writes, and documents read back in one
reply, against the shared Redis.

Each test has its own key prefix. The shared Redis has no replicas, which is exactly what the
WAIT tests need: any required replica count is out of reach.
"""

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis

from core.documents import (
    Change,
    ChangeLogGapError,
    DocumentStore,
    NewDocument,
    StoreUnavailableError,
)
from core.redis_clients import NotReplicatedError, ReplicaWait, async_redis, sync_redis
from core.redis_keys import RedisKeys
from core.settings import Settings
from core.versions import activate, active_version


@pytest.fixture
def keys() -> Iterator[RedisKeys]:
    keys = RedisKeys(f"rankserve-test-log-{uuid.uuid4().hex[:8]}")
    yield keys
    client = redis.Redis.from_url(Settings().redis_url)
    for key in client.scan_iter(match=keys.pattern, count=1000):
        client.delete(key)
    client.close()


@pytest_asyncio.fixture(loop_scope="function")
async def client() -> AsyncIterator[aioredis.Redis]:
    # In the test's own event loop: a client must not outlive the loop it connected in.
    client = aioredis.Redis.from_url(Settings().redis_url, decode_responses=True)
    yield client
    await client.aclose()


def docs(start: int, stop: int) -> list[NewDocument]:
    return [NewDocument(f"d{i}", f"text {i}", {}) for i in range(start, stop)]


async def first_revision(client: aioredis.Redis, keys: RedisKeys) -> int:
    entries = await client.xrange(keys.corpus_changes, count=1)
    return int(entries[0][0].split("-")[0])


async def test_trim_keeps_what_the_oldest_live_reader_needs(
    client: aioredis.Redis, keys: RedisKeys
):
    store = DocumentStore(client, keys)
    await store.upsert(docs(0, 50))  # revisions 1..50
    assert await store.trim_changes("a", 10, lifetime_s=0.3, keep=0) == 10
    assert await store.trim_changes("b", 40, lifetime_s=60, keep=0) == 10
    # Reader a's own entry stays: it checks it on its next read.
    assert await first_revision(client, keys) == 10
    assert await client.xlen(keys.corpus_changes) == 41

    time.sleep(0.4)  # a stops reporting (dead): it no longer holds the log back
    assert await store.trim_changes("b", 40, lifetime_s=60, keep=0) == 40
    assert await first_revision(client, keys) == 40
    assert await client.zrange(keys.corpus_readers, 0, -1) == ["b"]

    # `keep` newest entries always stay, and so does the newest one with keep=0.
    assert await store.trim_changes("b", 50, lifetime_s=60, keep=5) == 50
    assert await first_revision(client, keys) == 46
    assert await store.trim_changes("b", 50, lifetime_s=60, keep=0) == 50
    assert await client.xlen(keys.corpus_changes) == 1
    assert await store.changes_after(50) == []


async def test_documents_are_read_back_in_order_with_none_for_the_missing(
    client: aioredis.Redis, keys: RedisKeys
):
    store = DocumentStore(client, keys)
    numbers, _ = await store.upsert([*docs(0, 3), NewDocument("m", "with metadata", {"k": 2})])
    await store.delete(["d1"])
    await client.hdel(keys.document("d2"), "revision")  # a hash cut short reads as missing
    await client.script_flush()  # the script is loaded again when Redis has lost it
    found = await store.get_many(["m", "d1", "nowhere", "d0", "d2"])
    assert [doc.id if doc else None for doc in found] == ["m", None, None, "d0", None]
    assert found[0] is not None and found[3] is not None
    assert (found[0].text, found[0].metadata, found[0].number) == (
        "with metadata",
        {"k": 2},
        numbers[3],
    )
    assert (found[3].text, found[3].number, found[3].revision) == ("text 0", numbers[0], 1)
    assert await store.get_many([]) == []


async def test_a_reader_whose_position_was_trimmed_gets_a_gap(
    client: aioredis.Redis, keys: RedisKeys
):
    store = DocumentStore(client, keys)
    await store.upsert(docs(0, 30))
    await store.trim_changes("only", 20, lifetime_s=60, keep=0)

    with pytest.raises(ChangeLogGapError):
        await store.changes_after(10)  # 11..19 are gone
    after = await store.changes_after(20)
    assert [change.revision for change in after] == list(range(21, 31))
    at_20 = Change(revision=20, op="upsert", id="d19", number=20)
    assert len(await store.changes_after(20, last=at_20)) == 10
    # The entry at the reader's position is not the change it applied: history was rewritten.
    with pytest.raises(ChangeLogGapError):
        await store.changes_after(20, last=Change(revision=20, op="delete", id="d19", number=20))
    await client.xtrim(keys.corpus_changes, minid="21-0", approximate=False)
    with pytest.raises(ChangeLogGapError):
        await store.changes_after(20, last=at_20)


async def test_a_write_short_of_its_replicas_fails_but_may_exist(
    client: aioredis.Redis, keys: RedisKeys
):
    store = DocumentStore(client, keys, wait=ReplicaWait(replicas=1, timeout_ms=50))
    with pytest.raises(StoreUnavailableError) as raised:
        await store.upsert(docs(0, 1))
    assert isinstance(raised.value.__cause__, NotReplicatedError)
    # The master applied it: a 503 on a write means "unknown", and a retry by id is safe.
    assert (await store.get("d0")) is not None
    with pytest.raises(StoreUnavailableError):
        await store.upsert(docs(0, 1))
    assert await store.count() == 1
    with pytest.raises(StoreUnavailableError):
        await store.delete(["d0"])

    unwaited = DocumentStore(client, keys)
    assert (await unwaited.upsert(docs(1, 2)))[1] > 0


async def test_clients_from_the_settings_carry_the_wait(keys: RedisKeys):
    settings = Settings(redis_wait_replicas=1, redis_wait_timeout_s=0.05)
    client = async_redis(settings, decode_responses=True)
    try:
        assert DocumentStore(client, keys).wait == ReplicaWait(1, 50)
        with pytest.raises(StoreUnavailableError):
            await DocumentStore(client, keys).upsert(docs(0, 1))
    finally:
        await client.aclose()

    sync = sync_redis(settings)
    try:
        with pytest.raises(NotReplicatedError):
            activate(sync, keys, "v1", reason="test")
        assert active_version(sync, keys) == "v1"  # applied, not confirmed
        # A refused compare writes nothing, so there is nothing to wait for.
        assert not activate(sync, keys, "v2", reason="test", expected="other")
        assert activate(sync, keys, "v2", reason="test", wait=ReplicaWait())
    finally:
        sync.close()


def test_sentinel_settings_are_parsed_and_checked(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RANKSERVE_REDIS_SENTINELS", "10.0.0.1:26379, [::1]:26380")
    monkeypatch.setenv("RANKSERVE_REDIS_SENTINEL_MASTER", "mymaster")
    settings = Settings()
    assert settings.redis_sentinel_addresses == [("10.0.0.1", 26379), ("::1", 26380)]
    monkeypatch.setenv("RANKSERVE_REDIS_SENTINEL_MASTER", "")
    with pytest.raises(ValueError, match="set together"):
        Settings()
    monkeypatch.setenv("RANKSERVE_REDIS_SENTINELS", "no-port")
    monkeypatch.setenv("RANKSERVE_REDIS_SENTINEL_MASTER", "mymaster")
    with pytest.raises(ValueError, match="host:port"):
        Settings()
