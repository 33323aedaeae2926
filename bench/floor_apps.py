"""The bare fronts bench.http_floor serves beside rankserve: POST /encode over the same encoder,
without the service's layers, to show what HTTP costs the event loop below them.

- `bare_fastapi`: one FastAPI route with pydantic request and response models, no dependencies,
  middleware or other routes.
- `bare_asgi`: a plain ASGI callable: the body read, its JSON parsed, the answer serialised by
  pydantic-core, no framework at all.

Both batch like the service's batcher does for clients that wait for each answer: one worker
thread encodes every pending text, and after each batch the collector waits up to
RANKSERVE_BATCH_REJOIN_MS for as many requests as it has just answered
(service/batching.py). Each answers `/metrics` with the batch totals bench.served reads.
Run by uvicorn as `bench.floor_apps:bare_fastapi` or `bench.floor_apps:bare_asgi`.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import pydantic_core
from fastapi import FastAPI, Response
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from core.loading import settings_encoder
from core.settings import get_settings
from core.threads import run_in_own_thread
from models.encoder import Encoder


class _Batcher:
    """Cohort batching over one encoder thread (the service's, without its limits, metrics and
    swaps)."""

    def __init__(self) -> None:
        settings = get_settings()
        # Loaded in a thread that ends, as the service loads it (core/threads.py says why).
        self.encoder: Encoder = run_in_own_thread(settings_encoder, settings)
        self.max_batch = settings.encode_batch_size
        self.rejoin_s = settings.batch_rejoin_ms / 1000
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encoder")
        self.pending: list[tuple[list[str], asyncio.Future[list[list[float]]]]] = []
        self.arrived = asyncio.Event()
        self.texts = 0
        self.batches = 0

    async def encode(self, texts: list[str]) -> list[list[float]]:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((texts, future))
        self.arrived.set()
        return await future

    async def collect(self) -> None:
        loop = asyncio.get_running_loop()
        answered, deadline = 0, 0.0
        while True:
            await self._gather(min(answered, self.max_batch), deadline)
            jobs, taken = [], 0
            while self.pending and (not jobs or taken + len(self.pending[0][0]) <= self.max_batch):
                jobs.append(self.pending.pop(0))
                taken += len(jobs[-1][0])
            texts = [text for job_texts, _ in jobs for text in job_texts]
            embeddings, _ = await loop.run_in_executor(
                self.worker, self.encoder.encode_counted, texts, self.max_batch
            )
            rows = embeddings.cpu().tolist()
            self.texts += len(texts)
            self.batches += 1
            start = 0
            for job_texts, future in jobs:
                future.set_result(rows[start : start + len(job_texts)])
                start += len(job_texts)
            answered, deadline = len(texts), loop.time() + self.rejoin_s

    async def _gather(self, answered: int, deadline: float) -> None:
        """Until texts are pending and either the answered clients' count of them has come or
        the rejoin wait is over."""
        loop = asyncio.get_running_loop()
        while True:
            remaining = deadline - loop.time()
            pending = sum(len(texts) for texts, _ in self.pending)
            if pending and (pending >= answered or remaining <= 0):
                return
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), remaining if remaining > 0 else None)

    def metrics(self) -> bytes:
        return (
            f"rankserve_batch_size_sum {self.texts}\nrankserve_batch_size_count {self.batches}\n"
        ).encode()


class EncodeRequest(BaseModel):
    texts: list[str]


class EncodeResponse(BaseModel):
    embeddings: list[list[float]]
    dim: int


@asynccontextmanager
async def _batching(app: FastAPI) -> AsyncIterator[None]:
    app.state.batcher = _Batcher()
    collector = asyncio.create_task(app.state.batcher.collect())
    yield
    collector.cancel()


bare_fastapi = FastAPI(lifespan=_batching)


@bare_fastapi.post("/encode", response_model=EncodeResponse)
async def encode(body: EncodeRequest) -> EncodeResponse:
    rows = await bare_fastapi.state.batcher.encode(body.texts)
    return EncodeResponse(embeddings=rows, dim=len(rows[0]))


@bare_fastapi.get("/metrics")
async def metrics() -> Response:
    return Response(bare_fastapi.state.batcher.metrics(), media_type="text/plain")


_asgi_state: dict[str, _Batcher] = {}  # the batcher, once the lifespan has started


async def bare_asgi(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await receive()  # lifespan.startup
        batcher = _asgi_state["batcher"] = _Batcher()
        collector = asyncio.create_task(batcher.collect())
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        collector.cancel()
        await send({"type": "lifespan.shutdown.complete"})
        return
    batcher = _asgi_state["batcher"]
    if scope["path"] == "/metrics":
        body, media_type = batcher.metrics(), b"text/plain"
    else:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        rows = await batcher.encode(pydantic_core.from_json(b"".join(chunks))["texts"])
        body = pydantic_core.to_json({"embeddings": rows, "dim": len(rows[0])})
        media_type = b"application/json"
    headers = [(b"content-type", media_type), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
