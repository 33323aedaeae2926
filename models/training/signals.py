"""Teacher signals, computed once per dataset and batch schedule and cached on disk.

The batch schedule is a pure function of (dataset size, batch size, epochs, seed), so the
teacher's in-batch matrices can be computed before the first step: RankEncoder's u_i.u_j
(Eq. 4-6, u = E1's normalised rank vectors over the anchor corpus C) and RankCSE's teacher
similarity lists S^T (Eq. 3-5). The training loop then only indexes a tensor, and a resumed
run reads the same file. Teacher embeddings of the training text, the costly part, are cached
separately so that a new seed or batch size does not re-run a large teacher.
"""

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from models.anchors import load_anchor_set
from models.atomic import atomic_write, save_npy
from models.cache_paths import CachePaths
from models.checksums import sha256_texts
from models.encoder import Encoder
from models.ranking import rank_vectors


def batch_schedule(n: int, batch_size: int, epochs: int, seed: int) -> torch.Tensor:
    """Row k = example indices of step k: one seeded permutation per epoch, last partial batch
    dropped so every step (and every cached teacher matrix) has the same shape."""
    per_epoch = n // batch_size
    if per_epoch == 0:
        raise ValueError(f"{n} examples cannot fill one batch of {batch_size}")
    generator = torch.Generator().manual_seed(seed)
    epochs_rows = [
        torch.randperm(n, generator=generator)[: per_epoch * batch_size].view(per_epoch, batch_size)
        for _ in range(epochs)
    ]
    return torch.cat(epochs_rows)  # (steps, batch_size)


def encode_cached(encoder: Encoder, texts: list[str], cache_dir: Path) -> torch.Tensor:
    """Unit embeddings of `texts` by `encoder`, from disk when this exact encoding was done."""
    key = f"{encoder.checksum[:16]}-{sha256_texts(texts)[:16]}-L{encoder.max_seq_length}"
    path = CachePaths(cache_dir).teacher_embeddings / f"{key}.npy"
    if path.is_file():
        cached = np.load(path, allow_pickle=False)
        if cached.shape == (len(texts), encoder.dim):
            return torch.from_numpy(cached)
    embeddings = encoder.encode(texts, progress=True).cpu()  # (n, dim)
    save_npy(path, embeddings.numpy())
    return embeddings


def _signals_key(**parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _load_or_compute(path: Path, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
    if path.is_file():
        return torch.load(path, weights_only=True)
    signals = compute()
    atomic_write(path, lambda handle: torch.save(signals, handle))
    return signals


def cosine_signals(
    teacher: Encoder, texts: list[str], schedule: torch.Tensor, cache_dir: Path
) -> torch.Tensor:
    """S^T per step: the teacher's cosine matrix over each batch. (steps, B, B)"""
    key = _signals_key(
        kind="cosine",
        teacher=teacher.checksum,
        texts=sha256_texts(texts),
        schedule=hashlib.sha256(schedule.numpy().tobytes()).hexdigest(),
        max_len=teacher.max_seq_length,
    )

    def compute() -> torch.Tensor:
        embeddings = encode_cached(teacher, texts, cache_dir)  # (n, dim)
        batches = embeddings[schedule]  # (steps, B, dim)
        return batches @ batches.transpose(1, 2)  # (steps, B, B)

    return _load_or_compute(CachePaths(cache_dir).teacher_signals / f"{key}.pt", compute)


def rank_signals(
    teacher: Encoder,
    texts: list[str],
    schedule: torch.Tensor,
    cache_dir: Path,
    anchor_corpus: Path,
    anchor_count: int | None,
    anchor_seed: int | None = None,
) -> torch.Tensor:
    """u_i.u_j per step (RankEncoder Eq. 4): Spearman of E1's rank vectors over C. (steps, B, B)"""
    anchors = load_anchor_set(
        teacher, anchor_corpus, anchor_count, seed=anchor_seed, cache_dir=cache_dir
    )
    key = _signals_key(
        kind="rank",
        teacher=teacher.checksum,
        texts=sha256_texts(texts),
        schedule=hashlib.sha256(schedule.numpy().tobytes()).hexdigest(),
        anchors=anchors.texts_checksum,
        max_len=teacher.max_seq_length,
    )

    def compute() -> torch.Tensor:
        embeddings = encode_cached(teacher, texts, cache_dir)  # (n, dim)
        anchor_matrix = anchors.embeddings.cpu()  # (m, dim)
        steps = []
        for batch in schedule:
            ranks = rank_vectors(embeddings[batch], anchor_matrix)  # (B, m)
            steps.append(ranks @ ranks.T)  # (B, B)
        return torch.stack(steps)  # (steps, B, B)

    return _load_or_compute(CachePaths(cache_dir).teacher_signals / f"{key}.pt", compute)
