"""Small timing helpers shared by the benchmarks."""

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], *, repeat: int, warmup: int = 2) -> float:
    """Median wall time of `fn` over `repeat` calls, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]
