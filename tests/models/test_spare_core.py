"""The spare core's split changes no bit, and a busy helper never holds up its caller."""

import threading

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
