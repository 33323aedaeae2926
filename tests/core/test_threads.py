"""run_in_own_thread and in_own_thread: torch work in a thread that ends with it, and with
that thread the OpenMP pool the work started (core/threads.py says why it matters)."""

import asyncio
import contextvars
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from core.threads import in_own_thread, run_in_own_thread

_TASKS = Path(f"/proc/{os.getpid()}/task")
pytestmark = pytest.mark.skipif(not _TASKS.is_dir(), reason="counts threads through /proc")

_request = contextvars.ContextVar("request", default="none")


def _threads() -> set[str]:
    return {entry.name for entry in _TASKS.iterdir()}


def _settled_threads(before: set[str]) -> set[str]:
    """The threads now, once those that are not in `before` have had up to 5 s to end: a
    thread's OpenMP pool ends as the thread itself exits, just after Python's join returns."""
    deadline = time.monotonic() + 5
    while not (threads := _threads()) <= before and time.monotonic() < deadline:
        time.sleep(0.01)
    return threads


def _parallel_work() -> float:
    # Over torch's grain size (32,768 elements), so every one of its threads takes part.
    return float(torch.ones(1 << 22).add_(1).sum())


def test_the_result_an_error_and_the_context_come_back():
    assert run_in_own_thread(pow, 2, 10) == 1024
    token = _request.set("r-1")
    try:
        assert run_in_own_thread(_request.get) == "r-1"
    finally:
        _request.reset(token)
    with pytest.raises(ZeroDivisionError):
        run_in_own_thread(divmod, 1, 0)
    assert asyncio.run(in_own_thread(pow, 3, 2)) == 9


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="one torch thread starts no pool")
def test_the_openmp_pool_a_call_starts_ends_with_its_thread():
    before = _threads()
    assert run_in_own_thread(_parallel_work) == 2.0 * (1 << 22)
    assert _settled_threads(before) <= before
    assert asyncio.run(in_own_thread(_parallel_work)) == 2.0 * (1 << 22)
    assert _settled_threads(before) <= before
    # The same work in a thread that lives on leaves its pool behind: the thread and at
    # least one OpenMP worker.
    with ThreadPoolExecutor(max_workers=1) as lasting:
        lasting.submit(_parallel_work).result()
        assert len(_threads() - before) >= 2
