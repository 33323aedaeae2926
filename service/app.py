"""`create_app(settings)`: the FastAPI application that `rankserve serve` runs under uvicorn.

Extending it: add a router factory to `DATA_ROUTERS` (its router made by
`service.auth.data_router`, behind the API key when one is set) or `PUBLIC_ROUTERS`, and a
lifespan component to `COMPONENTS`. A component is an async context manager entered after the
shared services exist; the engine may still be loading, so a component that needs it awaits
`services.holder.wait_ready()` in a task of its own, and appends a check to `services.readiness`
to hold /ready at 503 until it is done.
"""

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.metadata import version
from typing import Any

from fastapi import FastAPI

from core.settings import Settings, get_settings
from core.threads import apply_thread_policy, in_own_thread
from service.background import background_task
from service.batching import Batcher
from service.console import routes as console
from service.corpus.lifespan import corpus_component
from service.dependencies import Services
from service.engine import Engine, EngineHolder
from service.engine_switch import EngineSwitch
from service.errors import install_error_handlers
from service.limits import BodyLimitMiddleware, Limits
from service.metrics import Metrics, ObservabilityMiddleware
from service.request_id import RequestIdMiddleware
from service.routes import (
    RouterFactory,
    admin,
    documents,
    embeddings,
    encode,
    health,
    metrics,
    rerank,
    search,
    similarity,
    snapshots,
)
from service.swap import load_active_engine, swap_component
from service.tracing import install_tracing

logger = logging.getLogger(__name__)

Component = Callable[[FastAPI, Services], AbstractAsyncContextManager[None]]
EngineLoader = Callable[[Settings], Engine]

PUBLIC_ROUTERS: tuple[RouterFactory, ...] = (
    health.build_router,
    metrics.build_router,
    admin.build_router,  # behind the admin token instead of the API key
    snapshots.build_router,  # /admin/snapshots, behind the admin token too
    console.build_router,  # page shells only: each page fetches its data with the user's keys
)
# In the order requests try them (create_app): the busiest first.
DATA_ROUTERS: tuple[RouterFactory, ...] = (
    encode.build_router,
    search.build_router,
    similarity.build_router,
    embeddings.build_router,
    rerank.build_router,
    documents.build_router,
)
# The corpus component registers its index with the engine switch, so a swap stages the new
# encoder's index: it comes first.
COMPONENTS: tuple[Component, ...] = (corpus_component, swap_component)


async def load_first_engine(services: Services, loader: EngineLoader) -> None:
    """Off the event loop, so /health answers while the model and anchors load, in a thread
    that ends with the load (core/threads.py says why)."""
    try:
        engine = await in_own_thread(loader, services.settings)
    except Exception:
        logger.exception("the model failed to load")
        services.holder.load_error = "the model failed to load"
        return
    else:
        await services.switch.first(engine)
    finally:
        services.holder.first_attempt.set()


def create_app(
    settings: Settings | None = None,
    *,
    loader: EngineLoader = load_active_engine,
    components: Sequence[Component] = COMPONENTS,
    span_exporter: Any | None = None,
) -> FastAPI:
    """The app; `span_exporter` (an OpenTelemetry SpanExporter) turns tracing on without an
    OTLP endpoint, for tests (service/tracing.py)."""
    settings = settings or get_settings()
    metrics_ = Metrics()
    holder = EngineHolder()
    services = Services(
        settings=settings,
        limits=Limits.from_settings(settings),
        holder=holder,
        metrics=metrics_,
        switch=EngineSwitch(
            holder, metrics_, settings.anchor_dtype, freezes_heap=settings.freeze_heap
        ),
        batcher=Batcher.from_settings(metrics_, settings),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await services.batcher.start()
        try:
            async with AsyncExitStack() as stack:
                # Entered first, left last: components stop before the loader is cancelled.
                await stack.enter_async_context(
                    background_task(load_first_engine(services, loader), "load-engine")
                )
                for component in components:
                    await stack.enter_async_context(component(app, services))
                yield
        finally:
            await services.batcher.stop()
            if app.state.tracing is not None:
                app.state.tracing.shutdown()

    app = FastAPI(
        title="rankserve",
        summary="Sentence embeddings and RankEncoder (Eq. 7) similarity",
        version=version("rankserve"),
        lifespan=lifespan,
        # Traced by service/tracing.py, with its own provider. FastAPI's native telemetry would
        # add a second span per request once a global provider exists, and looks for one (in
        # os.environ) on every request: 2 % of the event loop's time per POST /encode.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.state.services = services
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    # Added late, so outer: every response, the body limit's 413s included, is counted
    # and stamped with the model version.
    app.add_middleware(
        ObservabilityMiddleware,
        metrics=metrics_,
        live_version=lambda: holder.current.version if holder.current else None,
    )
    # Outermost: the request id is set before anything else of the request logs. The 500
    # handler, outside every middleware, stamps it itself (service/errors.py).
    app.add_middleware(RequestIdMiddleware)
    app.state.tracing = install_tracing(app, settings, span_exporter)  # None: tracing is off
    # Data routers first: a request walks the routes in order, and each included router costs
    # FastAPI a few µs to pass. Matching took the event loop 45 µs per POST /encode and 69 per
    # /search behind the public routers, 8 and 12 µs ahead of them; /health went from 5 to 47.
    for factory in (*DATA_ROUTERS, *PUBLIC_ROUTERS):
        app.include_router(factory(settings))
    return app


def app_from_environment() -> FastAPI:
    """uvicorn's factory (`--factory`): each worker process builds its app from RANKSERVE_*."""
    settings = get_settings()
    apply_thread_policy(settings)  # before this process's first torch or numpy work
    return create_app(settings)
