"""The spare core's split changes no bit, and a busy helper never holds up its caller."""

import os
import signal
import threading
import time

import numpy as np
import torch

from models.ranking import rank_vectors
from models.spare_core import Pending, split_rows


def test_rank_vectors_split_over_two_cores_equal_one_product() -> None:
    rng = np.random.default_rng(3)
    anchors = torch.from_numpy(rng.standard_normal((997, 48), dtype=np.float32))
    anchors /= anchors.norm(dim=1, keepdim=True)
    for rows in (1, 2, 8, 9, 31):
        documents = torch.from_numpy(rng.standard_normal((rows, 48), dtype=np.float32))
        documents /= documents.norm(dim=1, keepdim=True)
        split = split_rows(lambda part: rank_vectors(part, anchors), documents)
        assert torch.equal(split, rank_vectors(documents, anchors))


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


def test_a_forked_child_gets_a_helper_of_its_own() -> None:
    Pending(lambda: None).result()  # the parent's helper thread exists now
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its answer comes from a helper thread it started itself
        name = Pending(lambda: threading.current_thread().name)
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
