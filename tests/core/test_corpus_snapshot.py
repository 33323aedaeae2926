"""A consistent read (core/corpus_snapshot.py) against the shared Redis: every document as of
one revision, in id order, while writes go on, and the change log held meanwhile."""

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from core import corpus_snapshot
from core.corpus_snapshot import ChangeLogHold, read_consistent
from core.documents import DocumentStore, NewDocument
from core.redis_clients import sync_redis
from core.redis_keys import RedisKeys
from core.settings import Settings
from core.versions import activate
from tests.core.corpus_helpers import (
    State,
    corpus,
    delete_keys,
    fresh_keys,
    read_file,
    store_of,
    stored,
    upsert_all,
)


@pytest_asyncio.fixture(loop_scope="function")
async def store() -> AsyncIterator[DocumentStore]:
    keys = fresh_keys("snap")
    store = store_of(keys)
    yield store
    await store.client.aclose()
    delete_keys(keys)


@pytest.mark.parametrize("name", ["corpus.jsonl", "corpus.jsonl.gz"])
async def test_a_quiet_corpus_is_read_whole_in_id_order(
    store: DocumentStore, tmp_path: Path, name: str
):
    state = corpus(1234)
    revision = await upsert_all(store, state)
    with sync_redis(Settings()) as client:
        activate(client, store.keys, "v7", reason="test")
    output = tmp_path / name
    cut = await read_consistent(store, output, tmp_path, changes_keep=10)
    assert (cut.revision, cut.count, cut.model_version) == (revision, 1234, "v7")
    assert read_file(output) == state  # read_file checks that ids strictly increase
    assert [p.name for p in tmp_path.iterdir()] == [name]  # the scan file is gone


async def test_an_empty_corpus(store: DocumentStore, tmp_path: Path):
    cut = await read_consistent(store, tmp_path / "c.jsonl", tmp_path, changes_keep=10)
    assert (cut.revision, cut.count, cut.model_version) == (0, 0, None)
    assert (tmp_path / "c.jsonl").read_text() == ""


@pytest.mark.parametrize("atomic_entries", [100_000, 3], ids=["one-script", "catch-up-rounds"])
async def test_writes_during_the_read_leave_the_state_at_one_revision(
    store: DocumentStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, atomic_entries: int
):
    """A writer upserts, re-creates and deletes documents all through the read. The file must
    equal the corpus replayed from its initial state up to the revision the read reports."""
    monkeypatch.setattr(corpus_snapshot, "_ATOMIC_ENTRIES", atomic_entries)
    monkeypatch.setattr(corpus_snapshot, "_PAGE", 50)
    initial = corpus(600)
    await upsert_all(store, initial)
    history: list[tuple[int, str, tuple[str, dict] | None]] = []
    done = asyncio.Event()
    rng = random.Random(7)

    async def writer() -> None:
        k = 0
        while not done.is_set():
            doc_id = f"doc-{rng.randrange(800):06d}"  # some new, some existing
            if rng.random() < 0.3:
                (existed,), revision = await store.delete([doc_id])
                if existed:
                    history.append((revision, doc_id, None))
            else:
                text, metadata = f"rewrite {k}", {"k": k}
                _, revision = await store.upsert([NewDocument(doc_id, text, metadata)])
                history.append((revision, doc_id, (text, metadata)))
            k += 1
            await asyncio.sleep(0)

    catch_up_reads = 0
    changes_after = store.changes_after

    async def counted(*args, **kwargs):
        nonlocal catch_up_reads
        catch_up_reads += 1
        return await changes_after(*args, **kwargs)

    monkeypatch.setattr(store, "changes_after", counted)
    task = asyncio.create_task(writer())
    try:
        cut = await read_consistent(store, tmp_path / "c.jsonl", tmp_path, changes_keep=10)
    finally:
        done.set()
        await task
    expected: State = dict(initial)
    for revision, doc_id, state in history:
        if revision <= cut.revision:
            if state is None:
                expected.pop(doc_id, None)
            else:
                expected[doc_id] = state
    assert sum(1 for revision, _, _ in history if revision <= cut.revision) > 20
    assert read_file(tmp_path / "c.jsonl") == expected
    assert cut.count == len(expected)
    # The small limit makes the read catch up outside the script before its last step.
    assert (catch_up_reads > 0) == (atomic_entries == 3)
    assert await stored(store) != initial  # the writes did land


async def test_a_hold_keeps_the_change_log_after_its_position(store: DocumentStore):
    await upsert_all(store, corpus(100), batch=1)  # revisions 1..100
    hold = ChangeLogHold(store, keep=1)
    await hold.hold(40)
    # A replica at the newest revision trims with keep=1: the hold keeps 40 onwards.
    oldest = await store.trim_changes("replica", 100, 60.0, 1)
    assert oldest == 40
    entries = await store.client.xrange(store.keys.corpus_changes, count=1)
    assert entries[0][0] == "40-0"
    await hold.release()
    await asyncio.sleep(0.01)
    assert await store.trim_changes("replica", 100, 60.0, 1) == 100


def test_keys_stay_under_the_prefix():
    keys = RedisKeys("p")
    names = [keys.restore_lock, keys.last_restore, keys.restore_texts("t"), keys.restore_apply("t")]
    assert all(name.startswith("p:") for name in names)
