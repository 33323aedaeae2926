"""Errors leak nothing and can be traced (issue 10): every response carries X-Request-Id, client
messages are fixed strings without host, port or path, and the log record with the cause
carries the same request id.
"""

import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.engine import Engine
from service.routes import health
from service.server import log_config
from tests.service.conftest import AUTH, Server, fixed_engine, make_settings, serve
from tests.service.corpus_helpers import free_port

GENERATED_ID = re.compile(r"[0-9a-f]{32}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Iterator[Server]:
    settings = make_settings(tmp_path_factory.mktemp("var"), max_body_bytes=64 * 1024)
    with serve(settings, loader=fixed_engine(engine)) as running:
        running.wait_ready()
        yield running


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(headers=AUTH) as http:
        yield http


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/health", None, 200),
        ("POST", "/encode", {"texts": ["a"]}, 200),
        ("GET", "/nowhere", None, 404),
        ("PUT", "/encode", None, 405),
        ("POST", "/encode", {"texts": []}, 422),
        ("POST", "/encode", {"texts": ["a" * 100_000]}, 413),
        ("GET", "/documents/missing", None, 404),
    ],
)
def test_every_response_carries_a_request_id(
    client: httpx.Client, method: str, path: str, body: dict | None, status: int
):
    response = client.request(method, path, json=body)
    assert response.status_code == status
    assert GENERATED_ID.fullmatch(response.headers["X-Request-Id"])


def test_unauthorized_and_refused_by_the_server_carry_one_too(server: Server):
    with server.client() as client:
        response = client.post("/encode", json={"texts": ["a"]})
    assert response.status_code == 401
    assert GENERATED_ID.fullmatch(response.headers["X-Request-Id"])
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n")
        head = sock.recv(65536).split(b"\r\n\r\n")[0].decode().lower()
    assert GENERATED_ID.search(head.split("x-request-id:")[1])


def test_each_request_gets_its_own_id(client: httpx.Client):
    ids = {client.get("/health").headers["X-Request-Id"] for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize("sent", ["abc-123", "trace.4bf92f3577b34da6:00f067aa0ba902b7", "x" * 128])
def test_a_sane_client_id_is_kept(client: httpx.Client, sent: str):
    assert client.get("/health", headers={"X-Request-Id": sent}).headers["X-Request-Id"] == sent


@pytest.mark.parametrize("sent", ["has space", "x" * 129, "semi;colon", 'quote"d', "é"])
def test_any_other_client_id_is_replaced(client: httpx.Client, sent: str):
    response = client.get("/health", headers={"X-Request-Id": sent.encode()})
    assert GENERATED_ID.fullmatch(response.headers["X-Request-Id"])


def test_a_500_is_fixed_text_and_its_log_record_carries_the_id(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    def broken() -> None:
        raise RuntimeError("secret detail at /srv/rankserve/var and 10.0.0.7:6379")

    # /health builds its answer from this name at call time: the route fails unexpectedly.
    monkeypatch.setattr(health, "HealthResponse", broken)
    with caplog.at_level(logging.ERROR, logger="service.errors"):
        response = client.get("/health", headers={"X-Request-Id": "trace-500"})
    assert response.status_code == 500
    assert response.json() == {
        "error": {"message": "internal server error", "type": "internal_error", "code": 500}
    }
    assert response.headers["X-Request-Id"] == "trace-500"
    assert "secret" not in response.text
    records = [r for r in caplog.records if getattr(r, "request_id", None) == "trace-500"]
    assert records, [r.getMessage() for r in caplog.records]
    assert records[0].levelno == logging.ERROR
    assert records[0].exc_info is not None and "secret detail" in str(records[0].exc_info[1])


def test_with_redis_down_answers_name_no_host_or_port(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """Redis at a closed port: the 503s say what is down, never where it is; the log does."""
    port = free_port()
    settings = make_settings(tmp_path, redis_url=f"redis://127.0.0.1:{port}/0")
    leaks = ("127.0.0.1", str(port), "Error 111", "refused", "redis://")
    with (
        caplog.at_level(logging.WARNING, logger="service"),
        serve(settings, loader=fixed_engine(engine)) as running,
        running.client(headers=AUTH) as client,
    ):
        answers = [
            client.post("/documents", json={"documents": [{"text": "t"}]}),
            client.get("/documents/x"),
            client.get("/documents"),
            client.post("/documents/delete", json={"ids": ["x"]}),
            client.delete("/documents/x"),
            client.post("/search", json={"query": "q"}),
            client.get("/ready"),
        ]
        for response in answers:
            assert response.status_code == 503, (response.request.url, response.text)
            assert GENERATED_ID.fullmatch(response.headers["X-Request-Id"])
            for leak in leaks:
                assert leak not in response.text, (response.request.url, response.text)
        stored = answers[0]
        assert stored.json()["error"] == {
            "message": "the document store is unavailable",
            "type": "store_unavailable",
            "code": 503,
        }
    # The operator finds the cause under the id the client got.
    request_id = stored.headers["X-Request-Id"]
    records = [r for r in caplog.records if getattr(r, "request_id", None) == request_id]
    assert records, [r.getMessage() for r in caplog.records][-10:]
    assert str(port) in records[0].getMessage()


def test_the_server_log_format_shows_the_request_id():
    config = log_config("info")
    assert "%(request_id)s" in config["formatters"]["rankserve"]["fmt"]
    assert "%(request_id)s" in config["formatters"]["access"]["fmt"]
    assert all("request_id" in h["filters"] for h in config["handlers"].values())
