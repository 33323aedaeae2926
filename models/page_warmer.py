"""Keeping memory that searches read sparsely from going cold where the host makes it slow.

On some VMs memory the guest has not read for a minute or more is slow to come back, per 2 MB
page (docs/search.md, the rank store): a search reads 100 rows of a rank store that holds a
million, so most of its pages sit unread between the searches that need them. A thread that
reads one byte of every 2 MB page every few seconds keeps them ready, at a cost that grows
with the memory kept, not with the searches (docs/benchmarks.md, seventeenth session).
"""

import threading
from collections.abc import Callable

import numpy as np

PAGE_BYTES = 2 << 20
# numpy releases the GIL inside a reduction of more than 500 elements (a 0.31 s reduction let
# another thread's Python loop run at full speed), so a sweep holds requests up only for the
# few pages left at the end.
_PAGES_PER_READ = 1024


def touch(memory: np.ndarray) -> int:
    """Read one byte of every PAGE_BYTES of `memory` (contiguous); returns the sum of the bytes
    read."""
    first_bytes = memory.reshape(-1).view(np.uint8)[::PAGE_BYTES]  # (pages,)
    total = 0
    for start in range(0, len(first_bytes), _PAGES_PER_READ):
        total += int(first_bytes[start : start + _PAGES_PER_READ].sum(dtype=np.uint64))
    return total


class PageWarmer:
    """A daemon thread touching `memory()` every `period_s` until `stop`, or until `memory`
    returns None (its owner is gone)."""

    def __init__(self, name: str, period_s: float, memory: Callable[[], np.ndarray | None]) -> None:
        if period_s <= 0:
            raise ValueError("the period must be positive")
        self._memory = memory
        self._period_s = period_s
        self._stopped = threading.Event()
        threading.Thread(target=self._run, name=f"warm-{name}", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self._period_s):
            memory = self._memory()
            if memory is None:
                return
            touch(memory)
            del memory  # else held until the next sweep, though the owner may close it meanwhile
