"""Small timing and printing helpers shared by the benchmarks."""

import os
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


def interleaved_ms(
    fns: dict[str, Callable[[], object]], *, repeat: int, warmup: int = 2, pause_ms: float = 0.0
) -> dict[str, list[float]]:
    """Milliseconds per call of each fn, the fns called in turn `repeat` times (after `warmup`
    untimed rounds): a change of machine load during the run hits every fn alike, so their
    ratios stay meaningful on a shared machine. `pause_ms`: idle before each timed call, as a
    replica between sparse requests is."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            time.sleep(pause_ms / 1e3)
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return samples


def say(line: str) -> None:
    """Print a line now: benchmarks print each row as soon as it is measured."""
    print(line, flush=True)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as printed beside every figure."""
    return "/".join(f"{value:.2f}" for value in os.getloadavg())
