"""The one component that replaces the live engine: the first load, a hot swap (with the
document index staged for the new encoder), and anchors sampled from the documents.

Every replacement is one assignment in the holder, so a request that took the old engine
finishes on it. With a document index, a new encoder's index is built beside the live one
and installed together with the engine, under the index's lock. After a new engine is in,
the heap is frozen out of the garbage collector's sight (service/heap.py).
"""

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Protocol

from core.store_types import CorpusSnapshot
from core.threads import in_own_thread
from models.anchors import AnchorSet
from models.cpu_products import prepare_anchors
from service.engine import Engine, EngineHolder
from service.heap import freeze_heap
from service.metrics import Metrics

logger = logging.getLogger(__name__)


class IndexStager(Protocol):
    """What the document index offers a swap (service/corpus/follower.py)."""

    async def stage(
        self, engine: Engine, snapshot: CorpusSnapshot | None, install: Callable[[], None]
    ) -> None: ...


class EngineSwitch:
    def __init__(
        self, holder: EngineHolder, metrics: Metrics, anchor_dtype: str, *, freezes_heap: bool
    ) -> None:
        self.holder = holder
        self.metrics = metrics
        # How every engine it installs holds its anchors (RANKSERVE_ANCHOR_DTYPE).
        self.anchor_dtype = anchor_dtype
        self.freezes_heap = freezes_heap  # RANKSERVE_FREEZE_HEAP
        self.index: IndexStager | None = None  # set by the corpus component

    async def first(self, engine: Engine) -> None:
        """The engine a replica starts with (service/app.py)."""
        engine = await in_own_thread(self._held, engine)
        self._install(engine)
        logger.info(
            "serving %s (%s), %d anchors", engine.name, engine.version, engine.anchors.count
        )
        await self._freeze_heap(thaw=False)

    async def swap(self, engine: Engine, snapshot: CorpusSnapshot | None) -> None:
        """A hot swap (service/swap.py): the index for `engine` first, then both at once."""
        # Before staging (the rank store is keyed by the anchors), off the event loop.
        engine = await in_own_thread(self._held, engine)
        if self.index is None:
            self._install(engine)
        else:
            await self.index.stage(engine, snapshot, lambda: self._install(engine))
        await self._freeze_heap(thaw=True)

    async def replace_anchors(self, engine: Engine, anchors: AnchorSet) -> bool:
        """Give the live engine new anchors; only if it is still `engine` (not swapped since)."""
        held = await in_own_thread(self._held, dataclasses.replace(engine, anchors=anchors))
        if self.holder.current is not engine:
            return False
        self._install(held)
        return True

    async def _freeze_heap(self, *, thaw: bool) -> None:
        if self.freezes_heap:
            await asyncio.to_thread(freeze_heap, thaw=thaw)

    def _held(self, engine: Engine) -> Engine:
        """`engine` with its anchors in this switch's dtype, the one place they are converted,
        and ready for the CPU kernel."""
        anchors = engine.anchors.stored_as(self.anchor_dtype)
        prepare_anchors(anchors.embeddings)
        return engine if anchors is engine.anchors else dataclasses.replace(engine, anchors=anchors)

    def _install(self, engine: Engine) -> None:
        self.holder.swap(engine)
        self.metrics.set_active_model(engine.version, engine.name)
