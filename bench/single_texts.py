"""Single texts in OpenVINO's static graphs against its dynamic graph: texts/s and memory.

A replica encodes one text at a time whenever requests do not queue (a query per /search, say).
An OpenVINO backend runs such a text in a graph compiled for one shape (models/openvino_static.py):
of up to one of RANKSERVE_OPENVINO_SINGLE_LENGTHS tokens from the start, of up to one of
RANKSERVE_OPENVINO_SINGLE_LENGTHS_ON_DEMAND once such texts keep coming; otherwise in its
dynamic graph, as every other pass. For each installed OpenVINO backend this loads the encoder
without static graphs and with all of them compiled (the steady state of a replica that meets
texts of every length) and, beside torch fp32, encodes short texts (one Wikipedia sentence) and
long ones (eight) one at a time, the three encoders in turn text by text, so that a change of
load hits them alike: each text's time goes to its encoder. Each encoder first runs every text
once, untimed, so that the dynamic graph has compiled every shape. Prints texts/s per round and
the ratios of the totals. Then each configuration's resident memory in a fresh process (the
encoder loaded and a few texts encoded): dynamic only, the graphs compiled at load, and all of
them, since memory is what the static graphs cost. Memory: torch fp32 and one backend's two
encoders at a time, then each fresh process (640-1,250 MB measured on a Zen 4).

    python -m bench.single_texts [--rounds R] [--texts N] [--backends B ...] [--lengths L ...]

`--lengths`: every static graph's, instead of the settings' two lists.
"""

import argparse
import json
import subprocess
import sys
import time

from bench.encoder import compiled_at_load, short_and_long
from bench.memory import MB, rss_bytes
from bench.timing import load_average, say
from core.backend_choice import encoder_for
from core.settings import Settings
from models.backends import OPENVINO, Backend, available
from models.encoder import Encoder


def _interleaved(encoders: dict[str, Encoder], texts: list[str]) -> dict[str, float]:
    """Texts/s of each encoder over one pass through `texts`, the encoders in turn per text."""
    spent = dict.fromkeys(encoders, 0.0)
    for text in texts:
        for name, encoder in encoders.items():
            start = time.perf_counter()
            encoder.encode([text])
            spent[name] += time.perf_counter() - start
    return {name: len(texts) / seconds for name, seconds in spent.items()}


def _resident_mb(backend: str, lengths: list[int]) -> float:
    command = [sys.executable, "-m", "bench.single_texts", "--child", backend, json.dumps(lengths)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


_ON_DEMAND = "openvino_single_lengths_on_demand"


def _static(lengths: list[int]) -> Settings:
    """The settings with static graphs of these `lengths`, all compiled at load."""
    return Settings(openvino_single_lengths=lengths, openvino_single_lengths_on_demand=[])


def _child(backend: str, lengths: list[int]) -> None:
    encoder = encoder_for(_static(lengths), None, None, Backend(backend))
    for texts in short_and_long(8).values():
        for text in texts:
            encoder.encode([text])
    print(rss_bytes() / MB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="passes through the texts")
    parser.add_argument("--texts", type=int, default=128, help="distinct texts per kind")
    parser.add_argument("--backends", nargs="+", default=[b.value for b in OPENVINO])
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help="the settings'")
    parser.add_argument("--child", nargs=2, metavar=("BACKEND", "LENGTHS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], json.loads(args.child[1]))
        return

    settings = Settings()
    # Where the settings turn the static graphs off, what they would be by default.
    fields = Settings.model_fields
    default = [*fields["openvino_single_lengths"].default, *fields[_ON_DEMAND].default]
    lengths = args.lengths or compiled_at_load(settings).openvino_single_lengths or default
    at_load = [n for n in settings.openvino_single_lengths if n in lengths]
    backends = [Backend(name) for name in args.backends if available(Backend(name))]
    say(f"load average {load_average()} at start; static graphs for {lengths} tokens")
    kinds = short_and_long(args.texts)
    torch_fp32 = encoder_for(settings, None, None, Backend.TORCH)
    for kind, texts in kinds.items():
        limit = torch_fp32.max_seq_length
        counts = [min(count, limit) for count in torch_fp32.token_counts(texts)]
        held = sum(count <= max(lengths) for count in counts)
        say(
            f"{kind} texts: {sum(counts) / len(counts):.1f} tokens on average, {held} of "
            f"{len(texts)} within {max(lengths)}"
        )
    for backend in backends:
        encoders = {
            "torch fp32": torch_fp32,
            "dynamic": encoder_for(_static(lengths=[]), None, None, backend),
            "static": encoder_for(_static(lengths), None, None, backend),
        }
        say(f"\n{backend.value}: texts/s per round (torch fp32, dynamic, static)")
        for kind, texts in kinds.items():
            _interleaved(encoders, texts)  # every shape compiled, every cache warm
            totals = dict.fromkeys(encoders, 0.0)
            for round_ in range(1, args.rounds + 1):
                speeds = _interleaved(encoders, texts)
                for name, speed in speeds.items():
                    totals[name] += len(texts) / speed
                say(
                    f"  {kind:<5} round {round_}: "
                    + ", ".join(f"{s:7.1f}" for s in speeds.values())
                    + f"  load {load_average()}"
                )
            fp32, dynamic, static = (len(texts) * args.rounds / totals[n] for n in encoders)
            say(
                f"  {kind:<5} all: static {static / dynamic:.2f}x dynamic; x torch fp32: "
                f"static {static / fp32:.2f}x, dynamic {dynamic / fp32:.2f}x"
            )
        without = _resident_mb(backend.value, [])
        loaded = _resident_mb(backend.value, at_load)
        every = _resident_mb(backend.value, lengths)
        say(
            f"  resident memory: {without:.0f} MB dynamic only, {loaded:.0f} MB with the "
            f"graphs of {at_load} (+{loaded - without:.0f} MB), {every:.0f} MB with all "
            f"(+{every - without:.0f} MB)  load {load_average()}"
        )
    say(f"\nload average {load_average()} at the end")


if __name__ == "__main__":
    main()
