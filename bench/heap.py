"""The garbage collector against the event loop: one-text /encode clients against two replicas,
one with its heap frozen out of the collector's sight (the default, service/heap.py) and one
with RANKSERVE_FREEZE_HEAP=false.

Both servers run throughout (`rankserve serve`, real uvicorn, free ports, started here with
this process's RANKSERVE_* settings, RANKSERVE_ENCODER_BACKEND included). For each client count
the rounds alternate between them (frozen first, then the other first), so that a neighbour's
load weighs on both alike. Prints, per server: requests/s; the frozen one's ratio to the other,
per round and their median; the event loop's CPU per request (the server's main thread, from
/proc); latency p50, p99, p99.9 and the slowest request. The clients are bench/served.py's
(aiohttp, in this process, whose heap is frozen too).

    python -m bench.heap [--clients 16 64] [--rounds 6] [--seconds 10]
"""

import argparse
import asyncio
import signal
import statistics
import sys
from contextlib import ExitStack

from bench.served import Tally, free_port, http_clients, running_service
from bench.timing import load_average, percentile, say
from core.settings import DATA_DIR
from models.anchors import read_sentences

SERVERS = {"frozen": "true", "not frozen": "false"}  # label: RANKSERVE_FREEZE_HEAP


def main() -> None:
    # A SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the servers are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per server and count")
    parser.add_argument("--seconds", type=float, default=10.0, help="per round")
    args = parser.parse_args()

    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")[:4096]
    say(f"load average at start {load_average()}")
    with ExitStack() as stack:
        services = {
            label: stack.enter_context(
                running_service(free_port(), settings={"RANKSERVE_FREEZE_HEAP": value})
            )
            for label, value in SERVERS.items()
        }
        say(f"one-text /encode clients, {args.rounds} rounds of {args.seconds:g} s per server")
        say(
            "| clients | server | requests/s | frozen ÷ not per round (median) | event loop ms"
            " per request | p50 ms | p99 ms | p99.9 ms | slowest ms |"
        )
        say("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for clients in args.clients:
            tallies = {label: Tally(label) for label in services}
            for round_ in range(args.rounds):
                order = list(services) if round_ % 2 == 0 else list(services)[::-1]
                for label in order:
                    tally, service = tallies[label], services[label]
                    asyncio.run(http_clients(tally, service, sentences, clients, 1, args.seconds))
            frozen, other = (tally.round_rates for tally in tallies.values())
            ratios = [a / b for a, b in zip(frozen, other, strict=True)]
            for label, tally in tallies.items():
                ms = [seconds * 1e3 for seconds in tally.latencies]
                ratio = " ".join(f"{r:.2f}" for r in ratios)
                say(
                    f"| {clients} | {label} | {tally.per_second:.1f} | "
                    + (f"{ratio} ({statistics.median(ratios):.3f}x)" if label == "frozen" else "-")
                    + f" | {tally.event_loop_cpu_s / len(ms) * 1e3:.3f} | "
                    + " | ".join(f"{percentile(ms, q):.1f}" for q in (50, 99, 99.9))
                    + f" | {max(ms):.1f} |"
                )
            say(f"load average after {clients} clients {load_average()}")


if __name__ == "__main__":
    main()
