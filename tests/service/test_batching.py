"""Dynamic batching: coalescing, results routed back, bounded queue, engine per request.

The worker thread is held busy by a job that waits on an event, so what queues meanwhile is
decided by the test, not by timing; the metrics then show how the queue was cut into batches.
"""

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import torch

from models.encoder import Encoder
from service.engine import Engine
from service.rejoin import SHARE
from tests.service.conftest import AUTH, Server, fixed_engine, make_settings, serve


@contextmanager
def busy_worker(server: Server) -> Iterator[None]:
    """Occupies the encoder thread until the block exits."""
    release = threading.Event()
    asyncio.run_coroutine_threadsafe(server.services.batcher.run(release.wait, 60), server.loop)
    try:
        yield
    finally:
        release.set()


def post(server: Server, path: str, payload: dict) -> httpx.Response:
    with server.client(headers=AUTH) as http:
        return http.post(path, json=payload)


@pytest.fixture
def quick_server(tmp_path, engine: Engine, request: pytest.FixtureRequest) -> Iterator[Server]:
    overrides = getattr(request, "param", {})
    with serve(make_settings(tmp_path, **overrides), fixed_engine(engine)) as running:
        running.wait_ready()
        yield running


def test_concurrent_requests_share_a_batch_and_get_their_own_vectors(
    quick_server: Server, encoder: Encoder
):
    texts = [f"Sentence {i}: the river {'flows ' * i}into the sea." for i in range(9)]
    batches = quick_server.metric("rankserve_batch_size_count")
    batched_texts = quick_server.metric("rankserve_batch_size_sum")
    with ThreadPoolExecutor(max_workers=len(texts)) as pool, busy_worker(quick_server):
        first = pool.submit(post, quick_server, "/encode", {"texts": texts[:1]})
        quick_server.wait_metric("rankserve_batch_size_count", batches + 1)
        rest = [pool.submit(post, quick_server, "/encode", {"texts": [t]}) for t in texts[1:]]
        quick_server.wait_metric("rankserve_queue_texts", len(texts) - 1)
    responses = [first.result(), *(f.result() for f in rest)]
    # The eight requests that queued behind the busy worker went through in one batch.
    assert quick_server.metric("rankserve_batch_size_count") == batches + 2
    assert quick_server.metric("rankserve_batch_size_sum") == batched_texts + len(texts)
    served = torch.tensor([r.json()["embeddings"][0] for r in responses])  # (9, dim)
    alone = torch.cat([encoder.encode([t]).cpu() for t in texts])  # (9, dim)
    assert torch.allclose(served, alone, atol=1e-5)


def test_a_request_larger_than_a_forward_pass_is_split_and_reassembled(
    tmp_path, engine: Engine, encoder: Encoder
):
    small_passes = dataclasses.replace(encoder, batch_tokens=64)
    small = dataclasses.replace(engine, encoder=small_passes)
    texts = [("word " * (i * 7 % 23)).strip() or "empty" for i in range(21)]
    with serve(make_settings(tmp_path, encode_batch_size=4), fixed_engine(small)) as running:
        running.wait_ready()
        with running.client() as http:
            assert http.get("/info").json()["limits"]["max_batch_tokens"] == 64
        response = post(running, "/encode", {"texts": texts})
    served = torch.tensor(response.json()["embeddings"])  # (21, dim)
    alone = torch.cat([encoder.encode([t]).cpu() for t in texts])  # (21, dim)
    assert torch.allclose(served, alone, atol=1e-5)


# The longest wait allowed: far more than the test takes between its two requests.
@pytest.mark.parametrize("quick_server", [{"batch_wait_ms": 1000}], indirect=True)
def test_a_batch_wait_holds_an_idle_worker_for_requests_to_join(quick_server: Server):
    batches = quick_server.metric("rankserve_batch_size_count")
    batched_texts = quick_server.metric("rankserve_batch_size_sum")
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(post, quick_server, "/encode", {"texts": ["a", "b"]})
        quick_server.wait_metric("rankserve_queue_texts", 2)
        second = pool.submit(post, quick_server, "/encode", {"texts": ["c"]})
        assert first.result().status_code == second.result().status_code == 200
    assert quick_server.metric("rankserve_batch_size_count") == batches + 1
    assert quick_server.metric("rankserve_batch_size_sum") == batched_texts + 3


@pytest.mark.parametrize("quick_server", [{"queue_capacity": 4}], indirect=True)
def test_a_full_queue_answers_429_with_retry_after(quick_server: Server):
    batches = quick_server.metric("rankserve_batch_size_count")
    with ThreadPoolExecutor(max_workers=2) as pool:
        with busy_worker(quick_server):
            in_worker = pool.submit(post, quick_server, "/encode", {"texts": ["a", "b", "c"]})
            quick_server.wait_metric("rankserve_batch_size_count", batches + 1)
            queued = pool.submit(post, quick_server, "/encode", {"texts": ["d", "e", "f"]})
            quick_server.wait_metric("rankserve_queue_texts", 3)
            refused = post(quick_server, "/encode", {"texts": ["g", "h"]})
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error"] == {
            "message": "the encoder queue is full; retry later",
            "type": "overloaded",
            "code": 429,
        }
        assert in_worker.result().status_code == 200
        assert queued.result().status_code == 200
    assert quick_server.metric("rankserve_rejected_overload_total") == 1


def test_requests_finish_on_the_engine_they_started_with(quick_server: Server, engine: Engine):
    swapped = dataclasses.replace(engine, version="swapped-v2")
    holder = quick_server.services.holder
    batches = quick_server.metric("rankserve_batch_size_count")
    with ThreadPoolExecutor(max_workers=3) as pool:
        with busy_worker(quick_server):
            running = pool.submit(post, quick_server, "/encode", {"texts": ["one"]})
            quick_server.wait_metric("rankserve_batch_size_count", batches + 1)
            queued: Future = pool.submit(post, quick_server, "/encode", {"texts": ["two"]})
            quick_server.wait_metric("rankserve_queue_texts", 1)
            quick_server.loop.call_soon_threadsafe(holder.swap, swapped)
            while holder.current is not swapped:
                threading.Event().wait(0.01)
            after = pool.submit(post, quick_server, "/encode", {"texts": ["three"]})
            quick_server.wait_metric("rankserve_queue_texts", 2)
        for response, version in (
            (running.result(), engine.version),
            (queued.result(), engine.version),
            (after.result(), "swapped-v2"),
        ):
            assert response.json()["model_version"] == version
            assert response.headers["X-Model-Version"] == version
    # The queued request and the one after the swap never share a batch: different engines.
    assert quick_server.metric("rankserve_batch_size_count") == batches + 3


class SlowEncoder(Encoder):
    """The real encoder, each call a second longer: long enough that a client answered by one
    batch is back, over real HTTP, well inside the wait for it (30 % of the call)."""

    SECONDS = 1.0

    def encode_counted(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, list[int]]:
        time.sleep(self.SECONDS)  # what the batcher calls
        return super().encode_counted(*args, **kwargs)


@pytest.fixture
def slow_engine(engine: Engine, encoder: Encoder) -> Engine:
    fields = {f.name: getattr(encoder, f.name) for f in dataclasses.fields(encoder) if f.init}
    return dataclasses.replace(engine, encoder=SlowEncoder(**fields))


def answered_client_and_a_queued_one(server: Server) -> None:
    """Client A sends a text and, once answered, another; client B's text queues while A's
    first is encoded."""
    batches = server.metric("rankserve_batch_size_count")

    def client_a() -> list[httpx.Response]:
        return [post(server, "/encode", {"texts": [text]}) for text in ("a one", "a two")]

    with ThreadPoolExecutor(max_workers=2) as pool:
        a = pool.submit(client_a)
        server.wait_metric("rankserve_batch_size_count", batches + 1)
        b = pool.submit(post, server, "/encode", {"texts": ["b one"]})
        server.wait_metric("rankserve_queue_texts", 1)
        responses = [*a.result(), b.result()]
    assert [response.status_code for response in responses] == [200, 200, 200]


def test_a_batch_waits_for_the_clients_it_answered(tmp_path, slow_engine: Engine):
    assert SHARE * SlowEncoder.SECONDS >= 0.25  # the wait: ample for a local request
    with serve(make_settings(tmp_path, batch_rejoin_ms=1000), fixed_engine(slow_engine)) as running:
        running.wait_ready()
        batches = running.metric("rankserve_batch_size_count")
        answered_client_and_a_queued_one(running)
        # A's second text came back in time to join B's: two batches, not three.
        assert running.metric("rankserve_batch_size_count") == batches + 2
        assert running.metric("rankserve_batch_rejoin_waits_total", outcome="back") == 1
        assert running.metric("rankserve_batch_rejoin_waits_total", outcome="in_vain") == 0


def test_without_the_rejoin_wait_the_queued_text_leaves_alone(tmp_path, slow_engine: Engine):
    with serve(make_settings(tmp_path, batch_rejoin_ms=0), fixed_engine(slow_engine)) as running:
        running.wait_ready()
        batches = running.metric("rankserve_batch_size_count")
        answered_client_and_a_queued_one(running)
        assert running.metric("rankserve_batch_size_count") == batches + 3


def test_a_client_that_does_not_come_back_costs_one_wait_then_a_pause(
    tmp_path, slow_engine: Engine
):
    with serve(make_settings(tmp_path, batch_rejoin_ms=1000), fixed_engine(slow_engine)) as running:
        running.wait_ready()
        batches = running.metric("rankserve_batch_size_count")
        with ThreadPoolExecutor(max_workers=2) as pool:
            first = pool.submit(post, running, "/encode", {"texts": ["leaves after this"]})
            running.wait_metric("rankserve_batch_size_count", batches + 1)
            queued = pool.submit(post, running, "/encode", {"texts": ["queued meanwhile"]})
            assert first.result().status_code == queued.result().status_code == 200
        # The queued text waited in vain for the first client, then went alone.
        assert running.metric("rankserve_batch_size_count") == batches + 2
        assert running.metric("rankserve_batch_rejoin_waits_total", outcome="back") == 0
        assert running.metric("rankserve_batch_rejoin_waits_total", outcome="in_vain") == 1
