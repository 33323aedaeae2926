"""The searchable corpus of one API replica: derived from Redis, kept in step with it.

On start the replica seeds the demo corpus (first start only), reads every document from the
store, embeds them (from the on-disk cache when possible) and builds the search index. A
follower task then reads the change log in order (XREAD BLOCK) and applies each change,
whichever replica wrote it, by re-reading the document's current state: applying an old
entry late can only install a state that a later entry also installs, so the index converges
on Redis and a deleted document never returns. It also notices a new encoder (the engine was
swapped: the index is rebuilt with it), a store that lost its data (rebuilt), and a new
document-anchor sample chosen by another replica (the engine's anchors are swapped).
"""

import asyncio
import dataclasses
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from core.documents import (
    AnchorRecord,
    Change,
    DocumentStore,
    NewDocument,
    StoredDocument,
    StoreUnavailableError,
)
from core.embedding_cache import EmbeddingCache
from core.registry import CorpusSnapshot
from core.settings import Settings
from models.anchors import AnchorSet
from models.checksums import sha256_texts
from models.encoder import Encoder
from models.index import IndexConfig, Scalar, SearchHits, SearchIndex, metadata_terms
from service.batching import Batcher, QueueFullError
from service.engine import Engine, EngineHolder
from service.errors import NotReadyError

logger = logging.getLogger(__name__)

_FOLLOW_BLOCK_MS = 1000  # XREAD BLOCK: wakes at once on a new entry, else polls this often
_FOLLOW_COUNT = 512  # change-log entries applied together
_SCAN_PAGE = 1000
_ANCHOR_CHECK_S = 10.0
_RETRY_S = (0.5, 1.0, 2.0, 5.0)
_PREVIOUS_INDEX_GRACE_S = 60.0


@dataclass(frozen=True)
class IndexState:
    """A search index and the encoder its embeddings came from; replaced whole on rebuild."""

    index: SearchIndex
    encoder_checksum: str
    ids: dict[int, str]  # number -> document id, for the documents in `index`


@dataclass(frozen=True)
class Hit:
    document: StoredDocument
    score: float
    cosine: float
    rank: float


def read_demo_corpus(path: Path) -> list[NewDocument]:
    """JSON lines {"id", "text", "metadata"}."""
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [NewDocument(row["id"], row["text"], row.get("metadata") or {}) for row in rows]


def sample_anchor_texts(
    documents: Sequence[StoredDocument], count: int | None, seed: int
) -> list[str]:
    """A seeded sample of distinct texts, from documents in id order (same corpus, same sample)."""
    texts = list(dict.fromkeys(doc.text for doc in sorted(documents, key=lambda d: d.id)))
    if count is None or count >= len(texts):
        return texts
    return random.Random(seed).sample(texts, count)


class Corpus:
    def __init__(
        self, settings: Settings, store: DocumentStore, holder: EngineHolder, batcher: Batcher
    ) -> None:
        self.settings = settings
        self.store = store
        self.holder = holder
        self.batcher = batcher
        self.index_config = IndexConfig(
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
        self._applied = asyncio.Condition()
        self._caches: dict[str, EmbeddingCache] = {}
        self._loading: str | None = "waiting for the model"  # None once the first load is done
        self._last_error: str | None = None
        self._anchors_checked = 0.0

    # ---- what routes call -------------------------------------------------------------

    def not_ready_reason(self) -> str | None:
        """For /ready: None once the first index is built and the anchors are in place."""
        if self._loading is None:
            return None
        error = f" ({self._last_error})" if self._last_error else ""
        return f"document index: {self._loading}{error}"

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

    async def embed(self, engine: Engine, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) float32 unit embeddings: cached ones from disk, the rest encoded and cached."""
        cache = self._cache(engine.encoder)
        lookup = await asyncio.to_thread(cache.lookup, texts)
        encoded: dict[str, np.ndarray] = {}
        step = self.settings.encode_batch_size
        # Chunk by chunk through the batcher, so a large upsert shares the encoder fairly.
        for start in range(0, len(lookup.missing), step):
            chunk = lookup.missing[start : start + step]
            result = await self.batcher.encode(engine, chunk)
            array = result.embeddings.numpy()  # (chunk, dim)
            await asyncio.to_thread(cache.put_many, chunk, array)
            encoded.update(zip(chunk, array, strict=True))
        return lookup.assemble(encoded)

    async def upsert(self, engine: Engine, documents: Sequence[NewDocument]) -> int:
        """Embed (so the follower finds the vectors cached), write, wait until indexed here."""
        await self.embed(engine, [doc.text for doc in documents])
        _, revision = await self.store.upsert(documents)
        await self.wait_applied(revision)
        return revision

    async def delete(self, ids: Sequence[str]) -> tuple[list[bool], int]:
        existed, revision = await self.store.delete(ids)
        await self.wait_applied(revision)
        return existed, revision

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

    async def search(
        self,
        engine: Engine,
        state: IndexState,
        query: torch.Tensor,
        *,
        top_k: int,
        candidates: int,
        lambda_inf: float,
        where: Mapping[str, Scalar] | None,
    ) -> list[Hit]:
        """Eq. 7 hits with each document's current text and metadata from the store.

        Reading the documents back from Redis drops any that were deleted, or whose metadata
        no longer passes the filter, after this replica last applied the change log.
        """
        hits: SearchHits = await self.batcher.run(
            lambda: state.index.search(
                query,
                engine.anchors.embeddings,
                top_k=top_k,
                candidates=candidates,
                lambda_inf=lambda_inf,
                where=where,
            )
        )
        numbers = hits.ids.tolist()
        ids = [state.ids.get(number) for number in numbers]
        known = [k for k, doc_id in enumerate(ids) if doc_id is not None]
        documents = await self.store.get_many([ids[k] for k in known])
        wanted = set(metadata_terms(where))
        results = []
        for k, doc in zip(known, documents, strict=True):
            if doc is None or doc.number != numbers[k]:
                continue
            if not wanted <= set(metadata_terms(doc.metadata)):
                continue
            results.append(
                Hit(
                    doc,
                    float(hits.scores[k]),
                    float(hits.cosine[k]),
                    float(hits.rank[k]),
                )
            )
        return results

    # ---- the background task ----------------------------------------------------------

    async def run(self) -> None:
        """Load, then follow the change log until cancelled; retries whatever Redis breaks."""
        engine = await self.holder.wait_ready()
        await self._retrying(self._seed_demo)
        await self._retrying(lambda: self._rebuild(engine))
        await self._retrying(lambda: self._sync_anchors(force_check=True))
        self._loading = None
        while True:
            await self._retrying(self._follow_locked)

    async def _follow_locked(self) -> None:
        # A hot swap (swap_engine) installs its index between two rounds, never during one.
        async with self._swap_lock:
            await self._follow_once()

    async def swap_engine(self, engine: Engine, snapshot: CorpusSnapshot | None) -> None:
        """Hot swap (service/swap.py): index the documents for `engine` beside the live index,
        reusing the bundle's embeddings of documents unchanged since its revision, catch up on
        the change log, then install engine and index together."""
        if self.state is None:
            # The first index is not built yet; it will be built for whatever engine is live.
            self.holder.swap(engine)
            return
        known: dict[int, np.ndarray] = {}
        known_revision = -1
        if snapshot is not None:
            known = dict(zip(snapshot.ids, snapshot.embeddings, strict=True))
            known_revision = snapshot.revision
        state, revision = await self.build_index(engine, known, known_revision)
        async with self._swap_lock:
            while changes := await self.store.changes_after(revision, count=_FOLLOW_COUNT):
                await self._apply_changes(engine, state, changes)
                revision = changes[-1].revision
            previous, self._previous, self.state = self.state, self.state, state
            self.holder.swap(engine)
            await self._set_applied(max(revision, self.applied_revision))
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
                self._last_error = f"{type(error).__name__}: {error}"
                logger.exception("document index: unexpected failure; retrying")
            else:
                self._last_error = None
                return
            await asyncio.sleep(_RETRY_S[min(failures, len(_RETRY_S) - 1)])
            failures += 1

    async def _seed_demo(self) -> None:
        path = self.settings.demo_corpus
        if path is None:
            return
        if await self.store.seed(read_demo_corpus(path)):
            logger.info("indexed the demo corpus %s", path)

    def _forget_previous(self, previous: IndexState) -> None:
        if self._previous is previous:
            self._previous = None

    async def _rebuild(self, engine: Engine) -> None:
        """A new index from every document in the store, embedded with `engine`'s encoder."""
        self.state, revision = await self.build_index(engine)
        self._previous = None
        await self._set_applied(revision)
        logger.info(
            "document index: %d documents at revision %d (%s)",
            len(self.state.ids),
            revision,
            self.state.index.kind,
        )

    async def build_index(
        self,
        engine: Engine,
        known: Mapping[int, np.ndarray] | None = None,
        known_revision: int = -1,
    ) -> tuple[IndexState, int]:
        """An index of every document for `engine`, and the revision it reflects.

        `known` holds embeddings by this encoder of documents as of `known_revision` (a
        bundle's snapshot): a document last written at or before it still has that text.
        """
        known = known or {}
        revision = await self.store.revision()  # before the scan: later changes are replayed
        total = await self.store.count()
        index = SearchIndex(engine.dim, self.index_config)
        ids: dict[int, str] = {}
        if self._loading is not None:
            self._loading = f"loading 0/{total} documents"
        async for page in self.store.scan(_SCAN_PAGE):
            reused = [known.get(d.number) if d.revision <= known_revision else None for d in page]
            stale = [doc.text for doc, vector in zip(page, reused, strict=True) if vector is None]
            fresh = iter(await self.embed(engine, stale))
            vectors = np.stack(
                [vector if vector is not None else next(fresh) for vector in reused]
            )  # (page, dim)
            numbers = [doc.number for doc in page]
            await asyncio.to_thread(index.upsert, numbers, vectors, [d.metadata for d in page])
            ids.update(zip(numbers, (doc.id for doc in page), strict=True))
            if self._loading is not None:
                self._loading = f"loading {len(ids)}/{total} documents"
        return IndexState(index, engine.encoder.checksum, ids), revision

    async def _follow_once(self) -> None:
        engine = self.holder.current
        state = self.state
        assert engine is not None and state is not None
        if state.encoder_checksum != engine.encoder.checksum:
            await self._rebuild(engine)
            return
        changes = await self.store.changes_after(
            self.applied_revision, count=_FOLLOW_COUNT, block_ms=_FOLLOW_BLOCK_MS
        )
        if changes:
            await self._apply(engine, state, changes)
        elif await self.store.revision() < self.applied_revision:
            logger.warning("the store's revision went back (data lost or flushed): rebuilding")
            await self._rebuild(engine)
        await self._sync_anchors(force_check=False)

    async def _apply(self, engine: Engine, state: IndexState, changes: list[Change]) -> None:
        await self._apply_changes(engine, state, changes)
        await self._set_applied(changes[-1].revision)

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
        vectors = await self.embed(engine, [doc.text for doc in present])

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

    async def _sync_anchors(self, *, force_check: bool) -> None:
        """With anchor_source "documents": sample the anchors once, share them, install them.

        The sample is stored in Redis, so every replica uses the same anchors. It is drawn
        again when it holds fewer texts than asked for and the corpus has since doubled (the
        first start may see only the demo corpus).
        """
        if self.settings.anchor_source != "documents":
            return
        now = time.monotonic()
        if not force_check and now - self._anchors_checked < _ANCHOR_CHECK_S:
            return
        self._anchors_checked = now
        count, seed = self.settings.anchor_count, self.settings.anchor_seed or 0
        key_count = count or 0
        record = await self.store.anchor_record(key_count, seed)
        size = await self.store.count()
        wanted = size if count is None else min(count, size)
        if record is None or (len(record.texts) < wanted and size >= 2 * record.corpus_size):
            documents = [doc async for page in self.store.scan(_SCAN_PAGE) for doc in page]
            texts = sample_anchor_texts(documents, count, seed)
            if len(texts) >= 2:
                fresh = AnchorRecord(sha256_texts(texts), texts, len(documents))
                expected = record.checksum if record else None
                await self.store.replace_anchor_record(key_count, seed, expected, fresh)
                record = await self.store.anchor_record(key_count, seed)
        if record is None:
            logger.warning(
                "anchor_source=documents needs two documents; keeping the corpus anchors"
            )
            return
        engine = self.holder.current
        assert engine is not None
        if (
            engine.anchors.texts_checksum == record.checksum
            and engine.anchors.encoder_checksum == engine.encoder.checksum
        ):
            return
        vectors = await self.embed(engine, record.texts)
        anchors = AnchorSet(
            texts=record.texts,
            embeddings=torch.from_numpy(vectors).to(engine.anchors.device),
            texts_checksum=record.checksum,
            encoder_checksum=engine.encoder.checksum,
        )
        # Only if the engine was not swapped meanwhile; the next check handles a new one.
        if self.holder.current is engine:
            self.holder.swap(dataclasses.replace(engine, anchors=anchors))
            logger.info("anchors: %d sampled documents", anchors.count)

    def _cache(self, encoder: Encoder) -> EmbeddingCache:
        key = f"{encoder.checksum}-{encoder.max_seq_length}"
        if key not in self._caches:
            self._caches[key] = EmbeddingCache.for_encoder(
                self.settings.cache_dir / "embeddings", encoder
            )
        return self._caches[key]

    def close(self) -> None:
        for cache in self._caches.values():
            cache.close()
