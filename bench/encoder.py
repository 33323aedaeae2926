"""Encoder backends side by side: sentences/s and tokens/s against this CPU's matmul GFLOP/s.

For each thread count: a matmul probe (fp32 and bf16 GFLOP/s of torch on this CPU, now), then
every installed backend on short texts (one Wikipedia sentence) and long ones (eight
consecutive sentences, truncated at the model's maximum) at batch sizes 1, 16 and 64. Within a
(threads, input, batch) group the rows take turns, `--rounds` times, for `--seconds` in all
each; a row reads its median sentences/s over the rounds, and its speed-up is the median of
its per-round ratios to the baseline of the same round: torch fp32 encoding each batch in one
forward pass, padded, as the encoder did before it cut batches by padded tokens (`--batch-tokens`,
default the settings' RANKSERVE_MAX_BATCH_TOKENS); every backend row, torch fp32 included,
then runs with the budget and its backend's pass cost (models/backends.py PASS_COST_TOKENS).
Before the speed rows, each backend's parity with torch fp32 on the dev sets
(models/parity.py): what `auto` requires of it. OpenVINO's static graphs for single texts
(models/openvino_static.py) are all compiled at load, those on demand included: the steady
state of a replica that meets such texts. `--padded` adds a row for torch fp32 and each
OpenVINO backend with passes padded to their longest text, as before they were packed into
rows (models/packing.py), to take turns with the packed one. `--batch-tokens` with more than one
value adds each backend's row at every further budget ("torch 2048"), to choose a budget with
the rows taking turns.

"GFLOP/s" is useful work: real (unpadded) tokens times the model's FLOPs per token (linear
layers plus attention at the input's mean length); "% probe" sets it against the fp32 probe.
Each group's rows are printed as soon as its rounds end, with the load average then. Memory:
the model once per backend (about 100-250 MB each) and 1024 x 1024 probe matrices; nothing
grows with --seconds or --rounds.

    python -m bench.encoder [--seconds S] [--rounds R] [--threads T ...] [--backends B ...]
                            [--batches N ...] [--parity-pairs P] [--texts N]
                            [--batch-tokens T [T ...]] [--padded]
"""

import argparse
import dataclasses
import os
import statistics
import time

import torch

from bench.timing import load_average
from core.backend_choice import dev_parity_set, encoder_for
from core.settings import DATA_DIR, Settings
from models.anchors import read_sentences
from models.backends import (
    OPENVINO,
    Backend,
    available,
    ensure_variant,
    load_runner,
    variant_cache,
)
from models.encoder import Encoder
from models.openvino_static import useful_lengths
from models.parity import check_parity, embed, sentences_per_second

PROBE_SIZE = 1024
LONG_GROUP = 8  # sentences per long text


def matmul_gflops(dtype: torch.dtype, seconds: float) -> float:
    """Median GFLOP/s of square torch matmuls on this CPU, with torch's current threads."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(PROBE_SIZE, PROBE_SIZE, generator=generator).to(dtype)
    b = torch.randn(PROBE_SIZE, PROBE_SIZE, generator=generator).to(dtype)
    torch.mm(a, b)
    samples, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 3:
        start = time.perf_counter()
        torch.mm(a, b)
        samples.append(time.perf_counter() - start)
    return 2 * PROBE_SIZE**3 / statistics.median(samples) / 1e9


def interleaved_speeds(
    rows: dict[str, Encoder], texts: list[str], batch: int, seconds: float, rounds: int
) -> dict[str, list[float]]:
    """Each row's sentences/s in each of `rounds` rounds, the rows taking turns within a round
    for seconds / rounds each: a burst of load from another tenant then hits one round of
    every row, not one row (back-to-back rows read 0.27-1.30x for the same torch fp32 encoder
    on a Xeon losing 16-23 % of its time to steal)."""
    speeds: dict[str, list[float]] = {label: [] for label in rows}
    for round_ in range(rounds):
        for label, encoder in rows.items():
            speeds[label].append(
                sentences_per_second(encoder, texts, batch, seconds / rounds, warm=round_ > 0)
            )
    return speeds


def flops_per_token(encoder: Encoder, mean_tokens: float) -> float:
    """Forward FLOPs per token of a BERT-style encoder: the linear layers, 2 x (4h^2 + 2hi)
    per layer, plus attention's two products, 4 x h x sequence length per layer."""
    config = encoder.model[0].auto_model.config
    layers, hidden = config.num_hidden_layers, config.hidden_size
    inner = config.intermediate_size
    return layers * (2 * (4 * hidden**2 + 2 * hidden * inner) + 4 * hidden * mean_tokens)


def short_and_long(count: int) -> dict[str, list[str]]:
    """`count` short texts (one Wikipedia sentence each) and `count` long ones (LONG_GROUP
    consecutive sentences each)."""
    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")
    long = [
        " ".join(sentences[i : i + LONG_GROUP]) for i in range(0, LONG_GROUP * count, LONG_GROUP)
    ]
    return {"short": sentences[:count], "long": long}


def inputs(encoder: Encoder, count: int) -> dict[str, tuple[list[str], float]]:
    """Short and long texts, with their mean token count after truncation."""
    out = {}
    for name, texts in short_and_long(count).items():
        counts = [min(c, encoder.max_seq_length) for c in encoder.token_counts(texts)]
        out[name] = (texts, sum(counts) / len(counts))
    return out


def compiled_at_load(settings: Settings) -> Settings:
    """`settings` with OpenVINO's on-demand static graphs compiled at load, so that a benchmark
    times the steady state instead of the moment each is compiled."""
    lengths = [*settings.openvino_single_lengths, *settings.openvino_single_lengths_on_demand]
    return settings.model_copy(
        update={"openvino_single_lengths": lengths, "openvino_single_lengths_on_demand": []}
    )


def padded(encoder: Encoder, settings: Settings) -> Encoder:
    """`encoder`, torch fp32 or an OpenVINO one, with passes padded to their longest text:
    torch through sentence-transformers, OpenVINO's variant loaded without the pipeline's
    pooling, which is what packing needs."""
    if encoder.backend == Backend.TORCH:
        return dataclasses.replace(encoder, runner=None)
    folder = ensure_variant(
        encoder.model,
        encoder.checksum,
        encoder.backend,
        prebuilt=None,
        cache=variant_cache(settings.cache.encoder_variants, encoder.checksum),  # as it loaded
        calibration=settings.anchor_corpus,
    )
    at_load, on_demand = useful_lengths(
        settings.openvino_single_lengths,
        settings.openvino_single_lengths_on_demand,
        encoder.max_seq_length,
    )
    runner = load_runner(encoder.backend, folder, settings.torch_threads, at_load, on_demand)
    return dataclasses.replace(encoder, runner=runner)


def print_parity(settings: Settings, backends: list[Backend], pairs: int | None) -> dict:
    dev = dev_parity_set(settings, pairs)
    reference = encoder_for(settings, None, None, Backend.TORCH)
    reference_embeddings = embed(reference, dev)
    print(f"\nparity with torch fp32 on the dev sets ({len(dev.texts)} sentences)", flush=True)
    print(
        f"{'backend':<11} {'Spearman x100 per task':<44} {'max gap':>7} {'mean cos':>9} "
        f"{'min cos':>8}  passes",
        flush=True,
    )
    passed = {}
    for backend in backends:
        encoder = encoder_for(settings, None, None, backend)
        parity = check_parity(backend.value, embed(encoder, dev), reference_embeddings, dev)
        tasks = " ".join(
            f"{task.split('-')[0]} {parity.spearman[task]:.2f} ({parity.reference[task]:.2f})"
            for task in parity.spearman
        )
        print(
            f"{backend.value:<11} {tasks:<44} {parity.max_spearman_gap:7.3f} "
            f"{parity.mean_cosine:9.5f} {parity.min_cosine:8.5f}  {parity.passed}",
            flush=True,
        )
        passed[backend] = parity.passed
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per row and batch size")
    parser.add_argument("--rounds", type=int, default=3, help="turns the rows take")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--backends", nargs="+", default=[b.value for b in Backend])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--texts", type=int, default=128, help="distinct texts per input kind")
    parser.add_argument("--parity-pairs", type=int, default=None, help="per dev task; all")
    parser.add_argument(
        "--batch-tokens", type=int, nargs="+", default=[], help="default: the settings'"
    )
    parser.add_argument("--padded", action="store_true", help="padded passes too")
    args = parser.parse_args()

    settings = compiled_at_load(Settings())
    if args.batch_tokens:
        settings = settings.model_copy(update={"max_batch_tokens": args.batch_tokens[0]})
    backends = [Backend(name) for name in args.backends]
    missing = [b.value for b in backends if not available(b)]
    backends = [b for b in backends if available(b)]
    if Backend.TORCH not in backends:
        backends.insert(0, Backend.TORCH)
    print(
        f"load average {load_average()} at start; {os.cpu_count()} CPUs; "
        f"not installed: {', '.join(missing) or 'none'}",
        flush=True,
    )
    passed = print_parity(settings, backends, args.parity_pairs)

    reference = encoder_for(settings, None, None, Backend.TORCH)
    kinds = inputs(reference, args.texts)
    for name, (_, mean_tokens) in kinds.items():
        print(f"{name} texts: {mean_tokens:.1f} tokens on average", flush=True)
    for threads in args.threads:
        torch.set_num_threads(threads)
        fp32 = matmul_gflops(torch.float32, args.seconds)
        bf16 = matmul_gflops(torch.bfloat16, args.seconds)
        print(
            f"\n{threads} thread(s): matmul probe fp32 {fp32:.1f} GFLOP/s, bf16 {bf16:.1f} "
            f"GFLOP/s (load {load_average()})",
            flush=True,
        )
        print(
            f"{'backend':<11} {'input':<6} {'batch':>5} {'sent/s':>9} {'tokens/s':>10} "
            f"{'x fp32':>7} {'GFLOP/s':>8} {'% probe':>8} {'parity':>7}  load",
            flush=True,
        )
        local = settings.model_copy(update={"torch_threads": threads})
        encoders = {}
        for backend in backends:
            encoders[backend.value] = encoder_for(local, None, None, backend)
            if args.padded and (backend in OPENVINO or backend == Backend.TORCH):
                encoders[f"{backend.value} padded"] = padded(encoders[backend.value], local)
            for budget in args.batch_tokens[1:]:
                encoders[f"{backend.value} {budget}"] = dataclasses.replace(
                    encoders[backend.value], batch_tokens=budget
                )
        # A budget no batch reaches, and passes dearer than any padding: each batch is one
        # pass, padded to its longest text.
        whole = max(args.batches) * reference.max_seq_length
        # ... and padded, not packed in rows (models/packing.py): torch fp32 as it ran before.
        one_pass = dataclasses.replace(
            encoders[Backend.TORCH.value], batch_tokens=whole, pass_cost_tokens=whole, runner=None
        )
        rows = {"torch 1pass": one_pass} | encoders
        for kind, (texts, mean_tokens) in kinds.items():
            flops = flops_per_token(reference, mean_tokens)
            for batch in args.batches:
                speeds = interleaved_speeds(rows, texts, batch, args.seconds, args.rounds)
                baseline = speeds["torch 1pass"]
                for label, encoder in rows.items():
                    verdict = "pass" if passed[encoder.backend] else "FAIL"
                    speed = statistics.median(speeds[label])
                    ratio = statistics.median(
                        mine / base for mine, base in zip(speeds[label], baseline, strict=True)
                    )
                    tokens = speed * mean_tokens
                    gflops = tokens * flops / 1e9
                    print(
                        f"{label:<11} {kind:<6} {batch:>5} {speed:9.1f} "
                        f"{tokens:10.0f} {ratio:7.2f} {gflops:8.1f} "
                        f"{100 * gflops / fp32:7.1f}% {verdict:>7}"
                        f"  {load_average()}",
                        flush=True,
                    )
    print(f"\nload average {load_average()} at the end", flush=True)


if __name__ == "__main__":
    main()
