"""Compiling the CPU kernels with numba, when it is installed (models/ordinal_ranks.py,
models/rank_codes.py); every kernel has a numpy or torch fallback for when it is not."""

import functools
from collections.abc import Callable
from typing import Any


@functools.cache
def _wide_vectors() -> None:
    """Let LLVM vectorise with 512-bit registers where the CPU has AVX-512.

    LLVM prefers 256-bit vectors on AVX-512 CPUs (a guard against the clock drop of early
    Xeons), and numba keeps that default. The anchor kernel before models/anchor_panels.py ran
    1.28-1.35x faster with 512-bit ones on an Intel Xeon (medians of six processes per
    setting, alternating: 11 and 64 rows at M = 10k, 64 at M = 100k; load 0.9-1.0).
    It only applies before numba compiles its first function in the process, and never over a
    NUMBA_CPU_FEATURES that the user set.
    """
    import numba
    from llvmlite import binding

    features = binding.get_host_cpu_features()
    if numba.config.CPU_FEATURES is None and features.get("avx512f", False):
        numba.config.CPU_FEATURES = features.flatten() + ",-prefer-256-bit"


def _compiled_with(feature: str) -> bool:
    """Whether numba compiles for a CPU with `feature` (LLVM's name): NUMBA_CPU_FEATURES where
    set, else this CPU's own."""
    import numba
    from llvmlite import binding

    _wide_vectors()
    if numba.config.CPU_FEATURES is not None:
        return f"+{feature}" in numba.config.CPU_FEATURES.split(",")
    return bool(binding.get_host_cpu_features().get(feature, False))


@functools.cache
def avx512() -> bool:
    """Whether compiled kernels have AVX-512's 32 vector registers (else AVX2's 16, or NEON's
    32 of a quarter the width): the anchor kernel groups its rows by what they hold."""
    return _compiled_with("avx512f")


@functools.cache
def avx512_vnni() -> bool:
    """Whether compiled kernels may use AVX-512 VNNI's byte dot products
    (models/vnni_products.py)."""
    return _compiled_with("avx512vnni")


@functools.cache
def avx2() -> bool:
    """Whether compiled kernels may use AVX2's vpmaddwd (models/word_products.py)."""
    return _compiled_with("avx2")


def compile_kernel(
    function: Callable[..., Any],
    signature: str | list[str],
    *,
    fastmath: bool | set[str] = False,
) -> Callable[..., Any] | None:
    """`function` compiled for `signature` (or each of a list), releasing the GIL; None
    without numba. `fastmath`: all of numba's fast-math flags, or a set of them.

    Compiled eagerly, on the first call of whoever asks (half a second, or less from numba's
    on-disk cache), and never at import: only ranking code should pay for it.
    """
    try:
        import numba
    except ImportError:
        return None
    _wide_vectors()
    options: dict[str, Any] = {"nogil": True, "fastmath": fastmath}
    try:
        # Cached next to the source, so a process compiles once per install, not per start.
        return numba.njit(signature, cache=True, **options)(function)
    except RuntimeError:  # no writable cache location (a read-only install): compile per process
        return numba.njit(signature, **options)(function)


def compile_kernels(
    *kernels: tuple[Callable[..., Any], str | list[str]], fastmath: bool = False
) -> tuple[Callable[..., Any], ...] | None:
    """Each (function, signature) compiled as by compile_kernel; None without numba."""
    compiled = [compile_kernel(f, signature, fastmath=fastmath) for f, signature in kernels]
    return None if any(kernel is None for kernel in compiled) else tuple(compiled)
