"""Pair scoring as /similarity does it: cosine vs Eq. 7, encoding included, M = 10k and 100k.

RankEncoder Appendix A.7 reports Eq. 7 adding 1.8 % to BERT-base inference at M = 100k on a
V100. Here, in one run on this machine, for 1 and 64 pairs (128 distinct sentences):
- cosine: encode the distinct sentences, then one cosine per pair (the baseline);
- Eq. 7: the same encoding, then models/scoring.py's scorer, the one /similarity calls: rank
  vectors of every distinct sentence against the M anchors, Spearman per pair, the blend;
- rank part: the scorer alone on the same embeddings, encoding excluded;
the last two with the anchor matrix in each format of RANKSERVE_ANCHOR_DTYPE (float32, bfloat16,
int8: models/anchor_formats.py), or those of --formats: a replica holds one, and the others'
panels between its calls leave its caches unlike a replica's. The paths are called in turn, so a
change of load hits them alike; each row is printed as soon as it is measured. Before the
timings, a parity check of the formats on the real anchors (RANKSERVE_ANCHOR_* settings) and the
dev sets (STS-B dev, SICK trial, --parity-pairs of each): Spearman x 100 of the Eq. 7 scores
with each matrix, and how far any score moved from float32's. Anchor matrices are random unit
vectors (ranking cost depends on M and the dimension, not on content; the shipped corpus has
11,914 sentences). Nothing is allocated past --max-memory-mb (default 80 % of what is available
at start): an M that does not fit is skipped, and said so. Fewer than 8 pairs get 8 / pairs
times --repeat calls: their calls are short, and with 15 the ratio of one pair at M = 10k moved
by up to 0.025 between six runs, with 121 by up to 0.011 between five (int8 anchors, Intel Xeon
with AMX, load 0.0-1.5). --pause-ms idles before each call, as a replica between sparse requests
does, where the calls otherwise follow each other as under steady traffic.

    python -m bench.scoring [--anchors 10000 100000] [--pairs 1 64] [--repeat 15]
                            [--max-memory-mb MB] [--parity-pairs 400] [--pause-ms 0]
                            [--formats float32 bfloat16 int8]
"""

import argparse
import functools
import os
from collections.abc import Callable

import numpy as np
import torch

from bench.memory import MB, Budget
from bench.timing import interleaved_ms, percentile
from core.backend_choice import dev_parity_set
from core.loading import settings_anchors
from core.settings import DATA_DIR, get_settings
from models.anchor_formats import FORMATS
from models.anchors import AnchorSet, read_sentences
from models.cpu_products import pair_dots, prepare_anchors
from models.encoder import Encoder, load_encoder
from models.evaluation.sts import spearman_x100
from models.ordinal_ranks import method
from models.ranking import warm_up
from models.scoring import distinct_texts, score_embedded_pairs


def columns(formats: list[str]) -> tuple[str, ...]:
    """The table's heading: three columns per anchor format timed."""
    return (
        "M",
        "pairs",
        "cosine p50 ms",
        "cosine p90 ms",
        *(
            f"{name}: {what}"
            for name in formats
            for what in ("Eq. 7 p50 ms", "Eq. 7 / cosine", "rank part p50 ms (encoding excluded)")
        ),
    )


def row(*cells: object) -> None:
    print("| " + " | ".join(str(cell) for cell in cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchors", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--max-memory-mb", type=float, default=None)
    parser.add_argument("--parity-pairs", type=int, default=400)
    parser.add_argument("--pause-ms", type=float, default=0.0)
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    args = parser.parse_args()
    budget = Budget.from_option(args.max_memory_mb)
    warm_up()
    encoder = load_encoder()
    print(
        f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads, {encoder.name} on {encoder.device}, "
        f"rank kernel: {method()}, memory budget {budget.max_mb:,.0f} MB, "
        f"{args.repeat} calls each (x 8 / pairs below 8 pairs), "
        f"{args.pause_ms} ms idle before each",
        flush=True,
    )
    anchor_parity(encoder, args.parity_pairs)
    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")
    generator = torch.Generator().manual_seed(0)
    formats = list(dict.fromkeys(args.formats))  # each named once, in the order given
    heading = columns(formats)
    row(*heading)
    row(*["---"] * len(heading))
    for m in args.anchors:
        # The anchor matrix, and per scored batch its cosines, ranks and a temporary of each.
        needed = (m * encoder.dim * 4 + 4 * 2 * max(args.pairs) * m * 4) / MB + 64
        if not budget.allows(needed):
            print(
                f"skipped M={m:,}: needs about {needed:,.0f} MB, "
                f"{budget.headroom_mb():,.0f} MB left in the budget",
                flush=True,
            )
            continue
        matrix = torch.randn(m, encoder.dim, generator=generator)
        matrix = (matrix / matrix.norm(dim=1, keepdim=True)).to(encoder.device)  # (m, dim)
        anchors = AnchorSet([], matrix, f"random-{m}", encoder.checksum)
        for n in args.pairs:
            repeat = args.repeat * max(1, 8 // n)
            measure(encoder, anchors, formats, sentences, n, repeat, args.pause_ms)
        del anchors, matrix
    print(f"load average at end: {os.getloadavg()}", flush=True)


def measure(
    encoder: Encoder,
    anchors: AnchorSet,
    formats: list[str],
    sentences: list[str],
    n: int,
    repeat: int,
    pause_ms: float,
) -> None:
    pairs = list(zip(sentences[:n], sentences[n : 2 * n], strict=True))
    unique, left, right = distinct_texts(pairs)
    index = {"dtype": torch.long, "device": encoder.device}
    left_t, right_t = torch.tensor(left, **index), torch.tensor(right, **index)
    embedded = encoder.encode(unique)  # (u, dim), for the rank part alone

    def cosine() -> torch.Tensor:
        embeddings = encoder.encode(unique)  # (u, dim)
        return pair_dots(embeddings, left_t, right_t)

    def eq7(held: AnchorSet) -> torch.Tensor:
        embeddings = encoder.encode(unique)
        return score_embedded_pairs(embeddings, held, left, right).blended()

    def rank_part(held: AnchorSet) -> torch.Tensor:
        return score_embedded_pairs(embedded, held, left, right).blended()

    paths: dict[str, Callable[[], torch.Tensor]] = {"cosine": cosine}
    for name in formats:
        held = anchors.stored_as(name)
        prepare_anchors(held.embeddings)
        paths[f"eq7 {name}"] = functools.partial(eq7, held)
        paths[f"rank {name}"] = functools.partial(rank_part, held)
    samples = interleaved_ms(paths, repeat=repeat, pause_ms=pause_ms)
    c50 = percentile(samples["cosine"], 50)
    cells = [f"{anchors.count:,}", n, f"{c50:.2f}", f"{percentile(samples['cosine'], 90):.2f}"]
    for name in formats:
        e50 = percentile(samples[f"eq7 {name}"], 50)
        cells += [
            f"{e50:.2f}",
            f"{e50 / c50:.3f}x",
            f"{percentile(samples[f'rank {name}'], 50):.2f}",
        ]
    row(*cells)


def anchor_parity(encoder: Encoder, max_pairs: int) -> None:
    """Eq. 7 on the dev pairs with the real anchors in each format: Spearman x 100 per task
    against the gold scores, and the largest change of any pair's score from float32's."""
    settings = get_settings()
    anchors = settings_anchors(settings, encoder)
    dev = dev_parity_set(settings, max_pairs)
    embeddings = encoder.encode(dev.texts)  # (texts, dim)
    for task, left, right, gold in dev.tasks:
        scores = {
            name: score_embedded_pairs(
                embeddings, anchors.stored_as(name), left.tolist(), right.tolist()
            )
            .blended(settings.lambda_inf)
            .numpy()
            for name in FORMATS
        }
        spearman = ", ".join(
            f"{spearman_x100(gold, scores[name]):.2f} ({name})" for name in FORMATS
        )
        moved = ", ".join(
            f"{float(np.abs(scores[name] - scores['float32']).max()):.1e} ({name})"
            for name in FORMATS[1:]
        )
        print(
            f"parity of the anchor formats, {task} ({len(left)} pairs, M={anchors.count:,}, "
            f"lambda {settings.lambda_inf}): Spearman x 100 {spearman}; largest score change "
            f"from float32 {moved}",
            flush=True,
        )


if __name__ == "__main__":
    main()
