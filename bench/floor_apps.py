"""The bare fronts bench.http_floor serves beside rankserve: POST /encode over the same encoder,
without the service's layers, to show what HTTP costs the event loop below them.

- `bare_fastapi`: one FastAPI route with a pydantic request model, no dependencies, middleware
  or other routes.
- `bare_asgi`: a plain ASGI callable: the body read and its JSON parsed by pydantic-core, no
  framework at all.

Both batch with the service's own batcher (service/batching.py: its rejoin wait and metrics
included) and write the answer as the service does (service/vector_json.py), so what they leave
out is the service's HTTP layers only. Each answers `/metrics`
with the batcher's metrics, which bench.served reads. Run by uvicorn as
`bench.floor_apps:bare_fastapi` or `bench.floor_apps:bare_asgi`.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pydantic_core
from fastapi import FastAPI, Response
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from core.settings import get_settings
from core.threads import run_in_own_thread
from service.batching import Batcher
from service.engine import Engine, load_engine
from service.metrics import Metrics
from service.vector_json import VectorJSONResponse, float32_rows


class _Encoding:
    """The service's engine and batcher, without the service around them."""

    def __init__(self) -> None:
        settings = get_settings()
        # Two anchors: the fronts only encode. Loaded in a thread that ends, as the service
        # loads its engine (core/threads.py says why).
        self.engine: Engine = run_in_own_thread(
            load_engine, settings.model_copy(update={"anchor_count": 2})
        )
        self.metrics = Metrics()
        self.batcher = Batcher.from_settings(self.metrics, settings)

    async def body(self, texts: list[str]) -> bytes:
        """The JSON answer to POST /encode of `texts`: their embeddings and dimension."""
        encoded = await self.batcher.encode(self.engine, texts)
        content = {"embeddings": float32_rows(encoded.embeddings), "dim": self.engine.dim}
        return VectorJSONResponse(content).body


class EncodeRequest(BaseModel):
    texts: list[str]


@asynccontextmanager
async def _batching(app: FastAPI) -> AsyncIterator[None]:
    app.state.encoding = _Encoding()
    await app.state.encoding.batcher.start()
    yield
    await app.state.encoding.batcher.stop()


bare_fastapi = FastAPI(lifespan=_batching)


@bare_fastapi.post("/encode")
async def encode(body: EncodeRequest) -> Response:
    answer = await bare_fastapi.state.encoding.body(body.texts)
    return Response(answer, media_type="application/json")


@bare_fastapi.get("/metrics")
async def metrics() -> Response:
    return Response(bare_fastapi.state.encoding.metrics.exposition(), media_type="text/plain")


_asgi_state: dict[str, _Encoding] = {}  # the encoding, once the lifespan has started


async def bare_asgi(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await receive()  # lifespan.startup
        encoding = _asgi_state["encoding"] = _Encoding()
        await encoding.batcher.start()
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        await encoding.batcher.stop()
        await send({"type": "lifespan.shutdown.complete"})
        return
    encoding = _asgi_state["encoding"]
    if scope["path"] == "/metrics":
        body, media_type = encoding.metrics.exposition(), b"text/plain"
    else:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = await encoding.body(pydantic_core.from_json(b"".join(chunks))["texts"])
        media_type = b"application/json"
    headers = [(b"content-type", media_type), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
