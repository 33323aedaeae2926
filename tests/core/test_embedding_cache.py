"""The document embedding cache: what is put is read back, and processes share its file."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from core.embedding_cache import EmbeddingCache
from core.settings import REPO_ROOT

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


def test_processes_opening_a_new_cache_file_at_once_all_succeed(tmp_path: Path) -> None:
    """As API replicas do when they hot-swap to the same new encoder: before the set-up was
    retried, a few of 300 processes failed with "database is locked"."""
    race = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("cache_race.py")), str(tmp_path), "100"],
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert race.returncode == 0, race.stdout + race.stderr[-5_000:]
    assert len(list(tmp_path.glob("*.sqlite"))) == 100  # a file per round
