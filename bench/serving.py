"""Serving throughput: HTTP /encode under concurrent clients vs in-process batch-64 encoding.

One run measures, on the same machine and the same Wikipedia sentences:
  (a) the baseline: the same model encoding batches of 64 in this process, no HTTP;
  (b) `rankserve serve` (started here, real uvicorn on a free port) with 16 concurrent
      clients, each sending one text per request;
  (c) the same 16 clients sending 8 texts per request.
It prints sentences/s, request latency p50/p99, the ratio to (a), and the mean batch the
dynamic batcher formed (from /metrics). The clients run in this process, on the same cores
as the server: their HTTP work is part of what is measured.

    python -m bench.serving [--seconds 15] [--clients 16]
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import torch
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from bench.timing import percentile
from models.anchors import read_sentences
from models.encoder import load_encoder
from service.settings import DATA_DIR, get_settings

BASELINE_BATCH = 64


@dataclass(frozen=True)
class Result:
    label: str
    sentences_per_s: float
    p50_ms: float
    p99_ms: float
    mean_batch: float | None = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_service(port: int) -> Iterator[str]:
    """`rankserve serve` in a subprocess, ready; stopped with SIGINT afterwards."""
    scratch = tempfile.TemporaryDirectory()
    no_documents = Path(scratch.name) / "empty.jsonl"
    no_documents.touch()
    env = {key: value for key, value in os.environ.items() if key != "RANKSERVE_API_KEY"}
    # No demo documents to index and keys of its own: nothing but /encode runs in the server.
    env.update(RANKSERVE_DEMO_CORPUS=str(no_documents), RANKSERVE_REDIS_PREFIX="rankserve-bench")
    command = [sys.executable, "-m", "cli.main", "serve", "--port", str(port)]
    process = subprocess.Popen([*command, "--log-level", "warning"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900  # a first start encodes the anchors (~1 min)
        with httpx.Client(base_url=url, timeout=5) as http:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"rankserve serve exited with {process.returncode}")
                try:
                    if http.get("/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("rankserve serve did not become ready")
                time.sleep(0.5)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
        scratch.cleanup()


def in_process(sentences: list[str], seconds: float) -> Result:
    """(a) Batches of 64 through the encoder, one call per batch, as long as `seconds`."""
    settings = get_settings()
    encoder = load_encoder(settings.model_path, device=settings.device)
    batches = [
        sentences[i : i + BASELINE_BATCH]
        for i in range(0, len(sentences) - BASELINE_BATCH + 1, BASELINE_BATCH)
    ]
    encoder.encode(batches[0])  # warm-up
    latencies: list[float] = []
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = batches[len(latencies) % len(batches)]
        began = time.perf_counter()
        encoder.encode(batch, batch_size=BASELINE_BATCH)
        latencies.append(time.perf_counter() - began)
        done += len(batch)
    elapsed = time.perf_counter() - start
    return Result(
        f"(a) in-process, batch {BASELINE_BATCH}",
        done / elapsed,
        percentile(latencies, 50) * 1e3,
        percentile(latencies, 99) * 1e3,
    )


def batch_totals(url: str) -> tuple[float, float]:
    """(texts, batches) the server's batcher has formed so far."""
    text = httpx.get(f"{url}/metrics").text
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return values["rankserve_batch_size_sum"], values["rankserve_batch_size_count"]


async def http_clients(
    url: str, sentences: list[str], clients: int, per_request: int, seconds: float
) -> tuple[int, list[float], float]:
    """`clients` loops of POST /encode for `seconds`: (sentences done, latencies, elapsed)."""
    bodies = [
        json.dumps({"texts": sentences[i : i + per_request]}).encode()
        for i in range(0, len(sentences) - per_request + 1, per_request)
    ]
    latencies: list[float] = []
    done = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as http:

        async def client(offset: int, until: float) -> None:
            nonlocal done
            sent = offset
            while time.perf_counter() < until:
                body = bodies[sent % len(bodies)]
                began = time.perf_counter()
                response = await http.post(
                    "/encode", content=body, headers={"content-type": "application/json"}
                )
                response.raise_for_status()
                latencies.append(time.perf_counter() - began)
                done += per_request
                sent += clients

        warm_until = time.perf_counter() + 2
        await asyncio.gather(*(client(i, warm_until) for i in range(clients)))
        latencies.clear()
        done = 0
        start = time.perf_counter()
        await asyncio.gather(*(client(i, start + seconds) for i in range(clients)))
        elapsed = time.perf_counter() - start
    return done, latencies, elapsed


def over_http(
    url: str, label: str, sentences: list[str], clients: int, per_request: int, seconds: float
) -> Result:
    texts_before, batches_before = batch_totals(url)
    done, latencies, elapsed = asyncio.run(
        http_clients(url, sentences, clients, per_request, seconds)
    )
    texts_after, batches_after = batch_totals(url)
    return Result(
        label,
        done / elapsed,
        percentile(latencies, 50) * 1e3,
        percentile(latencies, 99) * 1e3,
        (texts_after - texts_before) / max(1.0, batches_after - batches_before),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="per measurement")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--texts", type=int, default=8, help="texts per request in (c)")
    args = parser.parse_args()

    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")[:4096]
    console = Console()
    with running_service(free_port()) as url:
        info = httpx.get(f"{url}/info").json()
        results = [in_process(sentences, args.seconds)]
        results.append(
            over_http(url, f"(b) HTTP, {args.clients} clients x 1 text", sentences,
                      args.clients, 1, args.seconds)
        )  # fmt: skip
        results.append(
            over_http(url, f"(c) HTTP, {args.clients} clients x {args.texts} texts", sentences,
                      args.clients, args.texts, args.seconds)
        )  # fmt: skip
    baseline = results[0].sentences_per_s
    limits = info["limits"]
    table = Table(
        title=f"{info['model_name']} on {info['device']}, {torch.get_num_threads()} torch threads,"
        f" {os.cpu_count()} CPUs; batching: wait {limits['batch_wait_ms']} ms, at most"
        f" {limits['max_batch_size']} texts / {limits['max_batch_tokens']} padded tokens"
    )
    for column in ("scenario", "sentences/s", "p50 ms", "p99 ms", "vs (a)", "mean batch"):
        table.add_column(column, justify="right")
    for result in results:
        table.add_row(
            result.label,
            f"{result.sentences_per_s:.1f}",
            f"{result.p50_ms:.1f}",
            f"{result.p99_ms:.1f}",
            f"{result.sentences_per_s / baseline:.0%}",
            "-" if result.mean_batch is None else f"{result.mean_batch:.1f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
