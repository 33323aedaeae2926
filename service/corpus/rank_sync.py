"""The replica's precomputed-rank store (RANKSERVE_PRECOMPUTED_RANKS), kept built for the live
anchors: a new index, new anchors (a hot swap, anchors sampled from the documents) or a new
encoder get a new store, filled in the background while searches score the documents that
lack a row exactly. Writes keep it in step themselves (SearchIndex.upsert and remove).

"auto" picks the code width when it builds a store: whole ranks (16 bits) while every document
fits the budget at that width, else 8 bits. A 16-bit store the documents outgrow is rebuilt at
8 bits (bench.search ranked a million documents at M = 10k in 207 s on a Zen 4); it stays at 8
bits when documents are removed, until the anchors change, so that a corpus at the edge does not
flap."""

import asyncio
import logging
import time

import numpy as np

from core.settings import Settings
from models.index import SearchIndex
from models.rank_codes import RankBits, RankCodec
from models.rank_store import RankStore
from service.corpus.index_state import IndexState
from service.engine import Engine

logger = logging.getLogger(__name__)

_BACKFILL_CHUNK = 1024  # documents ranked per worker-thread call: about 0.1 s at M = 10k

_BITS: dict[str, RankBits] = {"16bit": 16, "8bit": 8, "4bit": 4}


def store_bits(setting: str, documents: int, anchors: int, budget_bytes: int) -> RankBits:
    """The code width of a new store for `documents` documents and `anchors` anchors, under a
    setting other than "off". "auto" takes whole ranks where they are lossless and every
    document fits: on a Cascade Lake Xeon they made a /search 1.33x an /encode against 1.65x
    with 8 bits, and 1.24x against 1.34x on a Zen 4 (bench.http_search, docs/benchmarks.md)."""
    if setting != "auto":
        return _BITS[setting]
    whole = RankCodec(anchors, 16)
    return 16 if whole.lossless and documents * whole.row_bytes <= budget_bytes else 8


class RankStoreSync:
    def __init__(self, settings: Settings) -> None:
        self.setting = settings.precomputed_ranks
        self.budget_bytes = settings.precomputed_ranks_budget_mb * 2**20
        self.keep_warm_s = settings.precomputed_ranks_keep_warm_s
        self._task: asyncio.Task[None] | None = None

    async def ensure(self, engine: Engine | None, state: IndexState | None) -> None:
        """Give `state`'s index a store for `engine`'s anchors, unless it has one already."""
        if self.setting == "off" or engine is None or state is None:
            return
        if state.encoder_checksum != engine.encoder.checksum:
            return  # the index is about to be rebuilt for this encoder
        index = state.index
        anchors = engine.anchors
        key = await asyncio.to_thread(lambda: anchors.key)  # a digest of the matrix, once
        current = index.rank_store
        if current is not None and current.anchors_key == key:
            if not self._outgrown(current, index):
                return
            logger.info("rank store: %d documents outgrew 16-bit codes; 8 bits", len(index))
        m = int(engine.anchors.embeddings.shape[0])
        bits = store_bits(self.setting, len(index), m, self.budget_bytes)
        store = RankStore(engine.anchors.embeddings, key, bits, self.budget_bytes, self.keep_warm_s)
        missing = await asyncio.to_thread(index.attach_rank_store, store)
        self.stop()
        self._task = asyncio.create_task(self._backfill(index, store, missing), name="ranks")

    def _outgrown(self, store: RankStore, index: SearchIndex) -> bool:
        """Whether "auto" chose whole ranks for `store` and the documents no longer fit it."""
        return self.setting == "auto" and store.codec.bits == 16 and len(index) > store.capacity

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _backfill(self, index: SearchIndex, store: RankStore, ids: np.ndarray) -> None:
        start, stored = time.perf_counter(), 0
        logger.info("rank store %s: ranking %d documents in the background", store.key, len(ids))
        try:
            # Rows are taken in the order they are written: neighbours' rows side by side.
            ids = await asyncio.to_thread(index.neighbour_order, ids)
        except Exception:
            # The order only speeds reads up: without it the store still fills, in id order.
            logger.exception("rank store %s: no neighbour order, filling in id order", store.key)
        try:
            for offset in range(0, len(ids), _BACKFILL_CHUNK):
                chunk = ids[offset : offset + _BACKFILL_CHUNK]
                done = await asyncio.to_thread(index.backfill_ranks, store, chunk)
                if done is None:
                    return  # replaced by a newer store
                stored += done
        except Exception:
            # Searches stay correct without the rows (scored exactly); say why they are slower.
            logger.exception("rank store %s: backfill failed after %d documents", store.key, stored)
            return
        logger.info(
            "rank store %s: %d documents in %.1f s, %d MB of memory",
            store.key,
            stored,
            time.perf_counter() - start,
            store.bytes_used // 2**20,
        )
