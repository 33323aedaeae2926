"""What a bundle carries of the corpus: the anchor matrix a replica would build for the new
encoder, and every document's embedding at the revision read before the scan."""

import numpy as np

from core.documents import AnchorRecord, DocumentStore, StoredDocument
from core.embedding_cache import EmbeddingCache
from core.loading import settings_anchors
from core.redis_clients import async_redis
from core.redis_keys import RedisKeys
from core.settings import Settings
from models.anchors import AnchorSet, build_anchor_set
from models.encoder import Encoder


def serving_anchors(settings: Settings, encoder: Encoder, texts: list[str] | None) -> AnchorSet:
    """The anchor matrix a replica would build for `encoder`: from `texts` when the anchors
    are sampled documents (anchor_source "documents"), else from the anchor corpus file."""
    if texts is not None:
        return build_anchor_set(encoder, texts, settings.cache_dir)
    return settings_anchors(settings, encoder)


async def scan_documents(
    settings: Settings, keys: RedisKeys
) -> tuple[int, list[StoredDocument], AnchorRecord | None]:
    client = async_redis(settings, decode_responses=True)
    try:
        store = DocumentStore(client, keys)
        # The revision before the scan: every change after it is replayed by the loader, so
        # a document the scan saw in a newer state is only re-embedded, never lost.
        revision = await store.revision()
        documents = [doc async for page in store.scan() for doc in page]
        record = None
        if settings.anchor_source == "documents":
            record = await store.anchor_record(
                settings.anchor_count or 0, settings.anchor_seed or 0
            )
        return revision, documents, record
    finally:
        await client.aclose()


def embed_documents(settings: Settings, encoder: Encoder, texts: list[str]) -> np.ndarray:
    """(n, dim) embeddings, through the replicas' on-disk embedding cache."""
    cache = EmbeddingCache.for_encoder(settings.cache.embeddings, encoder)
    try:
        return cache.read_through(texts, lambda missing: encoder.encode(missing).cpu().numpy())
    finally:
        cache.close()
