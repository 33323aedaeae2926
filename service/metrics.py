"""Prometheus metrics (one registry per app) and the ASGI middleware that records requests.

The middleware also stamps `X-Model-Version` on every response: the version of the engine the
request used (set by the engine dependency), else the live one, else "none" while loading.

With several uvicorn workers (`rankserve serve --workers N`), prometheus_client's multiprocess
mode: the supervisor points PROMETHEUS_MULTIPROC_DIR at a fresh directory before it starts the
workers (`multiprocess_directory`), every worker writes its values to files there, and /metrics,
whichever worker answers it, sums them (`exposition`). A worker that exits is marked dead
(`forget_dead_workers`), so its live gauges drop out while its counts stay in the totals.
"""

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.rejoin import Outcome

MODEL_VERSION_HEADER = "X-Model-Version"
# The ASGI scope key under which the engine dependency records the version a request used.
SCOPE_MODEL_VERSION = "rankserve.model_version"
NO_MODEL = "none"

# prometheus_client reads it when it is imported: set before a worker process starts.
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
_LIVE_GAUGE_FILE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")

# Up to a full request: one of more texts than a batch (up to 2,048) is an encoder call alone.
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "rankserve_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "rankserve_request_duration_seconds",
            "HTTP request latency by route template and method",
            ["route", "method"],
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "rankserve_batch_size",
            "Texts per encoder call after dynamic batching",
            buckets=_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "rankserve_queue_wait_seconds",
            "Time a request waited for the encoder worker",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.inference = Histogram(
            "rankserve_inference_seconds",
            "Worker time per encoder call (tokenise, forward passes)",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.search_index = Histogram(
            "rankserve_search_index_seconds",
            "faiss candidates and Eq. 7 rescoring per search, on the rescoring threads",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "rankserve_queue_texts",
            "Texts waiting for the encoder worker",
            registry=self.registry,
            multiprocess_mode="livesum",  # every live worker's queue, added up
        )
        self.rejoin_waits = Counter(
            "rankserve_batch_rejoin_waits",
            "Waits after a batch for the clients it answered, by whether they came back in time",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in get_args(Outcome):  # both at 0 from the start, as Prometheus advises
            self.rejoin_waits.labels(outcome=outcome)
        self.rejected = Counter(
            "rankserve_rejected_overload",
            "Requests refused with 429 because the queue was full",
            registry=self.registry,
        )
        self.model = Gauge(
            "rankserve_model_info",
            "1 for the model version being served",
            ["version", "name"],
            registry=self.registry,
            multiprocess_mode="livemax",  # 1 while some live worker serves the version
        )
        self._active: tuple[str, str] | None = None

    def set_active_model(self, version: str, name: str) -> None:
        if self._active is not None and self._active != (version, name):
            if multiprocess_enabled():
                # A removed series stays in this worker's file: 0 says it no longer serves it.
                self.model.labels(*self._active).set(0)
            else:
                self.model.remove(*self._active)
        self._active = (version, name)
        self.model.labels(version=version, name=name).set(1)

    def exposition(self) -> bytes:
        """The text format of this app's metrics, or of every worker's in multiprocess mode."""
        if not multiprocess_enabled():
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)


def multiprocess_enabled() -> bool:
    return bool(os.environ.get(MULTIPROCESS_ENV))


@contextlib.contextmanager
def multiprocess_directory() -> Iterator[Path]:
    """A fresh, empty PROMETHEUS_MULTIPROC_DIR for the workers started inside, removed after.

    Fresh on every start: files a previous run left behind would add its counts to this one's.
    """
    previous = os.environ.get(MULTIPROCESS_ENV)
    directory = Path(tempfile.mkdtemp(prefix="rankserve-metrics-"))
    os.environ[MULTIPROCESS_ENV] = str(directory)
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop(MULTIPROCESS_ENV, None)
        else:
            os.environ[MULTIPROCESS_ENV] = previous
        shutil.rmtree(directory, ignore_errors=True)


def forget_dead_workers(live_pids: Collection[int]) -> list[int]:
    """Mark dead every process with live-gauge files that is not among `live_pids`.

    Reading the pids off the files also catches a worker that died before the supervisor
    knew its pid for long (a failed restart). Returns the pids marked.
    """
    directory = os.environ.get(MULTIPROCESS_ENV)
    if not directory:
        return []
    found = {
        int(m.group(1)) for name in os.listdir(directory) if (m := _LIVE_GAUGE_FILE.match(name))
    }
    dead = sorted(found - set(live_pids))
    for pid in dead:
        multiprocess.mark_process_dead(pid, directory)
    return dead


class ObservabilityMiddleware:
    """Pure ASGI: counts and times each request, adds X-Model-Version to its response."""

    def __init__(
        self, app: ASGIApp, metrics: Metrics, live_version: Callable[[], str | None]
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.live_version = live_version

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_with_version(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                version = scope.get(SCOPE_MODEL_VERSION) or self.live_version() or NO_MODEL
                headers[MODEL_VERSION_HEADER] = version
            await send(message)

        try:
            await self.app(scope, receive, send_with_version)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"]
            self.metrics.requests.labels(route=route, method=method, status=str(status)).inc()
            self.metrics.latency.labels(route=route, method=method).observe(
                time.perf_counter() - start
            )
