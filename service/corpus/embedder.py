"""Document embeddings for the index: from the on-disk cache when there, else through the
batcher (so index work shares the encoder fairly with requests) and then cached."""

import asyncio
from collections.abc import Sequence

import numpy as np

from core.embedding_cache import EmbeddingCache
from core.settings import Settings
from models.encoder import Encoder
from service.batching import Batcher
from service.engine import Engine


class DocumentEmbedder:
    def __init__(self, settings: Settings, batcher: Batcher) -> None:
        self.settings = settings
        self.batcher = batcher
        self._caches: dict[str, EmbeddingCache] = {}

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

    def _cache(self, encoder: Encoder) -> EmbeddingCache:
        key = f"{encoder.checksum}-{encoder.max_seq_length}"
        if key not in self._caches:
            self._caches[key] = EmbeddingCache.for_encoder(self.settings.cache.embeddings, encoder)
        return self._caches[key]

    def close(self) -> None:
        for cache in self._caches.values():
            cache.close()
