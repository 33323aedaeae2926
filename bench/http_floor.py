"""One text per HTTP request through rankserve against bare fronts over the same encoder: what
the event loop costs per request below the service's own layers.

One run measures, on the same machine, encoder and Wikipedia sentences:
  (a) the baseline: in-process batches of 64, as in bench.serving;
  (aN) in-process batches of N, the most N one-text clients can form;
  (service) `rankserve serve` (bench/served.py) with N concurrent one-text clients (16);
  (fastapi) a bare FastAPI route over the same encoder and batching (bench/floor_apps.py), the
      same clients;
  (asgi) a bare ASGI callable, no framework, the same again.
The fronts run under uvicorn with uvloop and httptools, as the service does. They alternate in
rounds, so that a neighbour's load weighs on all alike. It prints sentences/s and their ratio
to (a), the batches formed, the event loop's CPU per request (the server's main thread, from
/proc) and its ratio to the service's, the clients' CPU per request and the cores kept busy.
The service's loop minus the bare front's is what its layers cost (middlewares, dependencies,
limits, metrics); the bare ASGI front's loop is what uvicorn, uvloop and the sockets cost.

    python -m bench.http_floor [--seconds 10] [--rounds 5] [--clients 16]
"""

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
from rich.console import Console
from rich.table import Table

from bench.served import (
    Service,
    Tally,
    free_port,
    http_clients,
    running_service,
    stop_server,
)
from bench.serving import BASELINE_BATCH, in_process, served_encoder
from core.settings import DATA_DIR, get_settings
from models.anchors import read_sentences

FRONTS = ("fastapi", "asgi")  # bench/floor_apps.py's bare_fastapi and bare_asgi


@contextmanager
def running_front(name: str) -> Iterator[Service]:
    """bench/floor_apps.py's bare_`name` under uvicorn on a free port, stopped afterwards."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", f"bench.floor_apps:bare_{name}", "--port"]
    options = ["--loop", "uvloop", "--http", "httptools", "--log-level", "warning"]
    process = subprocess.Popen([*command, str(port), *options])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # an exported backend may quantise at load
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the bare {name} front exited with {process.returncode}")
            try:
                if httpx.get(f"{url}/metrics", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the bare {name} front did not start")
            time.sleep(0.5)
        yield Service(url, process.pid)
    finally:
        stop_server(process)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per scenario and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=16, help="concurrent one-text clients")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs", flush=True)

    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")[:4096]
    settings = get_settings()
    worker, encoder = served_encoder(sentences)
    baseline = Tally(f"(a) in-process, batch {BASELINE_BATCH}")
    cohort = Tally(f"(a{args.clients}) in-process, batch {args.clients}")
    served = {
        name: Tally(f"({name}) HTTP, {args.clients} clients x 1 text")
        for name in ("service", *FRONTS)
    }
    with ExitStack() as stack:
        fronts = {"service": stack.enter_context(running_service(free_port()))}
        fronts |= {name: stack.enter_context(running_front(name)) for name in FRONTS}
        for _ in range(args.rounds):
            in_process(baseline, worker, encoder, sentences, BASELINE_BATCH, args.seconds)
            in_process(cohort, worker, encoder, sentences, args.clients, args.seconds)
            for name, front in fronts.items():
                asyncio.run(
                    http_clients(served[name], front, sentences, args.clients, 1, args.seconds)
                )
    worker.shutdown()
    print(f"load average at end: {os.getloadavg()}", flush=True)

    table = Table(
        title=f"{settings.encoder_backend} encoder, {os.cpu_count()} CPUs, {args.rounds} rounds"
        f" of {args.seconds:g} s; rejoin wait {settings.batch_rejoin_ms} ms"
    )
    columns = (
        "scenario",
        "sentences/s",
        "vs (a)",
        "mean batch",
        "loop ms",
        "loop vs service",
        "client ms",
        "cores busy",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for tally in (baseline, cohort):
        table.add_row(
            tally.label,
            f"{tally.per_second:.1f}",
            f"{tally.per_second / baseline.per_second:.0%}",
            *("-",) * 4,
            f"{tally.cpu_s / tally.seconds:.2f}",
        )

    def loop_ms(tally: Tally) -> float:
        return tally.event_loop_cpu_s / len(tally.latencies) * 1e3

    for tally in served.values():
        table.add_row(
            tally.label,
            f"{tally.per_second:.1f}",
            f"{tally.per_second / baseline.per_second:.0%}",
            f"{tally.batched_texts / tally.batches:.1f}",
            f"{loop_ms(tally):.3f}",
            f"{loop_ms(tally) / loop_ms(served['service']):.2f}x",
            f"{tally.client_cpu_s / len(tally.latencies) * 1e3:.3f}",
            f"{tally.cpu_s / tally.seconds:.2f}",
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
