"""The document embedding cache: what is put is read back, and processes share its file."""

import multiprocessing
from multiprocessing.synchronize import Barrier
from pathlib import Path

import numpy as np

from core.embedding_cache import EmbeddingCache

DIM = 4


def test_embeddings_put_are_read_back_and_the_rest_encoded(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, "encoder-key", 64, DIM)
    stored = np.arange(2 * DIM, dtype=np.float32).reshape(2, DIM)
    cache.put_many(["a", "b"], stored)
    encoded: list[list[str]] = []

    def encode(texts: list[str]) -> np.ndarray:
        encoded.append(texts)
        return np.full((len(texts), DIM), 9.0, dtype=np.float32)

    out = cache.read_through(["b", "c", "a", "c"], encode)
    assert encoded == [["c"]]  # each missing text encoded once
    np.testing.assert_array_equal(out, [stored[1], [9.0] * DIM, stored[0], [9.0] * DIM])
    cache.close()
    reopened = EmbeddingCache(tmp_path, "encoder-key", 64, DIM)
    np.testing.assert_array_equal(reopened.get_many(["c"])[0], [9.0] * DIM)
    reopened.close()


def _open_and_put(directory: str, start: Barrier, key: str) -> None:
    start.wait()
    cache = EmbeddingCache(Path(directory), key, 64, DIM)
    cache.put_many([key], np.ones((1, DIM), dtype=np.float32))
    cache.close()


def test_processes_opening_a_new_cache_file_at_once_all_succeed(tmp_path: Path) -> None:
    """As API replicas do when they hot-swap to the same new encoder: before the set-up was
    retried, a few of 300 processes failed with "database is locked"."""
    context = multiprocessing.get_context("fork")
    for round_ in range(100):
        start = context.Barrier(3)
        key = f"encoder-{round_}"
        workers = [
            context.Process(target=_open_and_put, args=(str(tmp_path), start, key))
            for _ in range(3)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert [worker.exitcode for worker in workers] == [0, 0, 0], f"round {round_}"
