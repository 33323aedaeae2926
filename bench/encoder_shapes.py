"""Encoders under traffic of varied shapes, as a replica meets it: sentences/s and memory.

`bench.encoder` times each batch size on a fixed set of texts, so every input shape repeats
and runs warm. A replica sees batches of any size and texts of any length. OpenVINO's CPU
plugin compiles every new (rows, tokens) shape it meets and caches what it compiled, so there
speed and memory depend on how many shapes the traffic brings (models/openvino_runner.py pads
passes to a multiple of 8 tokens to bound that).

Stream: each configuration runs in a fresh process (as a replica starts cold) and encodes, for
--seconds, requests of 1-64 distinct Wikipedia sentences drawn at random (the same draws for
every configuration), each request one `encode` call cut into passes by the token budget. It
prints sentences/s over the first and the last sixth of the time and over all of it, the ratio
to torch fp32 in the same round, and how much the process grew (RSS). Rounds alternate the
configurations (a b c a b c ...), so a neighbour's load weighs on all alike. The configurations
are torch fp32 and each installed backend of --backends (default: `onnx-int8` and the OpenVINO
ones), each OpenVINO one also with its passes not padded and its single texts in the dynamic
graph (`+exact`).

Sweep (--sweep): every (rows, tokens) shape a pass can take under the token budget, in a random
order, twice, by `openvino-int8-static` padded and not: the second sweep runs as fast as a warm
pass only if the plugin's cache kept every shape. Prints each sweep's mean ms per pass, then the
mean of 200 shapes each run twice in a row (warm), and the RSS. Memory: the model and what the
plugin caches, up to about 6 GB for the unpadded sweep (measured); nothing grows with --seconds
beyond the shapes the traffic brings.

    python -m bench.encoder_shapes [--seconds 30] [--rounds 2] [--backends B ...] [--sweep]
"""

import argparse
import json
import random
import statistics
import subprocess
import sys
import time

import numpy as np

from bench.memory import MB, rss_bytes
from bench.timing import load_average, say
from core.backend_choice import encoder_for
from core.settings import DATA_DIR, Settings
from models.anchors import read_sentences
from models.backends import OPENVINO, Backend, available
from models.encoder import Encoder

REQUEST_SIZES = (1, 1, 2, 3, 4, 6, 8, 8, 12, 16, 24, 32, 64)  # texts per request, drawn evenly
DEFAULT_BACKENDS = (Backend.ONNX_INT8, *OPENVINO)  # beside torch fp32, the baseline
EXACT = "+exact"  # a configuration suffix: OpenVINO passes not padded, no static graphs
WARM_SHAPES = 200
WINDOWS = 6


def _rss_mb() -> float:
    return rss_bytes() / MB


def _encoder(config: str) -> Encoder:
    exact = config.endswith(EXACT)
    settings = Settings(openvino_single_lengths=[]) if exact else Settings()
    encoder = encoder_for(settings, None, None, Backend(config.removesuffix(EXACT)))
    if exact:
        encoder.runner.length_multiple = 1  # type: ignore[union-attr]
    return encoder


def stream(config: str, seconds: float, seed: int) -> dict[str, float]:
    encoder = _encoder(config)
    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")
    draws = random.Random(seed)
    encoder.encode(["warm up"])
    before = _rss_mb()
    rates, done, start = [], 0, time.perf_counter()
    window_start, window_done = start, 0
    while len(rates) < WINDOWS:
        texts = draws.sample(sentences, draws.choice(REQUEST_SIZES))
        encoder.encode(texts)
        done += len(texts)
        window_done += len(texts)
        now = time.perf_counter()
        if now - window_start >= seconds / WINDOWS:
            rates.append(window_done / (now - window_start))
            window_start, window_done = now, 0
    return {
        "first": rates[0],
        "last": rates[-1],
        "total": done / (time.perf_counter() - start),
        "grew_mb": _rss_mb() - before,
    }


def _features(rows: int, tokens: int) -> dict[str, np.ndarray]:
    ids = np.full((rows, tokens), 1996, dtype=np.int64)  # one word, repeated: shape is all
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS], [SEP]
    ones = np.ones_like(ids)
    return {"input_ids": ids, "attention_mask": ones, "token_type_ids": np.zeros_like(ids)}


def sweep(config: str, seed: int) -> dict[str, float]:
    encoder = _encoder(config)
    runner = encoder.runner
    assert runner is not None
    multiple = runner.length_multiple  # type: ignore[attr-defined]
    budget = encoder.batch_tokens
    shapes = [
        (rows, tokens)
        for tokens in range(multiple, encoder.max_seq_length + 1, multiple)
        for rows in range(1, encoder.batch_size + 1)
        if rows == 1 or rows * tokens <= budget
    ]
    random.Random(seed).shuffle(shapes)
    before = _rss_mb()
    means = []
    for _ in range(2):
        times = []
        for rows, tokens in shapes:
            features = _features(rows, tokens)
            start = time.perf_counter()
            runner(features)
            times.append((time.perf_counter() - start) * 1e3)
        means.append(statistics.mean(times))
    warm = []
    for rows, tokens in shapes[:WARM_SHAPES]:
        features = _features(rows, tokens)
        runner(features)
        start = time.perf_counter()
        runner(features)
        warm.append((time.perf_counter() - start) * 1e3)
    return {
        "shapes": len(shapes),
        "first_ms": means[0],
        "second_ms": means[1],
        "warm_ms": statistics.mean(warm),
        "grew_mb": _rss_mb() - before,
    }


def _child(mode: str, config: str, seconds: float, seed: int) -> dict[str, float]:
    command = [sys.executable, "-m", "bench.encoder_shapes", "--child", mode, config]
    command += ["--seconds", str(seconds), "--seed", str(seed)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per configuration and round")
    parser.add_argument("--backends", nargs="+", default=[b.value for b in DEFAULT_BACKENDS])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sweep", action="store_true", help="also sweep every pass shape")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, config = args.child
        if mode == "stream":
            print(json.dumps(stream(config, args.seconds, args.seed)))
        else:
            print(json.dumps(sweep(config, args.seed)))
        return

    configs = [Backend.TORCH.value]
    for backend in (Backend(name) for name in args.backends):
        if backend != Backend.TORCH and available(backend):
            configs.append(backend.value)
            if backend in OPENVINO:
                configs.append(backend.value + EXACT)
    say(f"load average {load_average()} at start; {args.seconds:.0f} s per stream")
    say(
        f"{'round':>5} {'encoder':<26} {'first':>7} {'last':>7} {'all':>7} {'x fp32':>7} "
        f"{'RSS +MB':>8}  load"
    )
    for round_ in range(1, args.rounds + 1):
        baseline = None
        for config in configs:
            got = _child("stream", config, args.seconds, args.seed + round_)
            baseline = baseline or got["total"]
            say(
                f"{round_:>5} {config:<26} {got['first']:7.1f} {got['last']:7.1f} "
                f"{got['total']:7.1f} {got['total'] / baseline:7.2f} {got['grew_mb']:8.0f}"
                f"  {load_average()}"
            )
    if args.sweep and available(Backend.OPENVINO_INT8_STATIC):
        say(
            f"\n{'encoder':<26} {'shapes':>6} {'1st ms':>7} {'2nd ms':>7} {'warm ms':>7} "
            f"{'RSS +MB':>8}  load"
        )
        for config in (Backend.OPENVINO_INT8_STATIC.value, Backend.OPENVINO_INT8_STATIC + EXACT):
            got = _child("sweep", config, 0.0, args.seed)
            say(
                f"{config:<26} {got['shapes']:6.0f} {got['first_ms']:7.2f} "
                f"{got['second_ms']:7.2f} {got['warm_ms']:7.2f} {got['grew_mb']:8.0f}"
                f"  {load_average()}"
            )
    say(f"load average {load_average()} at the end")


if __name__ == "__main__":
    main()
