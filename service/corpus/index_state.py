"""A search index built from every document in the store, for one encoder."""

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from core.documents import DocumentStore
from models.index import IndexConfig, SearchIndex
from service.corpus.embedder import DocumentEmbedder
from service.engine import Engine

_SCAN_PAGE = 1000


@dataclass(frozen=True)
class IndexState:
    """A search index and the encoder its embeddings came from; replaced whole on rebuild."""

    index: SearchIndex
    encoder_checksum: str
    ids: dict[int, str]  # number -> document id, for the documents in `index`


async def build_index(
    store: DocumentStore,
    embedder: DocumentEmbedder,
    engine: Engine,
    config: IndexConfig,
    *,
    known: Mapping[int, np.ndarray] | None = None,
    known_revision: int = -1,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[IndexState, int]:
    """An index of every document for `engine`, and the revision it reflects.

    `known` holds embeddings by this encoder of documents as of `known_revision` (a bundle's
    snapshot): a document last written at or before it still has that text, so it is reused.
    """
    known = known or {}
    revision = await store.revision()  # before the scan: later changes are replayed
    total = await store.count()
    index = SearchIndex(engine.dim, config)
    ids: dict[int, str] = {}
    if on_progress is not None:
        on_progress(0, total)
    async for page in store.scan(_SCAN_PAGE):
        reused = [known.get(d.number) if d.revision <= known_revision else None for d in page]
        stale = [doc.text for doc, vector in zip(page, reused, strict=True) if vector is None]
        fresh = iter(await embedder.embed(engine, stale))
        vectors = np.stack(
            [vector if vector is not None else next(fresh) for vector in reused]
        )  # (page, dim)
        numbers = [doc.number for doc in page]
        await asyncio.to_thread(index.upsert, numbers, vectors, [d.metadata for d in page])
        ids.update(zip(numbers, (doc.id for doc in page), strict=True))
        if on_progress is not None:
            on_progress(len(ids), total)
    return IndexState(index, engine.encoder.checksum, ids), revision
