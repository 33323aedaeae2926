"""The replica's document index, derived from Redis and kept in step with it.

On start: seed the demo corpus (first start only), read every document, embed them (from
the on-disk cache when possible), build the index. Then follow the change log in order
(XREAD BLOCK) and apply each change, whichever replica wrote it, by re-reading the
document's current state: applying an old entry late can only install a state that a later
entry also installs, so the index converges on Redis and a deleted document never returns.
It also notices a new encoder (the index is rebuilt for it), a store that lost its data
(rebuilt), a change log that no longer continues from its position (trimmed while it was away,
or rewritten by a failover that lost writes: rebuilt), and, through AnchorSync, a new
document-anchor sample. `retained_revision` is what it still needs of the log, which
service/corpus/changelog.py reports so that the log is never trimmed under it.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

import numpy as np

from core.documents import Change, ChangeLogGapError, DocumentStore, StoreUnavailableError
from core.settings import Settings
from core.store_types import CorpusSnapshot
from models.index import IndexConfig
from service.corpus.anchor_sync import AnchorSync
from service.corpus.demo import seed_demo
from service.corpus.embedder import DocumentEmbedder
from service.corpus.index_state import IndexState, build_index
from service.corpus.rank_sync import RankStoreSync
from service.engine import Engine, EngineHolder
from service.errors import NotReadyError
from service.queue_full import QueueFullError

logger = logging.getLogger(__name__)

_FOLLOW_BLOCK_MS = 1000  # XREAD BLOCK: wakes at once on a new entry, else polls this often
_FOLLOW_COUNT = 512  # change-log entries applied together
_RETRY_S = (0.5, 1.0, 2.0, 5.0)
_PREVIOUS_INDEX_GRACE_S = 60.0
_STAGE_ATTEMPTS = 3  # a hot swap's index is built again when the log broke during its build


class IndexFollower:
    def __init__(
        self,
        settings: Settings,
        store: DocumentStore,
        holder: EngineHolder,
        embedder: DocumentEmbedder,
        anchors: AnchorSync,
    ) -> None:
        self.settings = settings
        self.store = store
        self.holder = holder
        self.embedder = embedder
        self.anchors = anchors
        self.ranks = RankStoreSync(settings)  # RANKSERVE_PRECOMPUTED_RANKS
        self.config = IndexConfig(
            kind=settings.search_index,
            nlist=settings.ivf_nlist,
            nprobe=settings.ivf_nprobe,
            use_gpu=settings.device != "cpu",
        )
        self.state: IndexState | None = None
        # The index a hot swap replaced, for requests that took the old engine just before.
        self._previous: IndexState | None = None
        self._swap_lock = asyncio.Lock()
        self.applied_revision = 0
        # The change applied at applied_revision, checked against the log on every read; None
        # right after a full build, which reads documents, not the log.
        self._last_change: Change | None = None
        # While a hot swap builds an index beside the live one: the log position it started
        # from, older than applied_revision once the follower moves on.
        self._stage_floor: int | None = None
        self._applied = asyncio.Condition()
        self._loading: str | None = "waiting for the model"  # None once the first load is done
        self._last_error: str | None = None

    def not_ready_reason(self) -> str | None:
        """For /ready: None once the first index is built and the anchors are in place."""
        if self._loading is None:
            return None
        error = f" ({self._last_error})" if self._last_error else ""
        return f"document index: {self._loading}{error}"

    @property
    def retained_revision(self) -> int:
        """The oldest revision after which this replica may still read the change log."""
        floor = self._stage_floor
        return self.applied_revision if floor is None else min(floor, self.applied_revision)

    def ready_state(self, engine: Engine) -> IndexState:
        """The index for this engine's encoder, or NotReadyError."""
        state = self.state
        if state is None or self._loading is not None:
            # Until the first load is done, including the anchors sampled from the documents.
            raise NotReadyError(self.not_ready_reason() or "the document index is not ready")
        if state.encoder_checksum != engine.encoder.checksum:
            previous = self._previous
            if previous is not None and previous.encoder_checksum == engine.encoder.checksum:
                return previous
            raise NotReadyError("the document index is being rebuilt for the new model")
        return state

    async def wait_applied(self, revision: int) -> bool:
        """Wait (bounded) until this replica's index includes `revision`; False on timeout.

        The write is durable either way; this only gives a client read-your-writes on search.
        """
        async with self._applied:
            try:
                await asyncio.wait_for(
                    self._applied.wait_for(lambda: self.applied_revision >= revision),
                    self.settings.write_visibility_timeout_s,
                )
            except TimeoutError:
                logger.warning("revision %d not indexed within the visibility timeout", revision)
                return False
        return True

    async def run(self) -> None:
        """Load, then follow the change log until cancelled; retries whatever Redis breaks."""
        engine = await self.holder.wait_ready()
        await self._retrying(lambda: seed_demo(self.store, self.settings.demo_corpus))
        await self._retrying(lambda: self._rebuild(engine))
        await self._retrying(lambda: self.anchors.sync(force_check=True))
        self._loading = None
        while True:
            await self._retrying(self._follow_locked)

    async def stage(
        self, engine: Engine, snapshot: CorpusSnapshot | None, install: Callable[[], None]
    ) -> None:
        """Hot swap (service/engine_switch.py): index the documents for `engine` beside the
        live index, reusing the bundle's embeddings of documents unchanged since its revision,
        catch up on the change log, then `install` the engine together with the index."""
        if self.state is None:
            # The first index is not built yet; it will be built for whatever engine is live.
            install()
            return
        known: dict[int, np.ndarray] = {}
        known_revision = -1
        if snapshot is not None:
            known = dict(zip(snapshot.ids, snapshot.embeddings, strict=True))
            known_revision = snapshot.revision
        self._stage_floor = self.applied_revision  # below the build's start: the log stays
        try:
            for attempt in range(1, _STAGE_ATTEMPTS + 1):
                state, revision = await build_index(
                    self.store,
                    self.embedder,
                    engine,
                    self.config,
                    known=known,
                    known_revision=known_revision,
                )
                async with self._swap_lock:
                    last: Change | None = None
                    try:
                        while changes := await self.store.changes_after(
                            revision, count=_FOLLOW_COUNT
                        ):
                            await self._apply_changes(engine, state, changes)
                            revision, last = changes[-1].revision, changes[-1]
                    except ChangeLogGapError as error:
                        if attempt == _STAGE_ATTEMPTS:
                            raise
                        logger.warning("document index: %s; building it again", error)
                        continue
                    previous, self._previous, self.state = self.state, self.state, state
                    install()
                    if revision > self.applied_revision:
                        self._last_change = last
                    await self._set_applied(max(revision, self.applied_revision))
                break
        finally:
            self._stage_floor = None
        # Long enough for any request that took the old engine to reach its index.
        asyncio.get_running_loop().call_later(
            _PREVIOUS_INDEX_GRACE_S, self._forget_previous, previous
        )
        logger.info(
            "document index: swapped to %s at revision %d, %d of %d embeddings from the bundle",
            engine.version,
            revision,
            sum(1 for number in state.ids if number in known),
            len(state.ids),
        )

    async def _follow_locked(self) -> None:
        # A hot swap (stage) installs its index between two rounds, never during one.
        async with self._swap_lock:
            await self._follow_once()

    async def _retrying(self, step: Callable[[], Awaitable[None]]) -> None:
        """Run `step` until it succeeds; Redis outages and a full encoder queue are waited out.

        Anything else is logged with its traceback and retried too: a follower that died
        silently would leave this replica's index stale for good.
        """
        failures = 0
        while True:
            try:
                await step()
            except (StoreUnavailableError, QueueFullError) as error:
                self._last_error = str(error)
                logger.warning("document index: %s (%s); retrying", error, error.__cause__)
            except Exception as error:
                self._last_error = "unexpected failure"
                logger.exception("document index: unexpected failure (%s); retrying", error)
            else:
                self._last_error = None
                return
            await asyncio.sleep(_RETRY_S[min(failures, len(_RETRY_S) - 1)])
            failures += 1

    def _forget_previous(self, previous: IndexState) -> None:
        if self._previous is previous:
            self._previous = None

    def _progress(self, done: int, total: int) -> None:
        if self._loading is not None:
            self._loading = f"loading {done}/{total} documents"

    async def _rebuild(self, engine: Engine) -> None:
        """A new index from every document in the store, embedded with `engine`'s encoder."""
        self.state, revision = await build_index(
            self.store, self.embedder, engine, self.config, on_progress=self._progress
        )
        self._previous = None
        self._last_change = None
        await self._set_applied(revision)
        logger.info(
            "document index: %d documents at revision %d (%s)",
            len(self.state.ids),
            revision,
            self.state.index.kind,
        )

    async def _follow_once(self) -> None:
        engine = self.holder.current
        state = self.state
        assert engine is not None and state is not None
        if state.encoder_checksum != engine.encoder.checksum:
            await self._rebuild(engine)
            return
        try:
            changes = await self.store.changes_after(
                self.applied_revision,
                last=self._last_change,
                count=_FOLLOW_COUNT,
                block_ms=_FOLLOW_BLOCK_MS,
            )
        except ChangeLogGapError as error:
            logger.warning("document index: %s; rebuilding from every document", error)
            await self._rebuild(engine)
            return
        if changes:
            await self._apply_changes(engine, state, changes)
            self._last_change = changes[-1]
            await self._set_applied(changes[-1].revision)
        elif await self.store.revision() < self.applied_revision:
            logger.warning("the store's revision went back (data lost or flushed): rebuilding")
            await self._rebuild(engine)
        await self.anchors.sync(force_check=False)
        # After the sync, which may have given the engine new anchors: their store follows.
        await self.ranks.ensure(self.holder.current, self.state)

    async def _apply_changes(
        self, engine: Engine, state: IndexState, changes: list[Change]
    ) -> None:
        numbers = {change.id: change.number for change in changes}
        touched = list(numbers)
        current = await self.store.get_many(touched)
        present = [doc for doc in current if doc is not None]
        absent = [
            numbers[doc_id] for doc_id, doc in zip(touched, current, strict=True) if doc is None
        ]
        vectors = await self.embedder.embed(engine, [doc.text for doc in present])

        def write() -> None:
            state.index.remove(absent)
            state.index.upsert([d.number for d in present], vectors, [d.metadata for d in present])
            for number in absent:
                state.ids.pop(number, None)
            state.ids.update((doc.number, doc.id) for doc in present)

        await asyncio.to_thread(write)

    async def _set_applied(self, revision: int) -> None:
        async with self._applied:
            self.applied_revision = revision
            self._applied.notify_all()
