"""The spare core's split changes no bit, and a busy helper never holds up its caller."""

import contextlib
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

from models import ranking, spare_core
from models.anchor_formats import FORMATS, hold
from models.ranking import rank_vectors
from models.spare_core import Pending, split_range


@pytest.mark.parametrize("anchor_format", FORMATS)
@pytest.mark.parametrize("m", [997, 1000])
def test_rank_vectors_split_over_two_cores_equal_one_product(
    monkeypatch: pytest.MonkeyPatch, m: int, anchor_format: str
) -> None:
    monkeypatch.setattr(spare_core, "_MIN_SPLIT_ELEMENTS", 0)  # split even these small products
    monkeypatch.setattr(ranking, "_MIN_SPLIT_RANKS", 0)  # and their sorts
    rng = np.random.default_rng(3)
    anchors = torch.from_numpy(rng.standard_normal((m, 48), dtype=np.float32))
    anchors = hold(anchors / anchors.norm(dim=1, keepdim=True), anchor_format)
    for rows in (1, 2, 3, 9, 31):
        documents = torch.from_numpy(rng.standard_normal((rows, 48), dtype=np.float32))
        documents /= documents.norm(dim=1, keepdim=True)
        split = rank_vectors(documents, anchors, split=True)
        assert torch.equal(split, rank_vectors(documents, anchors))


def test_a_split_range_runs_its_first_half_on_the_helper() -> None:
    calls: dict[tuple[int, int], str] = {}

    def record(start: int, stop: int) -> None:
        if start > 0:
            time.sleep(0.2)  # the helper has long started the first half meanwhile
        calls[(start, stop)] = threading.current_thread().name

    split_range(record, 1003, elements=10**6, align=4)
    assert sorted(calls) == [(0, 500), (500, 1003)]  # the middle at a multiple of 4
    assert calls[(0, 500)].startswith("spare-core")
    assert calls[(500, 1003)] == threading.current_thread().name
    split_range(record, 1003, elements=10)  # too little work: one call, here
    assert calls[(0, 1003)] == threading.current_thread().name
    calls.clear()
    split_range(record, 1003, elements=10**6, min_elements=10**7)  # below the caller's own
    assert calls == {(0, 1003): threading.current_thread().name}


def test_a_task_the_busy_helper_has_not_started_runs_on_its_caller() -> None:
    release = threading.Event()
    blocker = Pending(release.wait)  # occupies the one helper thread
    callers: list[str] = []
    queued = Pending(lambda: callers.append(threading.current_thread().name) or 42)
    assert queued.result() == 42  # returns although the helper is still blocked
    assert callers == [threading.current_thread().name]
    release.set()
    assert blocker.result() is True


def test_a_started_task_is_awaited_and_its_result_returned() -> None:
    started = threading.Event()

    def work() -> str:
        started.set()
        return threading.current_thread().name

    pending = Pending(work)
    assert started.wait(timeout=10)
    assert pending.result().startswith("spare-core")


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two CPUs and Linux's CPU affinity",
)
def test_the_helper_runs_on_another_cpu_than_its_caller() -> None:
    allowed = os.sched_getaffinity(0)

    def helper_cpu() -> int:
        started = threading.Event()

        def where() -> int:
            started.set()
            return spare_core._current_cpu()

        pending = Pending(where)
        assert started.wait(timeout=10)  # so the helper, not this thread, answers
        return pending.result()

    try:
        for cpu in sorted(allowed)[:2]:
            try:
                os.sched_setaffinity(0, {cpu})  # this thread only, on Linux
            except PermissionError:
                pytest.skip("this sandbox does not let a thread choose its CPU")
            assert helper_cpu() != cpu
            assert os.sched_getaffinity(spare_core._helper().thread_id) == allowed - {cpu}
    finally:
        with contextlib.suppress(PermissionError):
            os.sched_setaffinity(0, allowed)


def test_a_forked_child_gets_a_helper_of_its_own() -> None:
    Pending(lambda: None).result()  # the parent's helper thread exists now
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its answer comes from a helper thread it started itself
        started = threading.Event()

        def work() -> str:
            started.set()
            return threading.current_thread().name

        name = Pending(work)
        started.wait(timeout=10)
        os.write(write, name.result().encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 60
    while (finished := os.waitpid(child, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("the forked child hung")
        time.sleep(0.01)
    with os.fdopen(read) as pipe:
        assert pipe.read().startswith("spare-core")
    assert os.waitstatus_to_exitcode(finished[1]) == 0
