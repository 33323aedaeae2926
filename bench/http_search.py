"""HTTP /search with Eq. 7 against HTTP /encode of the same query, idle and under encode load.

One run against a real `rankserve serve` (started here on a free port, its own Redis keys),
which indexes the Wikipedia sentences past the default anchors (1,915 documents, none of them
an anchor). For each query, in turn so that a change of machine load hits them alike:
  - POST /encode of the query alone: the baseline;
  - POST /search, top_k 10, Eq. 7 at the default lambda (0.1): encode + faiss + rescoring +
    reading the hits back from Redis;
  - POST /search with lambda 0 (cosine order; the score bound then stops rescoring after
    top_k, models/rescoring.py).
The server's own Server-Timing header gives each search's `index` time: faiss and Eq. 7 on
the rescoring threads, queueing excluded. Then the same searches while `--load-clients`
threads keep POST /encode of 8 texts busy (the encoder's queue full), to show whether the
rescoring waits behind encoder batches. Prints the load average with each table.

    python -m bench.http_search [--queries 200] [--load-clients 4]
"""

import argparse
import itertools
import os
import signal
import sys
import threading
from collections.abc import Callable

import httpx

from bench.served import free_port, running_service
from bench.timing import interleaved_ms, load_average, percentile, say
from core.settings import DATA_DIR
from models.anchors import read_sentences

ANCHORS = 10_000  # the default anchor corpus is the first 10,000 lines of this file
LOAD_TEXTS = 8


def index_ms(response: httpx.Response) -> float:
    """The `index` duration of a /search response's Server-Timing header."""
    for part in response.headers["server-timing"].split(","):
        name, _, duration = part.strip().partition(";dur=")
        if name == "index":
            return float(duration)
    raise ValueError("no index entry in Server-Timing")


def measure(http: httpx.Client, queries: list[str], label: str) -> dict[str, list[float]]:
    """Client milliseconds of each path, and the server's index milliseconds of each search."""
    index: dict[str, list[float]] = {"Eq. 7": [], "lambda 0": []}
    rounds = itertools.cycle(queries)
    current = [queries[0]]  # the round's query: /encode, called first in a round, moves it on

    def encode() -> None:
        current[0] = next(rounds)
        http.post("/encode", json={"texts": current}).raise_for_status()

    def search(name: str, lambda_inf: float | None) -> Callable[[], None]:
        body: dict[str, object] = {"query": "", "top_k": 10}
        if lambda_inf is not None:
            body["lambda"] = lambda_inf

        def call() -> None:
            response = http.post("/search", json=body | {"query": current[0]})
            response.raise_for_status()
            index[name].append(index_ms(response))

        return call

    paths = {"/encode": encode, "/search Eq. 7": search("Eq. 7", None)}
    paths["/search lambda 0"] = search("lambda 0", 0.0)
    samples = interleaved_ms(paths, repeat=len(queries), warmup=3)
    for name in index:
        del index[name][: -len(queries)]  # the warm-up calls
    say(f"{label}: load average {load_average()}")
    return samples | {f"index {name}": values for name, values in index.items()}


def encode_load(url: str, texts: list[str], stop: threading.Event) -> None:
    """POST /encode of LOAD_TEXTS texts in a loop until `stop`."""
    with httpx.Client(base_url=url, timeout=60) as http:
        sent = 0
        while not stop.is_set():
            start = (sent * LOAD_TEXTS) % (len(texts) - LOAD_TEXTS)
            http.post("/encode", json={"texts": texts[start : start + LOAD_TEXTS]})
            sent += 1


def report(idle: dict[str, list[float]], loaded: dict[str, list[float]], clients: int) -> None:
    say("| path | idle p50 ms | idle p99 ms | idle / encode p50 | loaded p50 ms | loaded / idle |")
    say("| --- | --- | --- | --- | --- | --- |")
    encode_p50 = percentile(idle["/encode"], 50)
    for name, values in idle.items():
        p50 = percentile(values, 50)
        ratio = f"{p50 / encode_p50:.2f}x" if not name.startswith("index") else ""
        loaded_p50 = percentile(loaded[name], 50)
        say(
            f"| {name} | {p50:.2f} | {percentile(values, 99):.2f} | {ratio} |"
            f" {loaded_p50:.2f} | {loaded_p50 / p50:.2f}x |"
        )
    say(
        f"`index` = the server's Server-Timing: faiss + Eq. 7 rescoring per search; loaded ="
        f" {clients} threads of POST /encode ({LOAD_TEXTS} texts each) running throughout"
    )


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--load-clients", type=int, default=4)
    args = parser.parse_args()

    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")
    documents, queries = sentences[ANCHORS:], sentences[: args.queries]
    say(f"load average at start {load_average()}, {os.cpu_count()} CPUs")
    with (
        running_service(free_port(), documents) as service,
        httpx.Client(base_url=service.url, timeout=60) as http,
    ):
        info = http.get("/info").json()
        say(
            f"{info['model_name']} ({info['encoder_backend']}), {len(documents)} documents, "
            f"{info['device']}"
        )
        idle = measure(http, queries, "idle")
        stop = threading.Event()
        loaders = [
            threading.Thread(target=encode_load, args=(service.url, sentences, stop))
            for _ in range(args.load_clients)
        ]
        for thread in loaders:
            thread.start()
        try:
            loaded = measure(http, queries, "under encode load")
        finally:
            stop.set()
            for thread in loaders:
                thread.join()
    report(idle, loaded, args.load_clients)


if __name__ == "__main__":
    main()
