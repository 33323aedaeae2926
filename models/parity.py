"""Does a backend encode like torch fp32 on the real weights? And how fast is it?

Parity, on the dev sets (STS-B dev, SICK trial): per task, the Spearman x 100 of the pairs'
cosine scores is within SPEARMAN_TOLERANCE of torch fp32's, and the mean cosine between a
sentence's embedding and its fp32 embedding is at least COSINE_FLOOR. `auto` (core/
backend_choice.py) then takes the fastest backend that passes; torch fp32 always does.
"""

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from models.encoder import Encoder
from models.evaluation.senteval import StsTask
from models.evaluation.sts import spearman_x100

SPEARMAN_TOLERANCE = 0.2  # Spearman x 100, per dev task
COSINE_FLOOR = 0.995


@dataclass(frozen=True)
class ParitySet:
    """The dev pairs as indices into one list of distinct sentences, encoded once each."""

    texts: list[str]
    tasks: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]  # name, left, right, gold

    def spearman(self, embeddings: np.ndarray) -> dict[str, float]:
        """Spearman x 100 of the cosine scores per task, from unit (n_texts, dim) rows."""
        out = {}
        for name, left, right, gold in self.tasks:
            cosine = np.einsum("ij,ij->i", embeddings[left], embeddings[right])  # (pairs,)
            out[name] = spearman_x100(gold, cosine)
        return out


def parity_set(tasks: Sequence[StsTask], max_pairs: int | None = None) -> ParitySet:
    """The first `max_pairs` pairs of each task (all when None)."""
    index: dict[str, int] = {}
    built = []
    for task in tasks:
        pairs = task.pairs[:max_pairs] if max_pairs else task.pairs
        left = np.array([index.setdefault(a, len(index)) for a, _ in pairs])
        right = np.array([index.setdefault(b, len(index)) for _, b in pairs])
        built.append((task.name, left, right, np.asarray(task.gold[: len(pairs)])))
    return ParitySet(list(index), built)


@dataclass(frozen=True)
class Parity:
    backend: str
    spearman: dict[str, float]  # task -> Spearman x 100 of this backend's cosine scores
    reference: dict[str, float]  # the same by torch fp32
    mean_cosine: float  # to the fp32 embedding of the same sentence
    min_cosine: float
    pairs: int

    @property
    def max_spearman_gap(self) -> float:
        return max(abs(self.spearman[t] - self.reference[t]) for t in self.reference)

    @property
    def passed(self) -> bool:
        return self.max_spearman_gap <= SPEARMAN_TOLERANCE and self.mean_cosine >= COSINE_FLOOR

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "max_spearman_gap": self.max_spearman_gap, "passed": self.passed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Parity":
        fields = ("backend", "spearman", "reference", "mean_cosine", "min_cosine", "pairs")
        return cls(**{name: data[name] for name in fields})


def embed(encoder: Encoder, dev: ParitySet, batch_size: int = 64) -> np.ndarray:
    return encoder.encode(dev.texts, batch_size=batch_size).cpu().numpy()  # (n_texts, dim)


def check_parity(
    backend: str, embeddings: np.ndarray, reference: np.ndarray, dev: ParitySet
) -> Parity:
    """Compare a backend's unit embeddings of `dev.texts` with torch fp32's."""
    cosines = np.einsum("ij,ij->i", embeddings, reference)  # (n_texts,)
    return Parity(
        backend=backend,
        spearman=dev.spearman(embeddings),
        reference=dev.spearman(reference),
        mean_cosine=float(cosines.mean()),
        min_cosine=float(cosines.min()),
        pairs=sum(len(left) for _, left, _, _ in dev.tasks),
    )


def sentences_per_second(
    encoder: Encoder, texts: list[str], batch_size: int, min_seconds: float, *, warm: bool = False
) -> float:
    """Encode `texts` in batches of `batch_size` for at least `min_seconds`; sentences per
    second. One warm-up batch first, untimed, unless the caller says the encoder is `warm`
    (a later round of the same batches)."""
    if not warm:
        encoder.encode(texts[:batch_size], batch_size=batch_size)
    done, start = 0, time.perf_counter()
    while True:
        for offset in range(0, len(texts), batch_size):
            batch = texts[offset : offset + batch_size]
            encoder.encode(batch, batch_size=batch_size)
            done += len(batch)
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                return done / elapsed
