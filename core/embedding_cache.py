"""Document embeddings on disk, keyed by encoder and text, so a restart does not re-encode.

One SQLite file per encoder checkpoint and backend (its cache key), maximum sequence length
and dimension, which is everything an embedding depends on besides the text; rows are keyed by
the text's sha256. SQLite gives atomic, crash-safe writes and lets several processes on one
host (API replicas sharing a volume) read and write the same file.
"""

import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the cache itself needs no ML library: a process can open it cheaply
    from models.encoder import Encoder

_CHUNK = 500  # host parameters per statement stay well under SQLite's limit
_TIMEOUT_S = 30.0  # how long a statement waits for another process's lock


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Lookup:
    """What the cache holds of some texts, and the distinct texts still to be encoded."""

    texts: Sequence[str]
    found: list[np.ndarray | None]
    missing: list[str]
    dim: int

    def assemble(self, fresh: Mapping[str, np.ndarray]) -> np.ndarray:
        """(n, dim) float32: the cached rows, and `fresh[text]` for every missing one."""
        out = np.empty((len(self.texts), self.dim), dtype=np.float32)  # (n, dim)
        for i, (text, vector) in enumerate(zip(self.texts, self.found, strict=True)):
            out[i] = vector if vector is not None else fresh[text]
        return out


class EmbeddingCache:
    @classmethod
    def for_encoder(cls, directory: Path, encoder: "Encoder") -> "EmbeddingCache":
        return cls(directory, encoder.cache_key, encoder.max_seq_length, encoder.dim)

    def __init__(self, directory: Path, encoder_key: str, max_seq_length: int, dim: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.path = directory / f"{encoder_key[:16]}-L{max_seq_length}-d{dim}.sqlite"
        self._lock = threading.Lock()
        # Used from worker threads (asyncio.to_thread); the lock serialises them.
        self._db = _connect(self.path)

    def get_many(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The cached (dim,) float32 embedding of each text, None where absent."""
        keys = [text_key(text) for text in texts]
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), _CHUNK):
                chunk = list(dict.fromkeys(keys[start : start + _CHUNK]))
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", chunk
                )
                for key, vector in rows:
                    array = np.frombuffer(vector, dtype=np.float32)
                    if array.shape == (self.dim,):
                        found[key] = array
        return [found.get(key) for key in keys]

    def lookup(self, texts: Sequence[str]) -> Lookup:
        found = self.get_many(texts)
        missing = [t for t, v in zip(texts, found, strict=True) if v is None]
        return Lookup(texts, found, list(dict.fromkeys(missing)), self.dim)

    def read_through(
        self, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray]
    ) -> np.ndarray:
        """(n, dim) embeddings of `texts`: cached ones read, the rest encoded and stored."""
        lookup = self.lookup(texts)
        if not lookup.missing:
            return lookup.assemble({})
        encoded = encode(lookup.missing)  # (k, dim)
        self.put_many(lookup.missing, encoded)
        return lookup.assemble(dict(zip(lookup.missing, encoded, strict=True)))

    def put_many(self, texts: Sequence[str], embeddings: np.ndarray) -> None:
        """Store (n, dim) float32 embeddings of `texts`."""
        vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
        rows = [(text_key(text), vectors[i].tobytes()) for i, text in enumerate(texts)]
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings (key, vector) VALUES (?, ?)", rows
            )
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _connect(path: Path) -> sqlite3.Connection:
    """A connection to the cache file at `path`, in WAL mode, with its table.

    Processes that open a new file at the same moment all switch it to WAL, and SQLite can
    answer one of them "database is locked" at once instead of waiting out the busy timeout:
    two API replicas hot-swapping to the same new encoder did, and one refused the swap. In a
    script, 2 and 30 of 300 processes opening new files three at a time failed that way. So
    the set-up is tried again until the timeout, as any statement would wait.
    """
    db = sqlite3.connect(path, check_same_thread=False, timeout=_TIMEOUT_S)
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (key BLOB PRIMARY KEY, vector BLOB NOT NULL)"
            )
            db.commit()
            return db
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                db.close()
                raise
            time.sleep(0.01)
