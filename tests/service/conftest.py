"""Real uvicorn servers on free localhost ports, for the API tests.

The shared `server` loads its engine with the production loader (real MiniLM, 512 real
Wikipedia anchors cached under a temporary var dir) and requires an API key, so every test
through it also exercises auth. Tests needing another configuration start their own with
`serve(...)`, usually with an engine built from the session's `encoder` and `anchors`.
"""

import asyncio
import shutil
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from core.loading import default_version
from core.settings import Settings
from models.anchors import AnchorSet
from models.encoder import Encoder
from service.app import COMPONENTS, EngineLoader, create_app
from service.dependencies import Services
from service.engine import Engine, load_engine
from service.server import server_config

TEST_ANCHORS = 512  # the same first 512 anchors as the session `anchors` fixture
API_KEY = "test-key-0123456789"
# Every app starts the document corpus (service/corpus) on the shared Redis: each gets its own
# key prefix under this session's, and no demo corpus, so nothing collides or needs encoding.
TEST_REDIS_PREFIX = f"rankserve-test-{uuid.uuid4().hex[:8]}"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@dataclass
class Server:
    url: str
    app: FastAPI
    loop: asyncio.AbstractEventLoop  # the server's event loop, to schedule work on it

    @property
    def services(self) -> Services:
        return self.app.state.services

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, **kwargs)

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        with self.client() as client:
            while client.get("/ready").status_code != 200:
                if time.monotonic() > deadline:
                    raise TimeoutError("the service did not become ready")
                time.sleep(0.05)

    def metric(self, sample: str, **labels: str) -> float:
        """The value of a sample (e.g. rankserve_batch_size_count) in /metrics with exactly
        these `labels` (none by default)."""
        with self.client() as client:
            text = client.get("/metrics").text
        for family in text_string_to_metric_families(text):
            for item in family.samples:
                if item.name == sample and item.labels == labels:
                    return item.value
        raise KeyError(sample)

    def wait_metric(self, sample: str, value: float, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.metric(sample) != value:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sample} never reached {value}")
            time.sleep(0.01)


def make_settings(var_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "anchor_count": TEST_ANCHORS,
        "anchor_seed": None,
        "var_dir": var_dir,
        "device": "cpu",
        "api_key": API_KEY,
        "redis_prefix": f"{TEST_REDIS_PREFIX}-{uuid.uuid4().hex[:8]}",
        "demo_corpus": None,
    }
    values.update(overrides)
    return Settings(**values)


def fixed_engine(engine: Engine) -> EngineLoader:
    """A loader that returns an engine built elsewhere (no second model load)."""
    return lambda _settings: engine


@contextmanager
def serve(
    settings: Settings, loader: EngineLoader = load_engine, **app_options: Any
) -> Iterator[Server]:
    """A real uvicorn server of `create_app(settings, loader=loader, **app_options)`."""
    captured: list[asyncio.AbstractEventLoop] = []

    @asynccontextmanager
    async def capture_loop(_app: FastAPI, _services: Services) -> AsyncIterator[None]:
        captured.append(asyncio.get_running_loop())
        yield

    app = create_app(settings, loader=loader, components=(*COMPONENTS, capture_loop), **app_options)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # The configuration `rankserve serve` runs (service/server.py): its limits are under test.
    server = uvicorn.Server(server_config(app, settings, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield Server(url=f"http://127.0.0.1:{port}", app=app, loop=captured[0])
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()


@pytest.fixture(scope="session", autouse=True)
def _delete_test_redis_keys() -> Iterator[None]:
    yield
    client = redis.Redis.from_url(Settings().redis_url)
    for key in client.scan_iter(match=f"{TEST_REDIS_PREFIX}-*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture(scope="session")
def server(
    tmp_path_factory: pytest.TempPathFactory, anchors: AnchorSet, anchor_cache: Path
) -> Iterator[Server]:
    """The production loader; the session's anchor cache is copied in so nothing re-encodes."""
    var_dir = tmp_path_factory.mktemp("var")
    shutil.copytree(anchor_cache, var_dir / "cache")
    with serve(make_settings(var_dir)) as running:
        running.wait_ready()
        yield running


@pytest.fixture(scope="session")
def engine(encoder: Encoder, anchors: AnchorSet) -> Engine:
    """The session's encoder and anchors as an engine, for servers that must not reload."""
    return Engine(encoder=encoder, anchors=anchors, version=default_version(encoder), name="test")


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(headers=AUTH) as http:
        yield http
