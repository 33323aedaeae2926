"""OpenTelemetry tracing (service/tracing.py): off unless an endpoint is set; with it on, the real
FastAPI and Redis instrumentation give a span per request with its Redis commands beneath it,
and the OTLP/HTTP exporter delivers them to a collector's /v1/traces."""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from core.settings import Settings
from service.app import create_app
from service.engine import Engine
from tests.service.conftest import AUTH, fixed_engine, make_settings, serve


def attribute(span, *names: str) -> object:
    """The first of `names` the span has: the HTTP and database semantic conventions were
    renamed, and the instrumentation emits the old or the new names by configuration."""
    return next((span.attributes[n] for n in names if n in span.attributes), None)


def test_tracing_is_off_without_an_endpoint(engine: Engine, tmp_path: Path):
    app = create_app(make_settings(tmp_path), loader=fixed_engine(engine))
    assert app.state.tracing is None


def test_the_endpoint_comes_from_ours_or_the_standard_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("RANKSERVE_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert Settings(_env_file=None).otlp_endpoint is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert Settings(_env_file=None).otlp_endpoint == "http://collector:4318"
    monkeypatch.setenv("RANKSERVE_OTLP_ENDPOINT", "http://ours:4318")
    assert Settings(_env_file=None).otlp_endpoint == "http://ours:4318"


def test_a_request_and_its_redis_commands_are_one_trace(engine: Engine, tmp_path: Path):
    exporter = InMemorySpanExporter()
    settings = make_settings(tmp_path)
    with (
        serve(settings, loader=fixed_engine(engine), span_exporter=exporter) as running,
        running.client(headers=AUTH) as client,
    ):
        running.wait_ready(timeout=120)
        document = {"id": "traced-1", "text": "A span for every request"}
        assert client.post("/documents", json={"documents": [document]}).status_code == 200
        assert client.get("/documents/traced-1").status_code == 200
        assert client.get("/health").status_code == 200
    spans = exporter.get_finished_spans()
    requests = [s for s in spans if s.kind is SpanKind.SERVER]
    # The probes (/health, and /ready polled above) are not traced.
    assert sorted(attribute(s, "http.route") for s in requests) == [
        "/documents",
        "/documents/{doc_id:document_id}",
    ]
    read = next(
        s for s in requests if attribute(s, "http.route") == "/documents/{doc_id:document_id}"
    )
    assert attribute(read, "http.response.status_code", "http.status_code") == 200
    assert read.resource.attributes["service.name"] == "rankserve"
    beneath = [
        s
        for s in spans
        if s.kind is SpanKind.CLIENT and s.context.trace_id == read.context.trace_id
    ]
    assert beneath, "the document read from Redis is not in the request's trace"
    assert all(attribute(s, "db.system", "db.system.name") == "redis" for s in beneath)
    assert all(s.parent is not None for s in beneath)


class _Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    """A stand-in OTLP/HTTP collector on loopback: keeps every POST it gets."""
    _Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_spans_reach_the_otlp_endpoint(engine: Engine, tmp_path: Path, collector: str):
    settings = make_settings(tmp_path, otlp_endpoint=collector)
    with serve(settings, loader=fixed_engine(engine)) as running:
        running.wait_ready(timeout=120)
        with running.client(headers=AUTH) as client:
            assert client.get("/documents/absent").status_code == 404
    # The batch processor flushes at shutdown; the exporter appends /v1/traces to the base URL.
    assert _Collector.received, "nothing was exported"
    names = set()
    for path, content_type, body in _Collector.received:
        assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                names |= {span.name for span in scope.spans}
    assert "GET /documents/{doc_id:document_id}" in names
