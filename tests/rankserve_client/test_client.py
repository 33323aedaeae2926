"""rankserve_client against a real uvicorn: every endpoint, sync and async, errors, retries.

The data and public endpoints go through the shared `server` (API key required); /admin
through a server of this module's own with an admin token and a small bundle store. Retry
timing against a scripted transport is at the end: the real server cannot be made to send
every Retry-After form on cue.
"""

import asyncio
import inspect
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import torch

import rankserve_client
from core.redis_keys import RedisKeys
from core.registry import BundleStore
from models.anchors import AnchorSet
from models.encoder import Encoder
from models.scoring import score_pairs
from rankserve_client import (
    APIError,
    AsyncClient,
    Client,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    NotReadyError,
    OverloadedError,
    UnauthorizedError,
)
from service.engine import Engine
from tests.polling import wait_until
from tests.service.conftest import API_KEY, AUTH, Server, fixed_engine, make_settings, serve
from tests.service.test_admin import _small_dev_sets
from tests.worker.conftest import delete_queue_keys
from worker.report import write_report

ADMIN_TOKEN = "client-admin-token-0123"
PAIRS = [
    ("A man is playing a guitar.", "Someone plays the guitar."),
    ("A man is playing a guitar.", "The stock market fell sharply today."),
]


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, api_key=API_KEY) as rankserve:
        yield rankserve


def _suite() -> str:
    """A metadata value no other test's documents carry, for filters and cleanup."""
    return f"client-{uuid.uuid4().hex[:8]}"


# Data endpoints


def test_encode_and_embeddings(client: Client, encoder: Encoder):
    texts = ["A man is playing a guitar.", ""]
    encoded = client.encode(texts)
    assert encoded["dim"] == encoder.dim
    assert encoded["truncated"] == [False, False]
    vectors = torch.tensor(encoded["embeddings"])
    assert torch.allclose(vectors, encoder.encode(texts).cpu(), atol=1e-5)
    openai_shaped = client.embeddings(texts, model="mine")
    assert openai_shaped["model"] == "mine"
    assert [item["index"] for item in openai_shaped["data"]] == [0, 1]
    assert torch.equal(torch.tensor([d["embedding"] for d in openai_shaped["data"]]), vectors)
    one = client.embeddings(texts[0], encoding_format="base64")
    assert isinstance(one["data"][0]["embedding"], str)


def test_similarity_and_rerank(client: Client, encoder: Encoder, anchors: AnchorSet):
    expected = score_pairs(encoder, anchors, PAIRS).blended(0.5)
    pairs = client.similarity(PAIRS, lambda_=0.5)
    assert pairs["lambda"] == 0.5
    served = torch.tensor([item["score"] for item in pairs["scores"]])
    assert torch.allclose(served, expected, atol=1e-3)
    source, targets = PAIRS[0][0], [b for _, b in PAIRS]
    one_to_many = client.similarity_to(source, targets, lambda_=0.5)
    assert [s["score"] for s in one_to_many["scores"]] == pytest.approx(served.tolist(), abs=1e-5)
    explained = client.explain(source, targets, anchors=3, lambda_=0.5)
    assert (explained["lambda"], explained["anchor_count"]) == (0.5, len(anchors.texts))
    assert [t["score"] for t in explained["targets"]] == pytest.approx(served.tolist(), abs=1e-5)
    nearest = explained["source"]["nearest_anchors"]
    assert [a["text"] for a in nearest] == [anchors.texts[a["anchor"]] for a in nearest]
    assert [a["cosine"] for a in nearest] == sorted((a["cosine"] for a in nearest), reverse=True)
    assert all(len(t["nearest_anchors"]) == 3 for t in explained["targets"])

    ranked = client.rerank(source, targets[::-1], top_n=1, return_documents=True, lambda_=0.5)
    assert ranked["lambda"] == 0.5
    (best,) = ranked["results"]
    assert (best["index"], best["document"]) == (1, {"text": targets[0]})
    assert best["relevance_score"] == pytest.approx(served[0].item(), abs=1e-5)
    everything = client.rerank(source, targets)["results"]
    assert [item["index"] for item in everything] == [0, 1]
    assert "document" not in everything[0]


def test_documents_crud_and_search(client: Client):
    suite = _suite()
    written = client.upsert_documents(
        [
            {"id": f"{suite}-cat", "text": "The cat sat on the mat", "metadata": {"s": suite}},
            {"text": "A dog barks loudly", "metadata": {"s": suite, "animal": "dog"}},
        ]
    )
    cat_id, dog_id = written["ids"]
    assert cat_id == f"{suite}-cat"
    stored = client.get_document(cat_id)
    assert (stored["text"], stored["metadata"]) == ("The cat sat on the mat", {"s": suite})
    assert stored["revision"] <= written["revision"]

    page = client.list_documents(limit=1)
    assert len(page["documents"]) == 1
    listed = [doc["id"] for doc in client.iter_documents(page_size=1)]
    assert {cat_id, dog_id} <= set(listed)
    assert listed == sorted(listed)

    hits = client.search("kitten on a rug", top_k=1, candidates=50, filter={"s": suite})["hits"]
    assert [hit["id"] for hit in hits] == [cat_id]
    dogs = client.search("an animal", lambda_=0.0, filter={"s": suite, "animal": "dog"})
    assert [hit["id"] for hit in dogs["hits"]] == [dog_id]
    assert dogs["hits"][0]["score"] == pytest.approx(dogs["hits"][0]["cosine"], abs=1e-6)
    animals = {
        "must": {"key": "s", "match": {"value": suite}},
        "must_not": {"is_empty": {"key": "animal"}},
    }
    assert [hit["id"] for hit in client.search("a pet", filter=animals)["hits"]] == [dog_id]
    both = client.search("a pet", top_k=2, filter={"s": suite})["hits"]
    second = client.search("a pet", top_k=1, offset=1, filter={"s": suite})["hits"]
    assert [hit["id"] for hit in second] == [both[1]["id"]]

    assert client.delete_document(cat_id)["deleted"] == [cat_id]
    deleted = client.delete_documents([dog_id, cat_id])
    assert (deleted["deleted"], deleted["not_found"]) == ([dog_id], [cat_id])
    with pytest.raises(NotFoundError) as missing:
        client.get_document(cat_id)
    assert missing.value.message == f"no document with id {cat_id!r}"


def test_public_endpoints(client: Client, server: Server):
    assert client.health() == {"status": "ok"}
    ready = client.ready()
    assert ready["status"] == "ready"
    assert client.wait_ready(timeout_s=1)["model_version"] == ready["model_version"]
    info = client.info()
    assert info["limits"]["max_texts_per_request"] == server.services.settings.max_texts_per_request
    assert "max_rerank_texts" in info["limits"]
    assert "rankserve_requests_total" in client.metrics()


def test_generic_request_reaches_any_route(client: Client):
    body = client.request("POST", "/encode", json={"texts": ["x"]})
    assert len(body["embeddings"]) == 1
    assert client.request("GET", "/metrics", expect="text").startswith("#")


# Errors


def test_errors_carry_the_body(client: Client, server: Server):
    with pytest.raises(InvalidRequestError) as raised:
        client.encode([])
    error = raised.value
    assert (error.status_code, error.code, error.type) == (422, 422, "invalid_request")
    assert error.message == "texts: List should have at least 1 item after validation, not 0"
    assert error.body == {"error": {"message": error.message, "type": error.type, "code": 422}}
    assert error.request_id
    assert str(error) == f"422 invalid_request: {error.message}"

    with Client(server.url, api_key="wrong") as wrong, pytest.raises(UnauthorizedError) as denied:
        wrong.encode(["x"])
    assert denied.value.type == "unauthorized"
    with pytest.raises(APIError) as not_found:
        client.request("GET", "/nothing-here")
    assert isinstance(not_found.value, NotFoundError)


def test_a_response_without_the_error_body_still_raises_by_status():
    transport = httpx.MockTransport(lambda _request: httpx.Response(502, text="<html>bad</html>"))
    with (
        Client("http://proxy", http_client=httpx.Client(transport=transport)) as client,
        pytest.raises(APIError) as raised,
    ):
        client.health()
    assert (raised.value.status_code, raised.value.type) == (502, "http_error")
    assert raised.value.message == "<html>bad</html>"


# Retries against the real server


def _recording_http(statuses: list[tuple[int, float]]) -> httpx.Client:
    def record(response: httpx.Response) -> None:
        statuses.append((response.status_code, time.monotonic()))

    return httpx.Client(timeout=120, event_hooks={"response": [record]})


def test_a_full_queue_is_retried_after_retry_after(tmp_path: Path, engine: Engine):
    settings = make_settings(tmp_path, queue_capacity=2)
    statuses: list[tuple[int, float]] = []
    release = threading.Event()
    with serve(settings, fixed_engine(engine)) as server, ThreadPoolExecutor(3) as pool:
        server.wait_ready()
        batches = server.metric("rankserve_batch_size_count")
        # The encoder thread is held; one request waits on it, one fills the queue.
        asyncio.run_coroutine_threadsafe(server.services.batcher.run(release.wait, 60), server.loop)
        with server.client(headers=AUTH) as http:
            running = pool.submit(http.post, "/encode", json={"texts": ["a"]})
            server.wait_metric("rankserve_batch_size_count", batches + 1)
            queued = pool.submit(http.post, "/encode", json={"texts": ["b", "c"]})
            server.wait_metric("rankserve_queue_texts", 2)
            with Client(server.url, api_key=API_KEY, http_client=_recording_http(statuses)) as c:
                retried = pool.submit(c.encode, ["d"])
                server.wait_metric("rankserve_rejected_overload_total", 1)
                release.set()
                assert len(retried.result()["embeddings"]) == 1
            assert running.result().status_code == queued.result().status_code == 200
    codes = [code for code, _ in statuses]
    assert codes[0] == 429 and codes[-1] == 200 and set(codes) <= {429, 200}
    # The server's Retry-After (1 s) was waited out before the next try.
    assert statuses[1][1] - statuses[0][1] >= 0.95


def test_not_ready_is_retried_with_backoff_until_the_model_loads(tmp_path: Path, engine: Engine):
    loaded = threading.Event()

    def slow_loader(_settings):
        loaded.wait(timeout=60)
        return engine

    statuses: list[tuple[int, float]] = []
    recording = _recording_http(statuses)
    with (
        serve(make_settings(tmp_path), loader=slow_loader) as server,
        ThreadPoolExecutor(1) as pool,
        Client(
            server.url, api_key=API_KEY, max_retries=8, backoff_s=0.1, http_client=recording
        ) as client,
    ):
        with pytest.raises(NotReadyError):
            client.ready()  # a probe: answered at once, never retried
        assert [code for code, _ in statuses] == [503]
        encoded = pool.submit(client.encode, ["x"])
        wait_until(lambda: len(statuses) >= 3, 30, "the client did not retry")
        loaded.set()
        assert len(encoded.result()["embeddings"]) == 1
        tries = statuses[1:]
        assert client.wait_ready(timeout_s=30)["status"] == "ready"
    assert [code for code, _ in tries][-1] == 200
    assert {code for code, _ in tries[:-1]} <= {503}
    gaps = [later - earlier for (_, earlier), (_, later) in itertools.pairwise(tries)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19  # 0.1 s, then doubling


# Async


async def test_async_client_covers_the_same_calls(server: Server, encoder: Encoder):
    suite = _suite()
    async with AsyncClient(server.url, api_key=API_KEY) as client:
        encoded = await client.encode(["A man is playing a guitar."])
        assert torch.allclose(
            torch.tensor(encoded["embeddings"]),
            encoder.encode(["A man is playing a guitar."]).cpu(),
            atol=1e-5,
        )
        ranked = await client.rerank(PAIRS[0][0], [PAIRS[1][1], PAIRS[0][1]], top_n=1)
        assert ranked["results"][0]["index"] == 1
        similar = await client.similarity(PAIRS)
        assert similar["scores"][0]["score"] > similar["scores"][1]["score"]
        explained = await client.explain(PAIRS[0][0], [PAIRS[0][1]], anchors=2)
        assert explained["targets"][0]["score"] == pytest.approx(similar["scores"][0]["score"])
        assert len(explained["source"]["nearest_anchors"]) == 2
        ids = (
            await client.upsert_documents(
                [{"text": f"note {i}", "metadata": {"s": suite}} for i in range(3)]
            )
        )["ids"]
        listed = [doc["id"] async for doc in client.iter_documents(page_size=2)]
        assert set(ids) <= set(listed)
        hits = (await client.search("note 1", top_k=3, filter={"s": suite}))["hits"]
        assert {hit["id"] for hit in hits} == set(ids)
        assert (await client.delete_documents(ids))["deleted"] == ids
        assert (await client.wait_ready())["status"] == "ready"
        assert (await client.info())["dim"] == encoder.dim
        with pytest.raises(InvalidRequestError) as raised:
            await client.similarity([])
        assert raised.value.type == "invalid_request"


def test_sync_and_async_clients_have_the_same_methods():
    def public(cls: type) -> dict[str, Any]:
        return {
            name: member
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    sync, aio = public(Client), public(AsyncClient)
    assert set(aio) == (set(sync) - {"close"}) | {"aclose"}
    for name, method in sync.items():
        if name == "close":
            continue
        parameters = inspect.signature(method).parameters
        assert inspect.signature(aio[name]).parameters == parameters, name
        asynchronous = aio[name]
        assert inspect.iscoroutinefunction(asynchronous) or inspect.isasyncgenfunction(
            asynchronous
        ), name


# Admin


@pytest.fixture(scope="module")
def admin_server(
    tmp_path_factory: pytest.TempPathFactory, engine: Engine, encoder: Encoder, anchors: AnchorSet
) -> Iterator[Server]:
    """A store with one bundle and one carrying a diagnostics report; no worker."""
    root = tmp_path_factory.mktemp("client-admin")
    store = BundleStore(root / "store")
    store.write("v1", encoder=encoder, anchors=anchors, method="simcse", parent="base")
    report_settings = make_settings(root / "var-report", data_dir=_small_dev_sets(root))
    report = write_report(report_settings, "reported", encoder, anchors, root / "report")
    store.write("reported", encoder=encoder, anchors=anchors, method="simcse", report=report)
    settings = make_settings(
        root / "var", admin_token=ADMIN_TOKEN, store_dir=root / "store", reconcile_interval_s=600
    )
    with serve(settings, loader=fixed_engine(engine)) as running:
        running.wait_ready()
        yield running
    client = redis.Redis.from_url(settings.redis_url)
    delete_queue_keys(client, RedisKeys(settings.redis_prefix))
    client.close()


@pytest.mark.slow
def test_admin_jobs_models_and_reports(admin_server: Server, engine: Engine):
    with Client(admin_server.url, api_key=API_KEY, admin_token=ADMIN_TOKEN) as client:
        accepted = client.retrain("simcse", params={"max_steps": 3}, force=True)
        assert accepted["status"] == "queued"
        job = client.job(accepted["job_id"])
        assert (job["method"], job["params"], job["force"]) == ("simcse", {"max_steps": 3}, True)
        assert accepted["job_id"] in [listed["id"] for listed in client.jobs()["jobs"]]
        assert client.cancel_job(accepted["job_id"])["status"] == "canceled"
        with pytest.raises(ConflictError) as ended:
            client.cancel_job(accepted["job_id"])
        assert "already ended" in ended.value.message
        with pytest.raises(InvalidRequestError) as invalid:
            client.retrain("simcse", teachers=["default"])
        assert "takes 0 to 0 teachers" in invalid.value.message

        models = client.models()
        assert models["active"] is None
        assert {v["version"] for v in models["versions"]} == {"v1", "reported"}
        assert client.activate_model("v1") == {"active": "v1", "previous": None}
        wait_until(lambda: client.ready()["model_version"] == "v1", 60, "no swap to v1")
        with pytest.raises(NotFoundError):
            client.activate_model("missing")

        report = client.model_report("reported")
        assert report["version"] == "reported"
        assert set(report["charts"]) == {"heros", "geometry", "similar_pairs"}
        chart = report["charts"]["heros"].rsplit("/", 1)[-1]
        assert client.model_report_chart("reported", chart).startswith(b"\x89PNG")

        # The API key never opens /admin: the admin routes take the admin token alone.
        with (
            Client(admin_server.url, admin_token=API_KEY) as wrong,
            pytest.raises(UnauthorizedError),
        ):
            wrong.models()


@pytest.mark.slow
async def test_async_admin(admin_server: Server):
    async with AsyncClient(admin_server.url, admin_token=ADMIN_TOKEN) as client:
        assert isinstance((await client.jobs())["jobs"], list)
        assert "versions" in await client.models()
        with pytest.raises(NotFoundError):
            await client.job("0123456789abcdef")


# Retry policy, against a scripted transport


def _scripted(responses: list[httpx.Response]) -> tuple[httpx.Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return responses[min(len(seen), len(responses)) - 1]

    return httpx.Client(transport=httpx.MockTransport(handler)), seen


def _overloaded(retry_after: str | None) -> httpx.Response:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    body = {"error": {"message": "the encoder queue is full; retry later", "type": "overloaded"}}
    return httpx.Response(429, json=body | {"code": 429}, headers=headers)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []
    monkeypatch.setattr(rankserve_client.sync, "sleep", waited.append)
    return waited


def test_retries_are_bounded(sleeps: list[float]):
    http, seen = _scripted([_overloaded("2")])
    with (
        Client("http://x", http_client=http, max_retries=2) as client,
        pytest.raises(OverloadedError) as raised,
    ):
        client.health()
    assert len(seen) == 3
    assert sleeps == [2.0, 2.0]
    assert raised.value.retry_after == 2.0
    assert raised.value.type == "overloaded"


def test_a_retry_after_past_the_bound_is_raised_at_once(sleeps: list[float]):
    http, seen = _scripted([_overloaded("120"), httpx.Response(200, json={"status": "ok"})])
    with (
        Client("http://x", http_client=http, max_retry_wait_s=30) as client,
        pytest.raises(OverloadedError) as raised,
    ):
        client.health()
    assert (len(seen), sleeps, raised.value.retry_after) == (1, [], 120.0)


def test_retry_after_as_a_date_and_backoff_without_one(sleeps: list[float]):
    in_three_seconds = formatdate(time.time() + 3, usegmt=True)
    http, seen = _scripted(
        [
            _overloaded(in_three_seconds),
            _overloaded(None),
            httpx.Response(503, json={"error": {"message": "m", "type": "not_ready", "code": 503}}),
            httpx.Response(200, json={"status": "ok"}),
        ]
    )
    with Client("http://x", http_client=http, backoff_s=0.25) as client:
        assert client.health() == {"status": "ok"}
    assert len(seen) == 4
    assert 1.5 < sleeps[0] <= 3.0  # the date's second is whole: up to one second less
    assert sleeps[1:] == [0.5, 1.0]  # 0.25 doubling, from the second try on


def test_other_errors_are_not_retried(sleeps: list[float]):
    body = {"error": {"message": "m", "type": "invalid_request", "code": 422}}
    http, seen = _scripted([httpx.Response(422, json=body)])
    with Client("http://x", http_client=http) as client, pytest.raises(InvalidRequestError):
        client.encode(["x"])
    assert (len(seen), sleeps) == (1, [])


def test_tokens_go_to_their_own_routes():
    http, seen = _scripted([httpx.Response(200, json={})])
    with Client("http://x", api_key="key", admin_token="admin", http_client=http) as client:
        client.encode(["x"])
        client.models()
        client.get_document("a/b")
    assert [r.headers["Authorization"] for r in seen] == [
        "Bearer key",
        "Bearer admin",
        "Bearer key",
    ]
    # An id is one path segment, whatever it holds.
    assert seen[2].url.raw_path == b"/documents/a%2Fb"
