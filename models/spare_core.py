"""Work one search hands to a core it would otherwise leave idle.

faiss scans with one thread (models/index.py) and the rank kernels use one thread each
(models/cpu_products.py, models/ordinal_ranks.py), all with the GIL released, so on an idle
machine a search or a /similarity call keeps one core busy. One helper thread per process
takes a part of it: the query's rank vector while faiss scans, half of the anchors of a
product with the anchor matrix (models/cpu_products.py) and half of the rows of their sorts
(models/ranking.py). A task the helper has not started when its caller needs it is run by the
caller instead, so a helper busy with another request's work delays nobody, and under full
load the split costs only its hand-over.
"""

import functools
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
# Below this many elements of a (rows, anchors) product a hand-over costs about what it saves:
# one row's anchor cosines took 0.05 ms alone and 0.08 split at M = 1000, 0.26 and 0.23 at
# M = 5000, 0.54 and 0.41 at M = 10k; 8 rows at M = 1000 0.18 and 0.11 (a script, AMD EPYC
# Zen 3, load 1.2).
_MIN_SPLIT_ELEMENTS = 8192


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


def split_range(
    function: Callable[[int, int], object],
    stop: int,
    elements: int,
    align: int = 1,
    min_elements: int | None = None,
) -> None:
    """function(start, end) over [0, stop) as two halves, the first on the helper, when the
    work (`elements` in all, at least `min_elements`, by default the product's threshold) is
    worth a hand-over; the split point is a multiple of `align`. Only for a function whose
    halves write disjoint outputs and whose every output element depends on its own inputs
    alone, so the split changes no bit."""
    middle = stop // 2 // align * align
    threshold = _MIN_SPLIT_ELEMENTS if min_elements is None else min_elements
    if elements < threshold or middle == 0:
        function(0, stop)
        return
    first = Pending(functools.partial(function, 0, middle))
    function(middle, stop)
    first.result()
