"""Many processes opening one new embedding cache file at once, in rounds of three: run by
tests/core/test_embedding_cache.py as a process of its own, which imports little, because
forking pytest's process (torch loaded) costs tens of milliseconds per child.

Usage: python tests/core/cache_race.py DIRECTORY ROUNDS; exit status 1 names a failed round.
"""

import multiprocessing
import sys
from multiprocessing.synchronize import Barrier
from pathlib import Path

import numpy as np

from core.embedding_cache import EmbeddingCache

DIM = 4


def open_and_put(directory: str, start: Barrier, key: str) -> None:
    start.wait()
    cache = EmbeddingCache(Path(directory), key, 64, DIM)
    cache.put_many([key], np.ones((1, DIM), dtype=np.float32))
    cache.close()


def race(directory: Path, rounds: int) -> int:
    context = multiprocessing.get_context("fork")
    for round_ in range(rounds):
        start = context.Barrier(3)
        key = f"encoder-{round_}"
        workers = [
            context.Process(target=open_and_put, args=(str(directory), start, key))
            for _ in range(3)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        codes = [worker.exitcode for worker in workers]
        if codes != [0, 0, 0]:
            print(f"round {round_}: exit codes {codes}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(race(Path(sys.argv[1]), int(sys.argv[2])))
