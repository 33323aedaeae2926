"""Restoring a corpus file (core/corpus_restore.py) against the shared Redis: the corpus becomes
the file's documents exactly, through change-log entries for what differed and nothing else;
concurrent writes, a second restore, a lost lock and a bad file never leave a mix; and a
restoring process killed with SIGKILL at any point leaves the old corpus or the new one."""

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis

from core import corpus_restore
from core.corpus_files import CorpusFileError, open_corpus, read_documents
from core.corpus_restore import RestoreBusyError, RestoreLockLostError, restore_corpus
from core.documents import DocumentStore, NewDocument, StoreUnavailableError
from core.redis_clients import NotReplicatedError, ReplicaWait
from core.settings import REPO_ROOT, Settings
from tests.core.corpus_helpers import (
    State,
    corpus,
    delete_keys,
    docs,
    fresh_keys,
    store_of,
    stored,
    upsert_all,
    write_file,
)


@pytest_asyncio.fixture(loop_scope="function")
async def store() -> AsyncIterator[DocumentStore]:
    keys = fresh_keys("restore")
    store = store_of(keys)
    yield store
    await store.client.aclose()
    delete_keys(keys)


def old_and_new() -> tuple[State, State]:
    """Old: 0..299. New: 100..399, where 100..199 are unchanged, 200..249 have new texts and
    250..299 new metadata; 0..99 are gone and 300..399 are new."""
    old = corpus(300)
    new = {k: v for k, v in old.items() if k >= "doc-000100"}
    for i in range(200, 250):
        new[f"doc-{i:06d}"] = (f"changed {i}", new[f"doc-{i:06d}"][1])
    for i in range(250, 300):
        new[f"doc-{i:06d}"] = (new[f"doc-{i:06d}"][0], {"n": i, "v": 1.0})
    new.update(corpus(100, label="v2", start=300))
    return old, new


def staging_keys(store: DocumentStore) -> list[str]:
    client = redis.Redis.from_url(Settings().redis_url, decode_responses=True)
    try:
        return list(client.scan_iter(match=store.keys.restore_pattern, count=1000))
    finally:
        client.close()


async def test_the_corpus_becomes_the_file_and_only_differences_are_written(
    store: DocumentStore,
):
    old, new = old_and_new()
    before = await upsert_all(store, old)
    numbers = {doc.id: doc.number for doc in await store.get_many(sorted(old))}

    result = await restore_corpus(store, docs(new), name="s1", changes_keep=10)

    assert await stored(store) == new
    assert (result.documents, result.upserted, result.deleted) == (300, 200, 100)
    assert result.revision == before + 300 == await store.revision()
    changes = await store.changes_after(before, count=1000)
    assert len(changes) == 300
    assert {c.id for c in changes if c.op == "delete"} == set(old) - set(new)
    # Ids keep their index numbers; the unchanged documents keep their revisions.
    after = {doc.id: doc for doc in await store.get_many(sorted(new)) if doc is not None}
    assert all(after[i].number == numbers[i] for i in set(old) & set(new))
    assert all(after[f"doc-{i:06d}"].revision <= before for i in range(100, 200))
    last = await store.client.hgetall(store.keys.last_restore)
    assert (last["snapshot"], int(last["revision"])) == ("s1", result.revision)
    assert staging_keys(store) == []
    assert await store.client.exists(store.keys.restore_lock) == 0

    # Again: nothing differs, so nothing is written and no replica has anything to re-embed.
    again = await restore_corpus(store, docs(new), name="s1", changes_keep=10)
    assert (again.upserted, again.deleted, again.revision) == (0, 0, result.revision)
    assert await store.changes_after(result.revision) == []


async def test_a_restore_waits_for_replicas_as_writes_do(store: DocumentStore):
    """The shared Redis has no replicas: a required one never confirms. As with any write, the
    master applied the switch, and the caller is told it is not known to be replicated."""
    old, new = old_and_new()
    await upsert_all(store, old)
    waiting = DocumentStore(store.client, store.keys, wait=ReplicaWait(1, 50))
    with pytest.raises(StoreUnavailableError) as raised:
        await restore_corpus(waiting, docs(new), name="s", changes_keep=10)
    assert isinstance(raised.value.__cause__, NotReplicatedError)
    assert await stored(store) == new


async def test_an_empty_file_empties_the_corpus(store: DocumentStore):
    await upsert_all(store, corpus(30))
    result = await restore_corpus(store, [], name="empty", changes_keep=10)
    assert (result.documents, result.upserted, result.deleted) == (0, 0, 30)
    assert await store.count() == 0


def _writing_midway(
    documents: list[NewDocument],
    after: int,
    write: Callable[[], Awaitable[object]],
    loop: asyncio.AbstractEventLoop,
) -> Iterator[NewDocument]:
    """The documents, with `write` run on the event loop once `after` were read (the restore
    reads its file in a worker thread, so this blocks only that thread)."""
    for k, doc in enumerate(documents):
        if k == after:
            asyncio.run_coroutine_threadsafe(write(), loop).result(timeout=30)
        yield doc


async def test_writes_during_staging_are_overridden_by_the_switch(
    store: DocumentStore, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(corpus_restore, "_BATCH", 100)
    old, new = old_and_new()
    await upsert_all(store, old)

    async def concurrent_writes() -> None:
        # All three ids were staged and compared already: only the switch can see these.
        await store.upsert([NewDocument("doc-000150", "written meanwhile", {})])  # unchanged one
        await store.upsert([NewDocument("zz-new", "created meanwhile", {})])  # not in the file
        await store.delete(["doc-000120"])  # unchanged, in the file

    loop = asyncio.get_running_loop()
    documents = _writing_midway(docs(new), 250, concurrent_writes, loop)
    result = await restore_corpus(store, documents, name="s", changes_keep=10)
    assert await stored(store) == new
    assert (result.upserted, result.deleted) == (200 + 2, 100 + 1)


async def test_a_second_restore_is_refused_while_one_runs(store: DocumentStore):
    old, new = old_and_new()
    await upsert_all(store, old)
    await store.client.set(store.keys.restore_lock, "someone-else", px=60_000)
    with pytest.raises(RestoreBusyError):
        await restore_corpus(store, docs(new), name="s", changes_keep=10)
    assert await stored(store) == old
    assert await store.client.get(store.keys.restore_lock) == "someone-else"


async def test_a_restore_that_lost_its_lock_changes_nothing(
    store: DocumentStore, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(corpus_restore, "_BATCH", 100)
    old, new = old_and_new()
    await upsert_all(store, old)

    async def steal() -> None:
        await store.client.set(store.keys.restore_lock, "thief", px=60_000)

    loop = asyncio.get_running_loop()
    documents = _writing_midway(docs(new), 250, steal, loop)
    with pytest.raises(RestoreLockLostError):
        await restore_corpus(store, documents, name="s", changes_keep=10)
    assert await stored(store) == old
    assert await store.client.get(store.keys.restore_lock) == "thief"  # not released by it
    assert staging_keys(store) == []


async def test_a_bad_line_stops_the_restore_before_the_switch(
    store: DocumentStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(corpus_restore, "_BATCH", 100)  # two batches staged before the line
    old, new = old_and_new()
    await upsert_all(store, old)
    path = write_file(tmp_path / "c.jsonl", new)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([*lines[:200], lines[0], *lines[200:]]))  # an id out of order
    with (
        open_corpus(path, "r") as handle,
        pytest.raises(CorpusFileError, match="line 201: id 'doc-000100' is out of order"),
    ):
        await restore_corpus(
            store, read_documents(handle, sorted_ids=True), name="s", changes_keep=10
        )
    assert await stored(store) == old
    assert staging_keys(store) == []


# SIGKILL of a process doing a restore.

DOCUMENTS = 6000
CHILD_LOCK_TTL_S = 5.0  # long enough to see the lock held on a busy machine


def _start_child(store: DocumentStore, path: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "tests.core.restore_child",
        store.keys.prefix,
        str(path),
        str(CHILD_LOCK_TTL_S),
        "0.1",  # per 500 documents: over a second of staging
    ]
    return subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _kill_when(
    child: subprocess.Popen,
    condition: Callable[[], bool],
    *,
    may_finish: bool,
    timeout: float = 120,
) -> None:
    """SIGKILL the child as soon as `condition` holds; a child that `may_finish` can also get
    to its end first (the kill would have come after its switch)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if child.poll() is not None:
            assert may_finish and child.returncode == 0, child.communicate()
            return
        assert time.monotonic() < deadline, "the restore never reached the point to kill it at"
        time.sleep(0.002)
    child.send_signal(signal.SIGKILL)
    child.wait()


@pytest.mark.slow
@pytest.mark.parametrize("staged", [1000, 4000, DOCUMENTS], ids=["early", "late", "staged"])
async def test_sigkill_mid_restore_leaves_the_old_corpus_or_the_new_one(
    store: DocumentStore, tmp_path: Path, staged: int
):
    old = corpus(DOCUMENTS)
    new = corpus(DOCUMENTS, label="v2", start=DOCUMENTS // 2)  # half changed, half new
    await upsert_all(store, old)
    revision = await store.revision()
    path = write_file(tmp_path / "new.jsonl.gz", new)
    watcher = redis.Redis.from_url(Settings().redis_url, decode_responses=True)
    texts_key: list[str] = []

    def staged_enough() -> bool:
        if not texts_key:
            texts_key.extend(watcher.scan_iter(match=store.keys.restore_texts("*"), count=1000))
        return bool(texts_key) and watcher.hlen(texts_key[0]) >= staged

    child = _start_child(store, path)
    _kill_when(child, staged_enough, may_finish=staged == DOCUMENTS)
    if staged < DOCUMENTS:
        assert child.returncode == -signal.SIGKILL
        # The dead restore's lock stays until its TTL: no other restore may start meanwhile.
        with pytest.raises(RestoreBusyError):
            await restore_corpus(store, docs(new), name="again", changes_keep=10)
    state = await stored(store)
    written = await store.revision() - revision
    if staged < DOCUMENTS:
        # Killed while staging: the corpus is exactly as before, and nothing was written.
        assert state == old
        assert written == 0
    else:
        # Killed with everything staged: before, during or after the switch. Redis runs a
        # script to its end whatever its client does, so the corpus is one or the other.
        assert state in (old, new)
        assert written == (0 if state == old else DOCUMENTS + DOCUMENTS // 2)
    # The dead restore's staging keys expire by themselves.
    assert all(watcher.pttl(key) > 0 for key in staging_keys(store))
    watcher.close()

    # Once the lock expired, a restore started afresh completes.
    await asyncio.sleep(CHILD_LOCK_TTL_S + 0.2)
    await restore_corpus(store, docs(new), name="again", changes_keep=10)
    assert await stored(store) == new
