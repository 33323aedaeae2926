"""Resident memory for the benchmarks: honest RSS deltas, and a budget no run allocates past.

A benchmark asks `Budget.allows(megabytes)` before each large allocation and skips (saying so)
what would not fit, so a run at sizes too large for the machine reports what it could measure
instead of being killed for memory with nothing printed.
"""

import contextlib
import ctypes
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass

_LIBC = ctypes.CDLL("libc.so.6")
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MB = 2**20


@contextlib.contextmanager
def exact_rss_accounting() -> Iterator[None]:
    """Within: large blocks always get their own mmap, so freed memory leaves RSS and RSS
    deltas are honest (glibc otherwise raises its mmap threshold after the first large free and
    recycles the heap, so an index built after another one would appear to cost nothing).

    After: the thresholds glibc's dynamic rule settles on in a process that has run a while (a
    replica): blocks up to 32 MB come from the heap again, as a served request's do, instead of
    being mapped and faulted in afresh each time. Timed under the 64 KB threshold, every
    request paid page faults a replica does not: at N = 300k IVF, Eq. 7 exact + codes took 2.30
    ms instead of 1.89 and cosine-only 0.64 instead of 0.56 (AMD EPYC Zen 5, load 1.1).
    """
    _LIBC.mallopt(_M_MMAP_THRESHOLD, 1 << 16)
    try:
        yield
    finally:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, 32 * MB)  # glibc's DEFAULT_MMAP_THRESHOLD_MAX
        _LIBC.mallopt(_M_TRIM_THRESHOLD, 64 * MB)  # twice it, as its dynamic rule sets


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settle() -> None:
    """Return freed memory to the system before a measurement."""
    gc.collect()
    _LIBC.malloc_trim(0)


def available_mb() -> float:
    """MemAvailable from /proc/meminfo: what the kernel could hand out without swapping."""
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


@dataclass(frozen=True)
class Budget:
    """The most this process may hold resident, in MB."""

    max_mb: float

    @classmethod
    def from_option(cls, max_mb: float | None) -> "Budget":
        # Default: 80 % of what is available now, leaving the rest to the machine's other work.
        return cls(max_mb if max_mb is not None else 0.8 * (rss_bytes() / MB + available_mb()))

    def headroom_mb(self) -> float:
        return self.max_mb - rss_bytes() / MB

    def allows(self, needed_mb: float) -> bool:
        return needed_mb <= self.headroom_mb()
