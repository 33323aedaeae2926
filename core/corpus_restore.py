"""Restoring a corpus file (a snapshot's documents) into the store: the corpus becomes exactly
the file's documents, at one instant, through writes that every replica follows.

1. Take the restore lock: one restore at a time. It has a TTL, renewed after every batch, so
   a restoring process that dies frees it by itself.
2. Read the revision R_s and hold the change log after it (core/corpus_snapshot.py).
3. Stage: each batch of the file goes into staging hashes of this restore's own (texts,
   metadata) and is compared with the live documents; the ids that differ go into its apply
   set. The live corpus is not touched, so a crash here leaves it as it was; the staging
   keys expire an hour after their last batch.
4. The live ids that the file lacks join the apply set.
5. Switch: one script (core/corpus_scripts.py SWITCH) compares the apply set, and every id
   written since R_s (whose comparison may be stale), once more, writes each difference as an
   upsert or a delete with its change-log entry, and records the restore. Every other client
   sees the old corpus or the new one, never a mix; a restore whose lock expired meanwhile
   switches nothing.
6. WAIT for replicas as every write does; drop the staging keys, the lock and the hold.

Restoring the corpus it already holds changes nothing: no revision, no change-log entry, no
document for any replica to embed again.
"""

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from redis.exceptions import RedisError

from core import corpus_scripts as scripts
from core.corpus_files import batched, metadata_json
from core.corpus_snapshot import ChangeLogHold
from core.documents import ChangeLogGapError, DocumentStore, NewDocument, StoreUnavailableError

T = TypeVar("T")

_BATCH = 500
_STAGE_TTL_MS = 3_600_000  # staging keys of a restore that died go this long after its last batch
_ATTEMPTS = 3  # switches retried after the change log was trimmed under the comparison


class RestoreBusyError(RuntimeError):
    """Another restore holds the lock (or one that died has not let it expire yet)."""

    def __init__(self) -> None:
        super().__init__("another restore of this corpus is running")


class RestoreLockLostError(RuntimeError):
    """This restore's lock expired and was taken before its switch: nothing was changed."""

    def __init__(self) -> None:
        super().__init__("the restore lost its lock before switching; nothing was changed")


@dataclass(frozen=True)
class RestoreResult:
    documents: int  # in the file
    upserted: int  # written because absent or different
    deleted: int  # live documents the file lacks
    revision: int  # the corpus revision right after the switch


async def restore_corpus(
    store: DocumentStore,
    documents: Iterable[NewDocument],
    *,
    name: str,
    changes_keep: int,
    lock_ttl_s: float = 30.0,
    on_progress: Callable[[int], None] | None = None,
) -> RestoreResult:
    """Make the corpus equal to `documents` (unique ids), atomically; see the module doc.

    Raises RestoreBusyError, RestoreLockLostError, StoreUnavailableError; the corpus is then
    unchanged (or, for StoreUnavailableError after the switch was sent, possibly restored).
    """
    keys = store.keys
    token = uuid.uuid4().hex
    lock_ttl_ms = max(1, round(lock_ttl_s * 1000))
    try:
        acquired = await store.client.set(keys.restore_lock, token, nx=True, px=lock_ttl_ms)
    except RedisError as error:
        raise StoreUnavailableError() from error
    if not acquired:
        raise RestoreBusyError()
    hold = ChangeLogHold(store, changes_keep)
    staging = _Staging(store, token, lock_ttl_ms)
    try:
        since = await store.revision()
        await hold.hold(since)
        count = await staging.stage(documents, hold, on_progress)
        await staging.mark_removed()
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                reply = await staging.switch(since, name)
                break
            except ChangeLogGapError:
                # Trimmed under the hold (a batch slower than the hold's lifetime): compare
                # every live document again from a new position.
                if attempt == _ATTEMPTS:
                    raise
                since = await store.revision()
                await hold.hold(since)
                await staging.compare_all()
        return RestoreResult(count, int(reply[1]), int(reply[2]), int(reply[3]))
    finally:
        await staging.drop()
        await hold.release()


class _Staging:
    def __init__(self, store: DocumentStore, token: str, lock_ttl_ms: int) -> None:
        self.store = store
        self.token = token
        self.lock_ttl_ms = lock_ttl_ms
        keys = store.keys
        self.texts = keys.restore_texts(token)
        self.metadata = keys.restore_metadata(token)
        self.apply = keys.restore_apply(token)
        client = store.client
        self._renew = client.register_script(scripts.RENEW_LOCK)
        self._release = client.register_script(scripts.RELEASE_LOCK)
        self._switch = client.register_script(scripts.SWITCH)

    async def stage(
        self,
        documents: Iterable[NewDocument],
        hold: ChangeLogHold,
        on_progress: Callable[[int], None] | None,
    ) -> int:
        count = 0
        batches: Iterator[list[NewDocument]] = batched(documents, _BATCH)
        while True:
            # Reading and parsing the file happens off the event loop.
            batch = await asyncio.to_thread(next, batches, None)
            if batch is None:
                return count
            await self._stage_batch(batch)
            await hold.renew()
            count += len(batch)
            if on_progress is not None:
                on_progress(len(batch))

    async def _stage_batch(self, batch: list[NewDocument]) -> None:
        texts = {doc.id: doc.text for doc in batch}
        metadata = {doc.id: metadata_json(doc.metadata) for doc in batch}

        async def write() -> list[Any]:
            async with self.store.client.pipeline(transaction=False) as pipe:
                pipe.hset(self.texts, mapping=texts)
                pipe.hset(self.metadata, mapping=metadata)
                for key in (self.texts, self.metadata, self.apply):
                    pipe.pexpire(key, _STAGE_TTL_MS)
                return await pipe.execute()

        await self._call(write())
        await self._renew_lock()
        live = await self.store.get_many(list(texts))
        differ = [
            doc_id
            for doc_id, doc in zip(texts, live, strict=True)
            if doc is None
            or doc.text != texts[doc_id]
            or metadata_json(doc.metadata) != metadata[doc_id]
        ]
        await self._add(differ)

    async def mark_removed(self) -> None:
        """Every live id the staged corpus lacks joins the apply set."""
        cursor: str | None = None
        while True:
            ids = await self._live_ids(cursor)
            if not ids:
                return

            flags = await self._call(self._staged(ids))
            await self._add(doc_id for doc_id, found in zip(ids, flags, strict=True) if not found)
            await self._renew_lock()
            cursor = ids[-1]

    async def compare_all(self) -> None:
        """After the log was trimmed: every live and every staged id is compared in the switch."""
        cursor: str | None = None
        while ids := await self._live_ids(cursor):
            await self._add(ids)
            cursor = ids[-1]
        staged_cursor = 0
        while True:
            staged_cursor, page = await self._call(
                self.store.client.hscan(self.texts, staged_cursor, count=_BATCH)
            )
            await self._add(page)
            await self._renew_lock()
            if staged_cursor == 0:
                return

    async def switch(self, since: int, name: str) -> list[Any]:
        keys = self.store.keys
        script_keys = [
            keys.corpus_revision,
            keys.corpus_changes,
            keys.document_ids,
            keys.document_numbers,
            keys.document_number_counter,
            keys.restore_lock,
            self.texts,
            self.metadata,
            self.apply,
            keys.last_restore,
        ]
        at = datetime.now(UTC).isoformat(timespec="seconds")
        args = [self.token, since, keys.document(""), name, at]
        wait = self.store.wait

        async def run() -> list[Any]:
            if not wait.replicas:
                return await self._switch(keys=script_keys, args=args)
            # WAIT on the script's own connection, as core/documents.py does for every write.
            async with self.store.client.pipeline(transaction=False) as pipe:
                await self._switch(keys=script_keys, args=args, client=pipe)
                pipe.wait(wait.replicas, wait.timeout_ms)
                result, acknowledged = await pipe.execute()
            if result[0] == "ok":
                wait.check(int(acknowledged))
            return result

        reply = await self._call(run())
        if reply[0] == "lost-lock":
            raise RestoreLockLostError()
        if reply[0] == "gap":
            raise ChangeLogGapError(f"the change log no longer continues from {since}")
        return reply

    async def drop(self) -> None:
        """Staging keys and lock; if Redis does not answer, they expire by themselves."""
        with contextlib.suppress(RedisError):
            await self.store.client.unlink(self.texts, self.metadata, self.apply)
            await self._release(keys=[self.store.keys.restore_lock], args=[self.token])

    async def _live_ids(self, cursor: str | None) -> list[str]:
        start = f"({cursor}" if cursor else "-"
        return await self._call(
            self.store.client.zrange(
                self.store.keys.document_ids, start, "+", bylex=True, offset=0, num=_BATCH
            )
        )

    async def _staged(self, ids: list[str]) -> list[Any]:
        """Whether each id is in the staged corpus; one round trip."""
        async with self.store.client.pipeline(transaction=False) as pipe:
            for doc_id in ids:
                pipe.hexists(self.texts, doc_id)
            return await pipe.execute()

    async def _renew_lock(self) -> None:
        keys = [self.store.keys.restore_lock]
        renewed = await self._call(self._renew(keys=keys, args=[self.token, self.lock_ttl_ms]))
        if not renewed:
            raise RestoreLockLostError()

    async def _add(self, ids: Iterable[str]) -> None:
        """Ids for the switch to compare."""
        members = dict.fromkeys(ids, 0)
        if members:
            await self._call(self.store.client.zadd(self.apply, members))

    @staticmethod
    async def _call(operation: Awaitable[T]) -> T:
        try:
            return await operation
        except RedisError as error:
            raise StoreUnavailableError() from error
