"""Pair scoring as /similarity does it: cosine vs Eq. 7, encoding included, M = 10k and 100k.

RankEncoder Appendix A.7 reports Eq. 7 adding 1.8 % to BERT-base inference at M = 100k on a
V100. Here, in one run on this machine, for 1 and 64 pairs (128 distinct sentences):
- cosine: encode the distinct sentences, then one cosine per pair (the baseline);
- Eq. 7: the same encoding, then models/scoring.py's scorer, the one /similarity calls: rank
  vectors of every distinct sentence against the M anchors, Spearman per pair, the blend;
- rank part: the scorer alone on the same embeddings, encoding excluded;
- the same two with the anchor matrix in bfloat16 (RANKSERVE_ANCHOR_DTYPE=bfloat16).
The five are called in turn, so a change of load hits them alike; each row is printed as
soon as it is measured. Before the timings, a parity check of the bfloat16 matrix on the real
anchors (RANKSERVE_ANCHOR_* settings) and the dev sets (STS-B dev, SICK trial,
--parity-pairs of each): Spearman x 100 of the Eq. 7 scores with either matrix, and how far
any score moved. Anchor matrices are random unit vectors (ranking cost depends on M and
the dimension, not on content; the shipped corpus has 11,914 sentences). Nothing is allocated
past --max-memory-mb (default 80 % of what is available at start): an M that does not fit is
skipped, and said so.

    python -m bench.scoring [--anchors 10000 100000] [--pairs 1 64] [--repeat 15]
                            [--max-memory-mb MB] [--parity-pairs 400]
"""

import argparse
import os

import numpy as np
import torch

from bench.memory import MB, Budget
from bench.timing import interleaved_ms, percentile
from core.backend_choice import dev_parity_set
from core.loading import settings_anchors
from core.settings import DATA_DIR, get_settings
from models.anchors import AnchorSet, read_sentences
from models.cpu_products import pair_dots
from models.encoder import Encoder, load_encoder
from models.evaluation.sts import spearman_x100
from models.ordinal_ranks import method
from models.ranking import warm_up
from models.scoring import distinct_texts, score_embedded_pairs

COLUMNS = (
    "M", "pairs", "cosine p50 ms", "Eq. 7 p50 ms", "Eq. 7 / cosine", "cosine p90 ms",
    "Eq. 7 p90 ms", "rank part p50 ms (encoding excluded)", "bf16 anchors: Eq. 7 p50 ms",
    "bf16: Eq. 7 / cosine", "bf16: rank part p50 ms",
)  # fmt: skip


def row(*cells: object) -> None:
    print("| " + " | ".join(str(cell) for cell in cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchors", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--max-memory-mb", type=float, default=None)
    parser.add_argument("--parity-pairs", type=int, default=400)
    args = parser.parse_args()
    budget = Budget.from_option(args.max_memory_mb)
    warm_up()
    encoder = load_encoder()
    print(
        f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads, {encoder.name} on {encoder.device}, "
        f"rank kernel: {method()}, memory budget {budget.max_mb:,.0f} MB, "
        f"{args.repeat} calls each",
        flush=True,
    )
    anchor_parity(encoder, args.parity_pairs)
    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")
    generator = torch.Generator().manual_seed(0)
    row(*COLUMNS)
    row(*["---"] * len(COLUMNS))
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
            measure(encoder, anchors, sentences, n, args.repeat)
        del anchors, matrix
    print(f"load average at end: {os.getloadavg()}", flush=True)


def measure(encoder, anchors: AnchorSet, sentences: list[str], n: int, repeat: int) -> None:
    pairs = list(zip(sentences[:n], sentences[n : 2 * n], strict=True))
    unique, left, right = distinct_texts(pairs)
    index = {"dtype": torch.long, "device": encoder.device}
    left_t, right_t = torch.tensor(left, **index), torch.tensor(right, **index)
    embedded = encoder.encode(unique)  # (u, dim), for the rank part alone

    def cosine() -> torch.Tensor:
        embeddings = encoder.encode(unique)  # (u, dim)
        return pair_dots(embeddings, left_t, right_t)

    def eq7() -> torch.Tensor:
        embeddings = encoder.encode(unique)
        return score_embedded_pairs(embeddings, anchors, left, right).blended()

    def rank_part() -> torch.Tensor:
        return score_embedded_pairs(embedded, anchors, left, right).blended()

    half = anchors.stored_as(torch.bfloat16)

    def eq7_bf16() -> torch.Tensor:
        embeddings = encoder.encode(unique)
        return score_embedded_pairs(embeddings, half, left, right).blended()

    def rank_part_bf16() -> torch.Tensor:
        return score_embedded_pairs(embedded, half, left, right).blended()

    paths = {
        "cosine": cosine, "eq7": eq7, "rank": rank_part, "eq7_bf16": eq7_bf16,
        "rank_bf16": rank_part_bf16,
    }  # fmt: skip
    samples = interleaved_ms(paths, repeat=repeat)
    b50 = percentile(samples["eq7_bf16"], 50)
    c50, e50 = percentile(samples["cosine"], 50), percentile(samples["eq7"], 50)
    row(
        f"{anchors.count:,}",
        n,
        f"{c50:.2f}",
        f"{e50:.2f}",
        f"{e50 / c50:.3f}x",
        f"{percentile(samples['cosine'], 90):.2f}",
        f"{percentile(samples['eq7'], 90):.2f}",
        f"{percentile(samples['rank'], 50):.2f}",
        f"{b50:.2f}",
        f"{b50 / c50:.3f}x",
        f"{percentile(samples['rank_bf16'], 50):.2f}",
    )


def anchor_parity(encoder: Encoder, max_pairs: int) -> None:
    """Eq. 7 on the dev pairs with the real anchors in float32 and in bfloat16: Spearman x 100
    per task against the gold scores, and the largest change of any pair's score."""
    settings = get_settings()
    anchors = settings_anchors(settings, encoder)
    half = anchors.stored_as(torch.bfloat16)
    dev = dev_parity_set(settings, max_pairs)
    embeddings = encoder.encode(dev.texts)  # (texts, dim)
    for name, left, right, gold in dev.tasks:
        scores = {}
        for label, held in (("float32", anchors), ("bfloat16", half)):
            pairs = score_embedded_pairs(embeddings, held, left.tolist(), right.tolist())
            scores[label] = pairs.blended(settings.lambda_inf).numpy()
        moved = float(np.abs(scores["bfloat16"] - scores["float32"]).max())
        print(
            f"parity of bfloat16 anchors, {name} ({len(left)} pairs, M={anchors.count:,}, "
            f"lambda {settings.lambda_inf}): Spearman x 100 "
            f"{spearman_x100(gold, scores['float32']):.2f} (float32) vs "
            f"{spearman_x100(gold, scores['bfloat16']):.2f} (bfloat16), "
            f"largest score change {moved:.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
