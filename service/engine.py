"""The serving engine (encoder + anchor matrix + version) and the holder a hot swap replaces.

Every request reads `holder.current` once, at its start, and uses only that engine: a swap
rebinds one reference, so in-flight requests finish on the engine they began with.
"""

import asyncio
from dataclasses import dataclass

import torch

from core.loading import default_version, settings_anchors, settings_encoder
from core.settings import Settings
from models.anchors import AnchorSet
from models.encoder import Encoder
from models.scoring import PairScores, score_embedded_pairs


@dataclass(frozen=True)
class Engine:
    encoder: Encoder
    anchors: AnchorSet
    version: str
    name: str

    @property
    def dim(self) -> int:
        return self.encoder.dim

    @property
    def max_tokens(self) -> int:
        return self.encoder.max_seq_length

    def score_pairs(
        self, embeddings: torch.Tensor, left: list[int], right: list[int]
    ) -> PairScores:
        """Cosine and rank similarity of rows `left[k]`, `right[k]` of this engine's unit
        embeddings, rank vectors against this engine's anchors."""
        return score_embedded_pairs(embeddings, self.anchors, left, right)


def load_engine(settings: Settings) -> Engine:
    """The encoder and anchor matrix that the settings name (anchors cached on disk)."""
    encoder = settings_encoder(settings)
    return Engine(
        encoder=encoder,
        anchors=settings_anchors(settings, encoder),
        version=default_version(encoder),
        name=encoder.name,
    )


class EngineHolder:
    """The live engine; `swap` replaces it in one assignment, `wait_ready` awaits the first."""

    def __init__(self) -> None:
        self._current: Engine | None = None
        self._loaded = asyncio.Event()
        # Set once the first load has succeeded or failed: the swap manager starts after it.
        self.first_attempt = asyncio.Event()
        self.load_error: str | None = None

    @property
    def current(self) -> Engine | None:
        return self._current

    def swap(self, engine: Engine) -> Engine | None:
        """Install `engine`; returns the one it replaced (None for the first)."""
        previous, self._current = self._current, engine
        self._loaded.set()
        return previous

    async def wait_ready(self) -> Engine:
        await self._loaded.wait()
        assert self._current is not None
        return self._current
