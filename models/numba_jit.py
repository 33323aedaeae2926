"""Compiling the CPU kernels with numba, when it is installed (models/ordinal_ranks.py,
models/rank_codes.py); every kernel has a numpy or torch fallback for when it is not."""

from collections.abc import Callable
from typing import Any


def compile_kernel(
    function: Callable[..., Any], signature: str, *, fastmath: bool = False
) -> Callable[..., Any] | None:
    """`function` compiled for `signature`, releasing the GIL; None without numba.

    Compiled eagerly, on the first call of whoever asks (half a second, or less from numba's
    on-disk cache), and never at import: only ranking code should pay for it.
    """
    try:
        import numba
    except ImportError:
        return None
    options: dict[str, Any] = {"nogil": True, "fastmath": fastmath}
    try:
        # Cached next to the source, so a process compiles once per install, not per start.
        return numba.njit(signature, cache=True, **options)(function)
    except RuntimeError:  # no writable cache location (a read-only install): compile per process
        return numba.njit(signature, **options)(function)


def compile_kernels(
    *kernels: tuple[Callable[..., Any], str], fastmath: bool = False
) -> tuple[Callable[..., Any], ...] | None:
    """Each (function, signature) compiled as by compile_kernel; None without numba."""
    compiled = [compile_kernel(f, signature, fastmath=fastmath) for f, signature in kernels]
    return None if any(kernel is None for kernel in compiled) else tuple(compiled)
