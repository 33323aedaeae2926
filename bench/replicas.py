"""One setting, two replicas: one-text /encode clients against two `rankserve serve` replicas
that differ in one RANKSERVE_* setting, by default the heap frozen out of the garbage
collector's sight (RANKSERVE_FREEZE_HEAP=true, service/heap.py) against not.

Both servers run throughout (real uvicorn, free ports, started here with this process's
RANKSERVE_* settings, RANKSERVE_ENCODER_BACKEND included, and the setting compared on top). For
each load the rounds alternate between them (the first value first, then the other
first), so that a neighbour's load weighs on both alike. Prints, per server: requests/s; the
first's ratio to the second, per round and their median; the mean batch its batcher formed
(from /metrics); the event loop's CPU per request (the server's main thread, from /proc);
latency p50, p99, p99.9 and the slowest request. The loads: N clients that each send one text
and wait for its answer before the next (`--clients`), and one-text requests arriving at random
at R per second, each sent whatever is still unanswered (`--rates`, none by default), as
independent users send them. The clients are bench/served.py's (aiohttp, in this process, whose
heap is frozen too).

    python -m bench.replicas [--setting RANKSERVE_FREEZE_HEAP true false] [--clients 16 64]
        [--rates R...] [--rounds 6] [--seconds 10]
    python -m bench.replicas --setting RANKSERVE_BATCH_REJOIN_MS 10 0 --clients 16 --rates 100
"""

import argparse
import asyncio
import signal
import statistics
import sys
from collections.abc import Callable, Coroutine
from contextlib import ExitStack

from bench.served import Service, Tally, arrivals, free_port, http_clients, running_service
from bench.timing import load_average, percentile, say
from core.settings import DATA_DIR
from models.anchors import read_sentences

Load = Callable[[Tally, Service], Coroutine[None, None, None]]  # one round of requests


def main() -> None:
    # A SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the servers are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--setting",
        nargs=3,
        metavar=("NAME", "FIRST", "SECOND"),
        default=["RANKSERVE_FREEZE_HEAP", "true", "false"],
        help="the setting the two replicas differ in, and its two values",
    )
    parser.add_argument("--clients", type=int, nargs="*", default=[16, 64])
    parser.add_argument("--rates", type=float, nargs="*", default=[], help="arrivals per second")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per server and load")
    parser.add_argument("--seconds", type=float, default=10.0, help="per round")
    args = parser.parse_args()
    name, *values = args.setting
    if not name.startswith("RANKSERVE_") or values[0] == values[1]:
        parser.error("--setting takes a RANKSERVE_* name and two different values")

    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")[:4096]
    say(f"load average at start {load_average()}")
    with ExitStack() as stack:
        services = {
            f"{name}={value}": stack.enter_context(
                running_service(free_port(), settings={name: value})
            )
            for value in values
        }
        say(f"one-text /encode requests, {args.rounds} rounds of {args.seconds:g} s per server")
        say(
            "| load | server | requests/s | first ÷ second per round (median) | mean batch |"
            " event loop ms per request | p50 ms | p99 ms | p99.9 ms | slowest ms |"
        )
        say("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        loads: dict[str, Load] = {
            **{
                f"{clients} clients": lambda tally, service, clients=clients: http_clients(
                    tally, service, sentences, clients, 1, args.seconds
                )
                for clients in args.clients
            },
            **{
                f"{rate:g}/s arriving": lambda tally, service, rate=rate: arrivals(
                    tally, service, sentences, rate, args.seconds
                )
                for rate in args.rates
            },
        }
        for load, requests in loads.items():
            tallies = {label: Tally(label) for label in services}
            for round_ in range(args.rounds):
                order = list(services) if round_ % 2 == 0 else list(services)[::-1]
                for label in order:
                    asyncio.run(requests(tallies[label], services[label]))
            first, second = (tally.round_rates for tally in tallies.values())
            ratios = [a / b for a, b in zip(first, second, strict=True)]
            for index, (label, tally) in enumerate(tallies.items()):
                ms = [seconds * 1e3 for seconds in tally.latencies]
                ratio = " ".join(f"{r:.2f}" for r in ratios)
                say(
                    f"| {load} | {label} | {tally.per_second:.1f} | "
                    + (f"{ratio} ({statistics.median(ratios):.3f}x)" if index == 0 else "-")
                    + f" | {tally.batched_texts / tally.batches:.1f}"
                    + f" | {tally.event_loop_cpu_s / len(ms) * 1e3:.3f} | "
                    + " | ".join(f"{percentile(ms, q):.1f}" for q in (50, 99, 99.9))
                    + f" | {max(ms):.1f} |"
                )
            say(f"load average after {load} {load_average()}")


if __name__ == "__main__":
    main()
