"""Helpers for the document and search tests: a private redis-server, corpus servers and Eq. 7
references."""

import csv
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
import torch

from core.settings import DATA_DIR
from models.anchors import AnchorSet
from models.ranking import blend
from service.engine import Engine
from tests.service.conftest import (
    AUTH,
    TEST_REDIS_PREFIX,
    Server,
    fixed_engine,
    make_settings,
    serve,
)


def fresh_prefix() -> str:
    """Redis keys of their own for servers that share them; deleted with the session's."""
    return f"{TEST_REDIS_PREFIX}-{uuid.uuid4().hex[:8]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class PrivateRedis:
    """`redis-server --appendonly yes` on a free port with its data in `directory`."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is required by this test"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--appendonly", "yes", "--save", "", "--daemonize", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 15
        while True:
            try:
                if client.ping():
                    break
            except redis.RedisError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, only what is already in the append-only file stays."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@contextmanager
def private_redis(directory: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def corpus_server(engine: Engine, var_dir: Path, **overrides: Any) -> Iterator[Server]:
    """A real uvicorn app on the session engine; waits until its corpus is loaded."""
    with serve(make_settings(var_dir, **overrides), loader=fixed_engine(engine)) as running:
        running.wait_ready(timeout=120)
        yield running


def api(server: Server) -> httpx.Client:
    return server.client(headers=AUTH)


def search_ids(client: httpx.Client, query: str, **body: Any) -> list[str]:
    response = client.post("/search", json={"query": query, **body})
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()["hits"]]


def sick_sentences(count: int) -> list[str]:
    """The first `count` distinct sentences of SICK trial, a real captions-like corpus."""
    with (DATA_DIR / "senteval" / "SICK" / "SICK_trial.txt").open(encoding="utf-8") as handle:
        rows = csv.DictReader(handle, delimiter="\t")
        texts = [text for row in rows for text in (row["sentence_A"], row["sentence_B"])]
    return list(dict.fromkeys(texts))[:count]


def eq7_reference(
    anchors: AnchorSet, docs: torch.Tensor, query: torch.Tensor, lambda_inf: float
) -> np.ndarray:
    """Eq. 7 of one query embedding (1, dim) against docs (n, dim), from the definitions."""
    rank = anchors.rank_vectors(docs) @ anchors.rank_vectors(query)[0]  # (n,)
    return blend(docs @ query[0], rank, lambda_inf).cpu().numpy()


def served_eq7(
    server: Server, anchors: AnchorSet, count: int, query: str, lambda_inf: float
) -> np.ndarray:
    """Eq. 7 of `query` against documents s00, s01, ... from the definitions, on the vectors the
    server's search scored: the ones its index holds, and its own /encode of the query alone
    (float32 read back exactly). An encoder's float sums depend on the batch a text went in
    (these SICK sentences 1.8e-7 apart, all 60 in one batch or one at a time, on a Zen 5), and at
    M = 512 that swaps anchor ranks enough to move Eq. 7 scores by up to 5.6e-5 (int8 anchors;
    8.6e-6 float32), so a reference held to 1e-5 cannot encode the texts itself."""
    with api(server) as client:
        response = client.post("/encode", json={"texts": [query]})
    assert response.status_code == 200, response.text
    encoded = torch.tensor(response.json()["embeddings"], dtype=torch.float32)  # (1, dim)
    state = server.app.state.corpus.state
    numbers = {doc_id: number for number, doc_id in state.ids.items()}
    held = state.index.embeddings([numbers[f"s{i:02d}"] for i in range(count)])  # (count, dim)
    return eq7_reference(anchors, torch.from_numpy(held), encoded, lambda_inf)
