"""Anchors sampled from the documents (RANKSERVE_ANCHOR_SOURCE=documents, RankEncoder
footnote 4): one sample for every replica, kept in Redis, installed into the live engine."""

import logging
import random
import time
from collections.abc import Sequence

import torch

from core.documents import AnchorRecord, DocumentStore, StoredDocument
from core.settings import Settings
from models.anchors import AnchorSet
from models.checksums import sha256_texts
from service.corpus.embedder import DocumentEmbedder
from service.engine import EngineHolder
from service.engine_switch import EngineSwitch

logger = logging.getLogger(__name__)

_CHECK_S = 10.0
_SCAN_PAGE = 1000


def sample_anchor_texts(
    documents: Sequence[StoredDocument], count: int | None, seed: int
) -> list[str]:
    """A seeded sample of distinct texts, from documents in id order (same corpus, same sample)."""
    texts = list(dict.fromkeys(doc.text for doc in sorted(documents, key=lambda d: d.id)))
    if count is None or count >= len(texts):
        return texts
    return random.Random(seed).sample(texts, count)


class AnchorSync:
    def __init__(
        self,
        settings: Settings,
        store: DocumentStore,
        holder: EngineHolder,
        embedder: DocumentEmbedder,
        switch: EngineSwitch,
    ) -> None:
        self.settings = settings
        self.store = store
        self.holder = holder
        self.embedder = embedder
        self.switch = switch
        self._checked = 0.0

    async def sync(self, *, force_check: bool) -> None:
        """Sample the anchors once, share them, install them; then check every few seconds.

        The sample is drawn again when it holds fewer texts than asked for and the corpus has
        since doubled (the first start may see only the demo corpus).
        """
        if self.settings.anchor_source != "documents":
            return
        now = time.monotonic()
        if not force_check and now - self._checked < _CHECK_S:
            return
        self._checked = now
        record = await self._shared_record()
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
        vectors = await self.embedder.embed(engine, record.texts)
        anchors = AnchorSet(
            texts=record.texts,
            embeddings=torch.from_numpy(vectors).to(engine.anchors.device),
            texts_checksum=record.checksum,
            encoder_checksum=engine.encoder.checksum,
        )
        if await self.switch.replace_anchors(engine, anchors):
            logger.info("anchors: %d sampled documents", anchors.count)

    async def _shared_record(self) -> AnchorRecord | None:
        """The sample every replica uses, drawn (compare-and-set in Redis) when due."""
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
        return record
