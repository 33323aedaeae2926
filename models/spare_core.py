"""Work one search hands to a core it would otherwise leave idle.

faiss scans with one thread (models/index.py) and the rank kernels use one thread each
(models/cpu_products.py, models/ordinal_ranks.py), all with the GIL released, so on an idle
machine a search or a /similarity call keeps one core busy. One helper thread per process
takes a part of it: the query's rank vector while faiss scans, half of the rows of every
product with the anchor matrix (models/ranking.py). A task the helper has not
started when its caller needs it is run by the caller instead, so a helper busy with another
request's work delays nobody, and under full load the split costs only its hand-over.
"""

import functools
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

import numpy as np
import torch

T = TypeVar("T")
# Below this a product with the anchor matrix is its read from memory, which two cores share:
# one pair's /similarity ranked its two rows in 1.9-2.0 ms at M = 10k alone and 2.8-3.3 split
# (19-20 against 24 ms at M = 100k); 128 rows took 24 instead of 28-30 ms, a search's dozen
# 2.2 instead of 3.2 (bench.scoring and a script, AMD EPYC Zen 3, load 1-2).
_MIN_SPLIT = 8


@functools.cache
def _helper() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="spare-core")


# A forked child (an RQ work horse) has no helper thread: it makes its own on first use.
os.register_at_fork(after_in_child=_helper.cache_clear)


class Pending(Generic[T]):
    """A call handed to the helper; `result` waits for it, or makes it if it has not started."""

    def __init__(self, function: Callable[[], T]) -> None:
        self._function = function
        self._future: Future[T] = _helper().submit(function)

    def result(self) -> T:
        if self._future.cancel():  # still queued: the helper is busy elsewhere
            return self._function()
        return self._future.result()


def split_rows(
    function: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor
) -> torch.Tensor:
    """function(rows) (n, ...) as two halves, one on the helper: only for a row-wise function
    whose every output row depends on its input row alone, so the split changes no bit."""
    if len(rows) < _MIN_SPLIT or rows.device.type != "cpu":
        return function(rows)
    half = len(rows) // 2
    first = Pending(functools.partial(function, rows[:half]))
    second = function(rows[half:])
    # numpy joins them on this thread: torch.cat of this size wakes its OpenMP pool, whose
    # spinning workers would then hold the helper's core.
    return torch.from_numpy(np.concatenate([first.result().numpy(), second.numpy()]))
