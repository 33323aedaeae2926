"""Serving throughput: HTTP /encode under concurrent clients vs in-process batch-64 encoding.

One run measures, on the same machine and the same Wikipedia sentences:
  (a) the baseline: the same model encoding batches of 64 in this process, no HTTP;
  (a32), (a16), (a8) the same encoder in-process in smaller batches: N clients of one text
      each can never form batches larger than N (and form two cohorts of N / 2), so these
      are the most (b) could reach with HTTP costing nothing;
  (b16), (b64) `rankserve serve` (started here, real uvicorn on a free port) with 16 and 64
      concurrent clients, each sending one text per request;
  (c) 16 clients sending 8 texts per request.
They alternate in rounds (a a32 a16 a8 b16 b64 c a ...), so that a neighbour's load on a
shared machine weighs on all alike; totals over the rounds give sentences/s. It prints those,
request latency p50/p99, the ratio to (a) overall and per round (how far a busy neighbour
moved it), sentences per CPU-second of everything doing the work (for (b) and (c): server
plus clients, from /proc), which a neighbour's load does not distort, the mean batch the
dynamic batcher formed (from /metrics), and the clients' CPU per request: the clients run in
this process, on the same cores as the server, so their HTTP work is part of what is measured.

The clients are aiohttp's, not httpx's: on a 2-core AMD EPYC Zen 4 (load 1.3-1.9) httpx's
AsyncClient took 1.44 ms of CPU per one-text request with 16 connections and 10.0 ms with 64,
where the server then formed batches of 1.6 texts for want of requests, against aiohttp's 0.25
and 0.17 ms (batches of 8.0 and 31.4): httpx's pool measured itself more than the server.

    python -m bench.serving [--seconds 10] [--rounds 5] [--single-clients 16 64]
        [--clients 16] [--texts 8] [--small-batches 32 16 8]
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import redis
import torch
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from bench.timing import percentile
from core.loading import settings_encoder
from core.settings import DATA_DIR, get_settings
from models.anchors import read_sentences
from models.encoder import Encoder
from service.heap import freeze_heap

BASELINE_BATCH = 64
REDIS_PREFIX = "rankserve-bench"  # the server's document keys, deleted when it stops


@dataclass
class Tally:
    """One scenario's totals over every round."""

    label: str
    sentences: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    batched_texts: float = 0.0
    batches: float = 0.0
    client_cpu_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of everything doing the work: encoder, server, clients
    event_loop_cpu_s: float = 0.0  # the server's main thread's share of cpu_s
    round_rates: list[float] = field(default_factory=list)  # sentences/s in each round

    def add_round(self, sentences: int, seconds: float) -> None:
        self.sentences += sentences
        self.seconds += seconds
        self.round_rates.append(sentences / seconds)

    @property
    def per_second(self) -> float:
        return self.sentences / self.seconds

    @property
    def per_cpu_second(self) -> float:
        return self.sentences / self.cpu_s


@dataclass(frozen=True)
class Service:
    url: str
    pid: int


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time so far of a process, or of one of its threads, from /proc (Linux)."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_service(
    port: int, documents: list[str] | None = None, settings: dict[str, str] | None = None
) -> Iterator[Service]:
    """`rankserve serve` in a subprocess, ready, with `documents` indexed (none by default) and
    `settings` (RANKSERVE_* variables) on top of this process's; stopped with SIGINT afterwards."""
    scratch = tempfile.TemporaryDirectory()
    corpus = Path(scratch.name) / "documents.jsonl"
    # The demo-corpus setting indexes the file on the first start of an empty store.
    lines = (json.dumps({"id": f"doc-{i}", "text": text}) for i, text in enumerate(documents or []))
    corpus.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "RANKSERVE_API_KEY"}
    # Keys of its own, deleted when it stops.
    env.update(RANKSERVE_DEMO_CORPUS=str(corpus), RANKSERVE_REDIS_PREFIX=REDIS_PREFIX)
    env.update(settings or {})
    command = [sys.executable, "-m", "cli.main", "serve", "--port", str(port)]
    process = subprocess.Popen([*command, "--log-level", "warning"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # a first start encodes the anchors (~1 min)
        waiting_for = "no answer yet"
        with httpx.Client(base_url=url, timeout=5) as http:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"rankserve serve exited with {process.returncode}")
                try:
                    ready = http.get("/ready")
                    if ready.status_code == 200:
                        break
                    waiting_for = ready.json()["error"]["message"]
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"rankserve serve did not become ready: {waiting_for}")
                time.sleep(0.5)
        yield Service(url, process.pid)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        scratch.cleanup()
        store = redis.Redis.from_url(get_settings().redis_url)
        for key in store.scan_iter(match=f"{REDIS_PREFIX}:*"):
            store.delete(key)
        store.close()


def in_process(
    tally: Tally,
    worker: ThreadPoolExecutor,
    encoder: Encoder,
    sentences: list[str],
    size: int,
    seconds: float,
) -> None:
    """(a) Batches of `size` through the encoder on `worker`, one call each, for `seconds`."""
    batches = [sentences[i : i + size] for i in range(0, len(sentences) - size + 1, size)]
    done = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        batch = batches[len(tally.latencies) % len(batches)]
        began = time.perf_counter()
        worker.submit(encoder.encode, batch, size).result()
        tally.latencies.append(time.perf_counter() - began)
        done += len(batch)
    tally.add_round(done, time.perf_counter() - start)
    tally.cpu_s += time.process_time() - cpu_start


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
    tally: Tally,
    service: Service,
    sentences: list[str],
    clients: int,
    per_request: int,
    seconds: float,
) -> None:
    """`clients` concurrent loops of POST /encode, `per_request` texts each, for `seconds`."""
    bodies = [
        json.dumps({"texts": sentences[i : i + per_request]}).encode()
        for i in range(0, len(sentences) - per_request + 1, per_request)
    ]
    headers = {"content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(service.url, connector=connector, timeout=timeout) as http:
        done = 0

        async def client(offset: int, until: float, record: bool) -> None:
            nonlocal done
            sent = offset
            while time.perf_counter() < until:
                began = time.perf_counter()
                body = bodies[sent % len(bodies)]
                async with http.post("/encode", data=body, headers=headers) as response:
                    await response.read()
                    response.raise_for_status()
                if record:
                    tally.latencies.append(time.perf_counter() - began)
                    done += per_request
                sent += clients

        warm_until = time.perf_counter() + 1  # connections open, the server's queue full
        await asyncio.gather(*(client(i, warm_until, False) for i in range(clients)))
        start, cpu_start = time.perf_counter(), time.process_time()
        server_cpu_start = cpu_seconds(service.pid)
        # The event loop runs in the server's main thread, whose id is the process's.
        event_loop_cpu_start = cpu_seconds(service.pid, thread=service.pid)
        await asyncio.gather(*(client(i, start + seconds, True) for i in range(clients)))
        tally.event_loop_cpu_s += cpu_seconds(service.pid, thread=service.pid)
        tally.event_loop_cpu_s -= event_loop_cpu_start
        tally.add_round(done, time.perf_counter() - start)
        client_cpu = time.process_time() - cpu_start
        tally.client_cpu_s += client_cpu
        tally.cpu_s += client_cpu + cpu_seconds(service.pid) - server_cpu_start


def over_http(
    tally: Tally,
    service: Service,
    sentences: list[str],
    clients: int,
    per_request: int,
    seconds: float,
) -> None:
    texts_before, batches_before = batch_totals(service.url)
    asyncio.run(http_clients(tally, service, sentences, clients, per_request, seconds))
    texts_after, batches_after = batch_totals(service.url)
    tally.batched_texts += texts_after - texts_before
    tally.batches += batches_after - batches_before


def main() -> None:
    # A SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the server is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per scenario and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--single-clients",
        type=int,
        nargs="+",
        default=[16, 64],
        help="concurrent clients of one text per request, one scenario (b) per count",
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients in (c)")
    parser.add_argument("--texts", type=int, default=8, help="texts per request in (c)")
    parser.add_argument(
        "--small-batches",
        type=int,
        nargs="*",
        default=[32, 16, 8],
        help="in-process batch sizes timed beside (a): what one-text requests can form",
    )
    args = parser.parse_args()

    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")[:4096]
    settings = get_settings()
    # The server's encoder (backend, threads, max length from the settings) and threading: it
    # loads off the main thread and one worker thread runs every forward pass, so (a) differs
    # from (b) and (c) by HTTP and batching only, whichever RANKSERVE_ENCODER_BACKEND is set.
    worker = ThreadPoolExecutor(max_workers=1)
    with ThreadPoolExecutor(max_workers=1) as loader:
        encoder = loader.submit(settings_encoder, settings).result()
    worker.submit(encoder.encode, sentences[:BASELINE_BATCH]).result()  # warm-up
    baseline = Tally(f"(a) in-process, batch {BASELINE_BATCH}")
    small = {size: Tally(f"(a{size}) in-process, batch {size}") for size in args.small_batches}
    singles = {n: Tally(f"(b{n}) HTTP, {n} clients x 1 text") for n in args.single_clients}
    several = Tally(f"(c) HTTP, {args.clients} clients x {args.texts} texts")
    with running_service(free_port()) as service:
        info = httpx.get(f"{service.url}/info").json()
        # The clients run here, beside torch and the encoder: as in the server, a full
        # collection of what setup built would stall them for hundreds of ms.
        freeze_heap(thaw=False)
        scenarios: list[Callable[[], None]] = [
            lambda: in_process(baseline, worker, encoder, sentences, BASELINE_BATCH, args.seconds),
            *(
                lambda size=size, tally=tally: in_process(
                    tally, worker, encoder, sentences, size, args.seconds
                )
                for size, tally in small.items()
            ),
            *(
                lambda n=n, tally=tally: over_http(tally, service, sentences, n, 1, args.seconds)
                for n, tally in singles.items()
            ),
            lambda: over_http(several, service, sentences, args.clients, args.texts, args.seconds),
        ]
        for _ in range(args.rounds):
            for scenario in scenarios:
                scenario()
    worker.shutdown()

    limits = info["limits"]
    table = Table(
        title=f"{info['model_name']} on {info['device']}, {torch.get_num_threads()} torch threads,"
        f" {os.cpu_count()} CPUs, {args.rounds} rounds of {args.seconds:g} s; batching: wait"
        f" {limits['batch_wait_ms']} ms, at most {limits['max_batch_size']} texts /"
        f" {limits['max_batch_tokens']} padded tokens"
    )
    columns = (
        "scenario",
        "sentences/s",
        "p50 ms",
        "p99 ms",
        "vs (a)",
        "vs (a) per round",
        "per CPU-s",
        "vs (a) per CPU-s",
        "mean batch",
        "client ms",
    )
    for column in columns:
        table.add_column(column, justify="right")
    rows = [(tally, False) for tally in (baseline, *small.values())]
    rows += [(tally, True) for tally in (*singles.values(), several)]
    for tally, http in rows:
        table.add_row(
            tally.label,
            f"{tally.per_second:.1f}",
            f"{percentile(tally.latencies, 50) * 1e3:.1f}",
            f"{percentile(tally.latencies, 99) * 1e3:.1f}",
            f"{tally.per_second / baseline.per_second:.0%}",
            " ".join(
                f"{rate / base:.0%}"
                for rate, base in zip(tally.round_rates, baseline.round_rates, strict=True)
            ),
            f"{tally.per_cpu_second:.1f}",
            f"{tally.per_cpu_second / baseline.per_cpu_second:.0%}",
            f"{tally.batched_texts / tally.batches:.1f}" if http else "-",
            f"{tally.client_cpu_s / len(tally.latencies) * 1e3:.2f}" if http else "-",
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
