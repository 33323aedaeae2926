"""The anchor corpus C of RankEncoder: its embedding matrix, resident on the encoder's device.

Encoding 10k anchors takes about a minute on two CPU cores, so the matrix is cached on disk,
keyed by the encoder's cache key (checksum and backend), the anchor texts' checksum and their
count.
"""

import dataclasses
import functools
import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from models.anchor_formats import hold
from models.atomic import save_npy
from models.cache_paths import CachePaths
from models.checksums import sha256_texts
from models.cpu_products import anchor_cosines
from models.encoder import Encoder
from models.ranking import rank_vectors_chunked


def read_sentences(path: Path) -> list[str]:
    """One sentence per line; blank lines dropped, surrounding whitespace stripped."""
    with path.open(encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip()]


def select_anchors(texts: list[str], count: int | None, seed: int | None = None) -> list[str]:
    """The first `count` texts, or a seeded sample of `count` when a seed is given."""
    if count is None or count >= len(texts):
        return list(texts)
    if count < 2:
        raise ValueError("at least two anchors are needed to rank")
    if seed is None:
        return texts[:count]
    return random.Random(seed).sample(texts, count)


@dataclass(frozen=True)
class AnchorSet:
    texts: list[str]
    embeddings: torch.Tensor  # (m, dim), L2-normalised, on the encoder's device; float32 or bf16
    texts_checksum: str
    encoder_checksum: str

    @property
    def count(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def device(self) -> torch.device:
        return self.embeddings.device

    @functools.cached_property
    def key(self) -> str:
        """Names this anchor matrix: what precomputed document ranks are valid for.

        The encoder and texts checksums name where it came from; the digest of the matrix
        itself also tells apart backends or devices that embed the same texts differently.
        """
        matrix = self.embeddings.detach().cpu().contiguous().view(torch.uint8)  # its bytes
        digest = hashlib.sha256(matrix.numpy().tobytes()).hexdigest()
        return (
            f"{self.encoder_checksum[:16]}-{self.texts_checksum[:16]}-m{self.count}-{digest[:16]}"
        )

    def stored_as(self, name: str) -> "AnchorSet":
        """These anchors with the matrix held in the format `name` (RANKSERVE_ANCHOR_DTYPE,
        models/anchor_formats.py); a new key, so rank stores follow."""
        held = hold(self.embeddings, name)
        return self if held is self.embeddings else dataclasses.replace(self, embeddings=held)

    def rank_vectors(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Normalised rank vectors (Eq. 2-3) of unit embeddings against these anchors."""
        return rank_vectors_chunked(embeddings.to(self.device), self.embeddings)  # (n, m)

    def nearest(self, embeddings: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The `k` anchors of highest cosine to each unit embedding, best first: the top of
        its rank vector (Eq. 2). Returns (n, k) cosines and (n, k) anchor indices, on the CPU."""
        cosines = anchor_cosines(embeddings.to(self.device), self.embeddings)  # (n, m)
        top = torch.topk(cosines, min(k, self.count), dim=1)
        return top.values.cpu(), top.indices.cpu()


def _cache_file(cache_dir: Path, encoder_key: str, texts_checksum: str, count: int) -> Path:
    return CachePaths(cache_dir).anchors / f"{encoder_key[:16]}-{texts_checksum[:16]}-m{count}.npy"


def _load_cached(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached matrix, or None when it is absent, unreadable, misshapen or not finite."""
    if not path.is_file():
        return None
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if loaded.shape != shape or not np.isfinite(loaded).all():
        return None
    return loaded


def build_anchor_set(
    encoder: Encoder, texts: list[str], cache_dir: Path | None = None
) -> AnchorSet:
    """Embed the anchor texts with `encoder`, reusing the on-disk cache when it matches."""
    texts_checksum = sha256_texts(texts)
    cached: np.ndarray | None = None
    cache_path: Path | None = None
    if cache_dir is not None:
        cache_path = _cache_file(cache_dir, encoder.cache_key, texts_checksum, len(texts))
        cached = _load_cached(cache_path, (len(texts), encoder.dim))
    if cached is None:
        embeddings = encoder.encode(texts)  # (m, dim)
        if cache_path is not None:
            save_npy(cache_path, embeddings.cpu().numpy())
    else:
        embeddings = torch.from_numpy(cached).to(encoder.device)
    return AnchorSet(
        texts=texts,
        embeddings=embeddings.to(torch.float32),
        texts_checksum=texts_checksum,
        encoder_checksum=encoder.checksum,
    )


def load_anchor_set(
    encoder: Encoder,
    corpus: Path,
    count: int | None,
    *,
    seed: int | None = None,
    cache_dir: Path | None = None,
) -> AnchorSet:
    """Read a sentence file, pick `count` anchors from it, and embed them (cached)."""
    texts = select_anchors(read_sentences(corpus), count, seed)
    return build_anchor_set(encoder, texts, cache_dir)
