"""Serving throughput: HTTP /encode under concurrent clients vs in-process batch-64 encoding.

One run measures, on the same machine and the same Wikipedia sentences:
  (a) the baseline: the same model encoding batches of 64 in this process, no HTTP;
  (a32), (a16), (a8) the same encoder in-process in smaller batches: N clients of one text
      each can never form batches larger than N (N / 2 where they do not come back within the
      batcher's rejoin wait, RANKSERVE_BATCH_REJOIN_MS), so these are the most (b) could reach
      with HTTP costing nothing;
  (b16), (b64) `rankserve serve` (started here, real uvicorn on a free port) with 16 and 64
      concurrent clients, each sending one text per request;
  (c) 16 clients sending 8 texts per request.
They alternate in rounds (a a32 a16 a8 b16 b64 c a ...), so that a neighbour's load on a
shared machine weighs on all alike; totals over the rounds give sentences/s. It prints those,
request latency p50/p99, the ratio to (a) overall and per round (how far a busy neighbour
moved it), sentences per CPU-second of everything doing the work (for (b) and (c): server
plus clients, from /proc), which a neighbour's load does not distort, the mean batch the
dynamic batcher formed (from /metrics), the clients' CPU per request (the clients run in
this process, on the same cores as the server, so their HTTP work is part of what is measured),
the server's event loop's CPU per request (its main thread: parsing, routing, validation,
serialisation), and how many cores the scenario kept busy (CPU seconds per second). With
those, one text per request decomposes: the encoder's CPU per text at the batch it formed,
plus the loop's and the clients' per request, against (a)'s per text; fewer cores busy than
in (a) is time the encoder waited for requests.

The clients are aiohttp's, not httpx's (bench/served.py says why).

    python -m bench.serving [--seconds 10] [--rounds 5] [--single-clients 16 64]
        [--clients 16] [--texts 8] [--small-batches 32 16 8]
"""

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import torch
from rich.console import Console
from rich.table import Table

from bench.served import Tally, free_port, http_clients, running_service
from bench.timing import percentile
from core.loading import settings_encoder
from core.settings import DATA_DIR, get_settings
from core.threads import run_in_own_thread
from models.anchors import read_sentences
from models.encoder import Encoder

BASELINE_BATCH = 64


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


def served_encoder(sentences: list[str]) -> tuple[ThreadPoolExecutor, Encoder]:
    """The server's encoder (backend, threads, max length from the settings) and threading,
    warmed up on `sentences`: it loads in a thread that ends and one worker thread runs every
    forward pass, so in-process figures differ from HTTP ones by HTTP and batching only,
    whichever RANKSERVE_ENCODER_BACKEND is set."""
    worker = ThreadPoolExecutor(max_workers=1)
    encoder = run_in_own_thread(settings_encoder, get_settings())
    worker.submit(encoder.encode, sentences[:BASELINE_BATCH]).result()
    return worker, encoder


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
    worker, encoder = served_encoder(sentences)
    baseline = Tally(f"(a) in-process, batch {BASELINE_BATCH}")
    small = {size: Tally(f"(a{size}) in-process, batch {size}") for size in args.small_batches}
    singles = {n: Tally(f"(b{n}) HTTP, {n} clients x 1 text") for n in args.single_clients}
    several = Tally(f"(c) HTTP, {args.clients} clients x {args.texts} texts")
    with running_service(free_port()) as service:
        info = httpx.get(f"{service.url}/info").json()
        scenarios: list[Callable[[], None]] = [
            lambda: in_process(baseline, worker, encoder, sentences, BASELINE_BATCH, args.seconds),
            *(
                lambda size=size, tally=tally: in_process(
                    tally, worker, encoder, sentences, size, args.seconds
                )
                for size, tally in small.items()
            ),
            *(
                lambda n=n, tally=tally: asyncio.run(
                    http_clients(tally, service, sentences, n, 1, args.seconds)
                )
                for n, tally in singles.items()
            ),
            lambda: asyncio.run(
                http_clients(several, service, sentences, args.clients, args.texts, args.seconds)
            ),
        ]
        for _ in range(args.rounds):
            for scenario in scenarios:
                scenario()
    worker.shutdown()

    limits = info["limits"]
    table = Table(
        title=f"{info['model_name']} on {info['device']}, {torch.get_num_threads()} torch threads,"
        f" {os.cpu_count()} CPUs, {args.rounds} rounds of {args.seconds:g} s; batching: wait"
        f" {limits['batch_wait_ms']} ms, rejoin {limits['batch_rejoin_ms']} ms, at most"
        f" {limits['max_batch_size']} texts / {limits['max_batch_tokens']} tokens"
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
        "loop ms",
        "cores busy",
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
            f"{tally.event_loop_cpu_s / len(tally.latencies) * 1e3:.2f}" if http else "-",
            f"{tally.cpu_s / tally.seconds:.2f}",
        )
    Console(width=190).print(table)


if __name__ == "__main__":
    main()
