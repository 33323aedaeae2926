"""A benchmark's own `rankserve serve` and its HTTP clients: bench.serving, bench.replicas
and bench.http_search measure through these.

The server is a subprocess on a free port, with Redis keys of its own, deleted when it stops.
The clients are aiohttp's, in the benchmark's process: on a 2-core AMD EPYC Zen 4 (load
1.3-1.9) httpx's AsyncClient took 1.44 ms of CPU per one-text request with 16 connections and
10.0 ms with 64, where the server then formed batches of 1.6 texts for want of requests,
against aiohttp's 0.25 and 0.17 ms (batches of 8.0 and 31.4): httpx's pool measured itself more
than the server.
"""

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families

from core.settings import get_settings
from service.heap import freeze_heap

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


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as an operator stops a server, so that it cleans up; killed after a minute."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()


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
    `settings` (RANKSERVE_* variables) on top of this process's; stopped with SIGINT afterwards.
    This process's heap is frozen once the server is ready."""
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
        # The clients run in this process, beside whatever the benchmark imported (torch, an
        # encoder): as in the server, a full collection of that would stall them for hundreds
        # of ms (service/heap.py).
        freeze_heap(thaw=False)
        yield Service(url, process.pid)
    finally:
        stop_server(process)
        scratch.cleanup()
        store = redis.Redis.from_url(get_settings().redis_url)
        for key in store.scan_iter(match=f"{REDIS_PREFIX}:*"):
            store.delete(key)
        store.close()


def _bodies(sentences: list[str], per_request: int) -> list[bytes]:
    return [
        json.dumps({"texts": sentences[i : i + per_request]}).encode()
        for i in range(0, len(sentences) - per_request + 1, per_request)
    ]


_HEADERS = {"content-type": "application/json"}


async def _measured_round(
    tally: Tally,
    service: Service,
    http: aiohttp.ClientSession,
    per_request: int,
    requests: Callable[[], Awaitable[None]],
) -> None:
    """Start `requests` and await them; they append their latencies to `tally`, and this adds
    the round's sentences, CPU times and the batches the server formed to it."""
    texts_before, batches_before = await batch_totals(http)
    answered_before = len(tally.latencies)
    start, cpu_start = time.perf_counter(), time.process_time()
    server_cpu_start = cpu_seconds(service.pid)
    # The event loop runs in the server's main thread, whose id is the process's.
    event_loop_cpu_start = cpu_seconds(service.pid, thread=service.pid)
    await requests()
    tally.event_loop_cpu_s += cpu_seconds(service.pid, thread=service.pid)
    tally.event_loop_cpu_s -= event_loop_cpu_start
    answered = len(tally.latencies) - answered_before
    tally.add_round(answered * per_request, time.perf_counter() - start)
    client_cpu = time.process_time() - cpu_start
    tally.client_cpu_s += client_cpu
    tally.cpu_s += client_cpu + cpu_seconds(service.pid) - server_cpu_start
    texts_after, batches_after = await batch_totals(http)
    tally.batched_texts += texts_after - texts_before
    tally.batches += batches_after - batches_before


async def http_clients(
    tally: Tally,
    service: Service,
    sentences: list[str],
    clients: int,
    per_request: int,
    seconds: float,
) -> None:
    """`clients` concurrent loops of POST /encode, `per_request` texts each, for `seconds`;
    the round's sentences, latencies, CPU times and the batches the server formed go to `tally`."""
    bodies = _bodies(sentences, per_request)
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(service.url, connector=connector, timeout=timeout) as http:

        async def client(offset: int, until: float, record: bool) -> None:
            sent = offset
            while time.perf_counter() < until:
                began = time.perf_counter()
                body = bodies[sent % len(bodies)]
                async with http.post("/encode", data=body, headers=_HEADERS) as response:
                    await response.read()
                    response.raise_for_status()
                if record:
                    tally.latencies.append(time.perf_counter() - began)
                sent += clients

        warm_until = time.perf_counter() + 1  # connections open, the server's queue full
        await asyncio.gather(*(client(i, warm_until, False) for i in range(clients)))

        def requests() -> Awaitable[None]:
            until = time.perf_counter() + seconds
            return asyncio.gather(*(client(i, until, True) for i in range(clients)))

        await _measured_round(tally, service, http, per_request, requests)


async def arrivals(
    tally: Tally, service: Service, sentences: list[str], rate: float, seconds: float
) -> None:
    """One-text POST /encode requests arriving at random (a Poisson process of `rate` per
    second) for `seconds`, each sent when it arrives whatever is still unanswered: independent
    users rather than clients that wait for their answers. Goes to `tally` as in http_clients;
    the round lasts until the last arrival is answered."""
    bodies = _bodies(sentences, 1)
    arrival_times = random.Random(0)
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(service.url, connector=connector, timeout=timeout) as http:

        async def request(body: bytes) -> None:
            began = time.perf_counter()
            async with http.post("/encode", data=body, headers=_HEADERS) as response:
                await response.read()
                response.raise_for_status()
            tally.latencies.append(time.perf_counter() - began)

        async def arrive() -> None:
            sent: list[asyncio.Task[None]] = []
            due = time.perf_counter()
            until = due + seconds
            while due < until:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                sent.append(asyncio.create_task(request(bodies[len(sent) % len(bodies)])))
                due += arrival_times.expovariate(rate)
            await asyncio.gather(*sent)

        await _measured_round(tally, service, http, 1, arrive)


async def batch_totals(http: aiohttp.ClientSession) -> tuple[float, float]:
    """(texts, batches) the server's batcher has formed so far, from its /metrics."""
    async with http.get("/metrics") as response:
        text = await response.text()
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return values["rankserve_batch_size_sum"], values["rankserve_batch_size_count"]
