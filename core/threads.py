"""The thread policy: torch's intra-op threads and numpy's BLAS threads, from the settings,
applied once per process before the first model loads.

Once, and early: torch applies its thread count to a thread lazily, at that thread's first
parallel operation, so a change after work has started reaches only some threads. The
exported backends (ONNX Runtime, OpenVINO) size their own pools from `torch_threads` when the
encoder loads (core/backend_choice.py). BLAS threads are limited through threadpoolctl, for
the BLAS libraries only: torch's own OpenMP runtime stays under torch's setting.

One pool of OpenMP workers, so torch work off the encoder's thread goes through
`run_in_own_thread` (or `in_own_thread`, its async form): each thread that runs a parallel
torch operation starts a pool of workers of its own in libgomp (torch's OpenMP runtime on
Linux), kept until that thread ends. Once the pools hold more threads than the process has
CPUs, libgomp cuts every worker's spin before it sleeps to 100 iterations (its "throttled"
count; 1,000 with OMP_WAIT_POLICY=active, which did not help), whatever GOMP_SPINCOUNT says, so
the encoder's workers sleep and wake between the many short parallel regions of a forward pass.
A replica that loaded its model in the event loop's executor, whose threads live on, encoded
batches of 16 short texts in 53-57 ms instead of 44-47 (torch fp32, Intel Xeon with AMX, 2
cores, load 1.3-1.6; docs/benchmarks.md).
"""

import asyncio
import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

from core.settings import Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")

_lock = threading.Lock()
_applied: dict[str, int | None] | None = None
_blas_limiter: Any = None  # threadpoolctl's limiter: the limit lasts while it is referenced


def apply_thread_policy(settings: Settings) -> dict[str, int | None]:
    """Set torch's and BLAS's thread counts from `settings`, the first time it is called in
    this process; later calls change nothing and return what the first one applied."""
    global _applied, _blas_limiter
    with _lock:
        if _applied is not None:
            return _applied
        if settings.torch_threads is not None:
            torch.set_num_threads(settings.torch_threads)
        if settings.blas_threads is not None:
            try:
                from threadpoolctl import threadpool_limits
            except ImportError:
                logger.warning("threadpoolctl is not installed: blas_threads is ignored")
            else:
                _blas_limiter = threadpool_limits(limits=settings.blas_threads, user_api="blas")
        _applied = {"torch_threads": torch.get_num_threads(), "blas_threads": blas_threads()}
        logger.info("thread policy: %s", _applied)
        return _applied


def blas_threads() -> int | None:
    """The BLAS thread count numpy runs with now (None when threadpoolctl is absent)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    return max(counts) if counts else None


def run_in_own_thread(fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` in a thread of its own, joined before this returns: any OpenMP pool the call
    started ends as that thread exits (see the module doc). For torch work off the encoder's
    thread, such as loading a model or converting anchors; the call sees the caller's context
    variables."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch-work") as executor:
        return executor.submit(contextvars.copy_context().run, fn, *args).result()


async def in_own_thread(fn: Callable[..., T], *args: object) -> T:
    """run_in_own_thread off the event loop (a cancelled await leaves the call running to its
    end, as asyncio.to_thread does)."""
    return await asyncio.to_thread(run_in_own_thread, fn, *args)
