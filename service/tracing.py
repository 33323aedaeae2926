"""Optional OpenTelemetry tracing: a span for every HTTP request (FastAPI's instrumentation)
with the Redis commands it ran beneath it (redis-py's), sent to an OTLP/HTTP collector.

Off unless `otlp_endpoint` is set (RANKSERVE_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT,
core/settings.py); the packages come with the `otel` extra, and without them the service says
so once and serves untraced. The probes (/health, /ready, /metrics) are not traced: a
Kubernetes probe every few seconds would be most of the spans. Each process (each uvicorn
worker) has its own provider and exporter thread.
"""

import logging
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from fastapi import FastAPI

from core.settings import Settings

logger = logging.getLogger(__name__)

# Regexes searched in the full URL, comma-separated (opentelemetry-util-http's ExcludeList).
UNTRACED_URLS = "://[^/]+/health$,://[^/]+/ready$,://[^/]+/metrics$"


@dataclass
class Tracing:
    provider: Any  # opentelemetry.sdk.trace.TracerProvider
    redis: Any  # the RedisInstrumentor, undone at shutdown

    def shutdown(self) -> None:
        """Export what is buffered, then stop tracing Redis commands in this process."""
        self.redis.uninstrument()
        self.provider.shutdown()


def install_tracing(
    app: FastAPI, settings: Settings, exporter: Any | None = None
) -> Tracing | None:
    """Trace `app` and this process's Redis clients; None (nothing installed) when tracing is
    off. `exporter` (an SDK SpanExporter) replaces the OTLP one: each span is handed to it as
    it ends, which the tests read from memory."""
    if exporter is None and not settings.otlp_endpoint:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
        from opentelemetry.instrumentation.redis import RedisInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        logger.warning(
            "an OTLP endpoint is set but OpenTelemetry is not installed "
            "(pip install 'rankserve[otel]'): serving without tracing"
        )
        return None
    resource = Resource.create(
        {"service.name": "rankserve", "service.version": version("rankserve")}
    )
    provider = TracerProvider(resource=resource)
    if exporter is None:
        # The variable is the collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is.
        endpoint = f"{str(settings.otlp_endpoint).rstrip('/')}/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls=UNTRACED_URLS)
    redis = RedisInstrumentor()
    # Once per process: redis-py's classes are patched, not one client.
    if not redis.is_instrumented_by_opentelemetry:
        redis.instrument(tracer_provider=provider)
    logger.info("tracing to %s", "an in-process exporter" if exporter else settings.otlp_endpoint)
    return Tracing(provider, redis)
