"""The event loop's CPU per POST /encode inside the app: rankserve's ASGI stack against one bare
FastAPI route, both called in-process with no sockets and an encoder that returns fixed vectors.

What is left is the work the service's layers do per request (middlewares, dependencies,
routing past the other routers, strict JSON, the batcher's bookkeeping), without uvicorn's or
the encoder's, which bench.http_floor measures over real HTTP. The bare route reads the same
request model, goes through the same batcher and writes the same body, through FastAPI's own
request handler, where the service's /encode takes its lean handler (service/json_route.py):
the ratio is what the service costs beside one plain FastAPI route. 16 concurrent callers send
one text each; the two apps alternate in rounds, and the table gives the least and the median
of the rounds' CPU per request (the event loop's thread only: the stand-in encoder runs on the
batcher's worker thread).

    python -m bench.asgi_stack [--requests 10000] [--rounds 9]
"""

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import torch
import uvloop
from fastapi import FastAPI
from rich.console import Console
from rich.table import Table
from starlette.types import ASGIApp, Message

from core.settings import Settings
from models.encoder import Encoder
from service.app import create_app
from service.batching import Batcher
from service.engine import Engine, load_engine
from service.limits import Limits
from service.metrics import Metrics
from service.schemas import request_models
from service.vector_json import VectorJSONResponse, float32_rows

CALLERS = 16
BODY = json.dumps({"texts": ["A man is playing a guitar."]}).encode()


@dataclasses.dataclass
class FixedEncoder(Encoder):
    """The real encoder's attributes, answering every batch with the same unit vectors."""

    def encode_counted(
        self, texts: list[str], batch_size: int | None = None
    ) -> tuple[torch.Tensor, list[int]]:
        rows = torch.nn.functional.normalize(torch.ones(len(texts), self.dim), dim=1)
        return rows, [8] * len(texts)  # (n, dim)


def fixed_engine(settings: Settings) -> Engine:
    engine = load_engine(settings)
    real = engine.encoder
    values = {f.name: getattr(real, f.name) for f in dataclasses.fields(real) if f.init}
    return dataclasses.replace(engine, encoder=FixedEncoder(**values))


def bare_app(settings: Settings, engine: Engine) -> FastAPI:
    """One FastAPI route with the service's request model, batcher and body writer."""
    models = request_models(Limits.from_settings(settings))
    batcher = Batcher.from_settings(Metrics(), settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(lifespan=lifespan)

    @app.post("/encode")
    async def encode(body: models.encode) -> VectorJSONResponse:
        encoded = await batcher.encode(engine, body.texts)
        content = {
            "embeddings": float32_rows(encoded.embeddings),
            "dim": engine.dim,
            "model_version": engine.version,
            "truncated": encoded.truncated,
        }
        return VectorJSONResponse(content)

    return app


async def call(app: ASGIApp) -> int:
    """One POST /encode through `app`; its status."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/encode",
        "raw_path": b"/encode",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"bench"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    messages = [{"type": "http.request", "body": BODY, "more_body": False}]
    status = 0

    async def receive() -> Message:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # a disconnect never comes
        raise AssertionError

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def loop_ms_per_request(app: ASGIApp, requests: int) -> float:
    async def caller(count: int) -> None:
        for _ in range(count):
            if (status := await call(app)) != 200:
                raise RuntimeError(f"POST /encode answered {status}")

    start = time.thread_time()
    await asyncio.gather(*(caller(requests // CALLERS) for _ in range(CALLERS)))
    return (time.thread_time() - start) * 1000 / (requests // CALLERS * CALLERS)


async def measure(apps: dict[str, FastAPI], requests: int, rounds: int) -> dict[str, list[float]]:
    async with (
        apps["rankserve"].router.lifespan_context(apps["rankserve"]),
        apps["bare FastAPI"].router.lifespan_context(apps["bare FastAPI"]),
    ):
        await apps["rankserve"].state.services.holder.wait_ready()
        for app in apps.values():
            await loop_ms_per_request(app, requests // 4)  # warm: caches, first batches
        times: dict[str, list[float]] = {name: [] for name in apps}
        for _ in range(rounds):
            for name, app in apps.items():
                times[name].append(await loop_ms_per_request(app, requests))
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="per app and round")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    console = Console()
    console.print(f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="asgi-stack-") as var_dir:
        # Two anchors: the stack's cost does not depend on them, and they encode in no time.
        settings = Settings(
            var_dir=Path(var_dir), anchor_count=2, anchor_seed=None, demo_corpus=None
        )
        engine = fixed_engine(settings)
        apps = {
            # No components: the corpus and the swap listener are idle during /encode anyway.
            "rankserve": create_app(settings, loader=lambda _settings: engine, components=()),
            "bare FastAPI": bare_app(settings, engine),
        }
        times = uvloop.run(measure(apps, args.requests, args.rounds))
    console.print(f"load average at end: {os.getloadavg()}")
    table = Table(title=f"POST /encode in-process, {CALLERS} callers, {args.rounds} rounds")
    for column in ("app", "least ms per request", "median ms", "median vs bare"):
        table.add_column(column, justify="right")
    bare = statistics.median(times["bare FastAPI"])
    for name, values in times.items():
        median = statistics.median(values)
        table.add_row(name, f"{min(values):.4f}", f"{median:.4f}", f"{median / bare:.2f}x")
    console.print(table)


if __name__ == "__main__":
    main()
