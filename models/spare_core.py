"""Work one search hands to a core it would otherwise leave idle.

faiss scans with one thread (models/index.py) and the rank kernels use one thread each
(models/cpu_products.py, models/ordinal_ranks.py), all with the GIL released, so on an idle
machine a search or a /similarity call keeps one core busy. One helper thread per process
takes a part of it: the query's rank vector while faiss scans, half of the anchors of a
product with the anchor matrix (models/cpu_products.py) and half of the rows of their sorts
(models/ranking.py). A task the helper has not started when its caller needs it is run by the
caller instead, so a helper busy with another request's work delays nobody, and under full
load the split costs only its hand-over.

Linux wakes the helper where it sees fit, and in a VM that was mostly its caller's own CPU,
busy with the other half, while the second one idled: after 10 ms idle, 186 wake-ups in 200
(Linux 6.18 in a Firecracker VM on an Intel Xeon with AMX, load 0.4), and 64 rows' anchor
product took 3.77 ms split against 3.51 ms on one core. So before each hand-over the helper's
CPU affinity leaves out the CPU its caller is on (a system call only when that CPU changed):
2.20 ms. In KVM on an AMD EPYC Zen 3 the helper's half of six rows' product ran on its caller's
CPU 183 times in 200 before, 2 after, and 64 rows took 9.48 ms split before, 7.10 after, 11.85 on
one core (M = 10k, int8 anchors, load 0.8-1.0).
"""

import ctypes
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
# Below this many elements of a (rows, anchors) product a hand-over costs about what it saves:
# one row's anchor cosines took 0.05 ms alone and 0.08 split at M = 1000, 0.26 and 0.23 at
# M = 5000, 0.54 and 0.41 at M = 10k; 8 rows at M = 1000 0.18 and 0.11 (a script, AMD EPYC
# Zen 3, load 1.2).
_MIN_SPLIT_ELEMENTS = 8192


class _Helper:
    """The helper thread, and the CPU it was last told to avoid."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spare-core")
        self.thread_id = self.pool.submit(threading.get_native_id).result()
        self.allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        self.avoided = -1

    def avoid(self, cpu: int) -> None:
        """Keep the helper off `cpu` (where the process may use another), until told again."""
        if cpu < 0 or cpu == self.avoided or not self.allowed - {cpu}:
            return
        try:
            os.sched_setaffinity(self.thread_id, self.allowed - {cpu})
        except OSError:  # the process's CPUs changed since: leave the helper where it may run
            self.allowed = set()
            return
        self.avoided = cpu


@functools.cache
def _sched_getcpu() -> Callable[[], int] | None:
    try:
        return ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):  # not Linux, or a C library without it
        return None


def _current_cpu() -> int:
    """The CPU this thread runs on now, or -1 where that cannot be known."""
    getcpu = _sched_getcpu()
    return -1 if getcpu is None else int(getcpu())


@functools.cache
def _helper() -> _Helper:
    return _Helper()


# A forked child (an RQ work horse) has no helper thread: it makes its own on first use.
os.register_at_fork(after_in_child=_helper.cache_clear)


class Pending(Generic[T]):
    """A call handed to the helper; `result` waits for it, or makes it if it has not started."""

    def __init__(self, function: Callable[[], T]) -> None:
        self._function = function
        helper = _helper()
        helper.avoid(_current_cpu())
        self._future: Future[T] = helper.pool.submit(function)

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
