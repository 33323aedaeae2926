"""Pair scoring as /similarity does it: cosine vs Eq. 7, encoding included, M = 10k and 100k.

RankEncoder Appendix A.7 reports Eq. 7 adding 1.8 % to BERT-base inference at M = 100k on a
V100. Here, in one run on this machine, for 1 and 64 pairs (128 distinct sentences):
- cosine: encode the distinct sentences, then one cosine per pair (the baseline);
- Eq. 7: the same encoding, then models/scoring.py's scorer, the one /similarity calls: rank
  vectors of every distinct sentence against the M anchors, Spearman per pair, the blend;
- rank part: the scorer alone on the same embeddings, encoding excluded.
The three are called in turn, so a change of load hits them alike; each row is printed as
soon as it is measured. Anchor matrices are random unit vectors (ranking cost depends on M and
the dimension, not on content; the shipped corpus has 11,914 sentences). Nothing is allocated
past --max-memory-mb (default 80 % of what is available at start): an M that does not fit is
skipped, and said so.

    python -m bench.scoring [--anchors 10000 100000] [--pairs 1 64] [--repeat 15]
                            [--max-memory-mb MB]
"""

import argparse
import os

import torch

from bench.memory import MB, Budget
from bench.timing import interleaved_ms, percentile
from core.settings import DATA_DIR
from models.anchors import AnchorSet, read_sentences
from models.encoder import load_encoder
from models.ordinal_ranks import method
from models.ranking import paired_similarity, warm_up
from models.scoring import distinct_texts, score_embedded_pairs

COLUMNS = (
    "M", "pairs", "cosine p50 ms", "Eq. 7 p50 ms", "Eq. 7 / cosine", "cosine p90 ms",
    "Eq. 7 p90 ms", "rank part p50 ms (encoding excluded)",
)  # fmt: skip


def row(*cells: object) -> None:
    print("| " + " | ".join(str(cell) for cell in cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchors", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--max-memory-mb", type=float, default=None)
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
        return paired_similarity(embeddings[left_t], embeddings[right_t])

    def eq7() -> torch.Tensor:
        embeddings = encoder.encode(unique)
        return score_embedded_pairs(embeddings, anchors, left, right).blended()

    def rank_part() -> torch.Tensor:
        return score_embedded_pairs(embedded, anchors, left, right).blended()

    samples = interleaved_ms({"cosine": cosine, "eq7": eq7, "rank": rank_part}, repeat=repeat)
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
    )


if __name__ == "__main__":
    main()
