"""The thread policy: torch's intra-op threads and numpy's BLAS threads, from the settings,
applied once per process before the first model loads.

Once, and early: torch applies its thread count to a thread lazily, at that thread's first
parallel operation, so a change after work has started reaches only some threads. The
exported backends (ONNX Runtime, OpenVINO) size their own pools from `torch_threads` when the
encoder loads (core/backend_choice.py). BLAS threads are limited through threadpoolctl, for
the BLAS libraries only: torch's own OpenMP runtime stays under torch's setting.
"""

import logging
import threading
from typing import Any

import torch

from core.settings import Settings

logger = logging.getLogger(__name__)

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
