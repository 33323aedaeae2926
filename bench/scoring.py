"""Scoring cost: cosine vs Eq. 7 at M = 1k, 10k, 100k anchors, 1 and 64 pairs.

RankEncoder Appendix A.7 reports Eq. 7 adding 1.8% to BERT-base inference at M = 100k on a V100.
Here both are measured in one run on this machine, with and without the encoder's forward pass.
Anchor matrices are random unit vectors: ranking cost depends on M and the dimension, not on the
anchors' content, and the shipped corpus has only 11,914 sentences.

    python -m bench.scoring [--repeat N]
"""

import argparse

import torch
from rich.console import Console
from rich.table import Table

from bench.timing import median_seconds
from core.settings import DATA_DIR
from models.anchors import read_sentences
from models.encoder import load_encoder
from models.ranking import blend, paired_similarity, rank_vectors

ANCHOR_COUNTS = (1_000, 10_000, 100_000)
PAIR_COUNTS = (1, 64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    encoder = load_encoder()
    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")
    generator = torch.Generator().manual_seed(0)
    table = Table(
        title=f"ms per call, median of {args.repeat} ({encoder.name}, {encoder.device}, "
        f"{torch.get_num_threads()} threads)"
    )
    for column in ("M", "pairs", "encode", "cosine", "Eq. 7", "Eq. 7 / cosine"):
        table.add_column(column, justify="right")

    for m in ANCHOR_COUNTS:
        anchors = torch.randn(m, encoder.dim, generator=generator)
        anchors = (anchors / anchors.norm(dim=1, keepdim=True)).to(encoder.device)
        for n in PAIR_COUNTS:
            left_texts, right_texts = sentences[:n], sentences[n : 2 * n]
            left, right = encoder.encode(left_texts), encoder.encode(right_texts)

            def cosine_only(a: torch.Tensor = left, b: torch.Tensor = right) -> torch.Tensor:
                return paired_similarity(a, b)

            def eq7(
                a: torch.Tensor = left, b: torch.Tensor = right, c: torch.Tensor = anchors
            ) -> torch.Tensor:
                z = rank_vectors(torch.cat([a, b]), c)  # (2n, m)
                rank = paired_similarity(z[: len(a)], z[len(a) :])
                return blend(paired_similarity(a, b), rank)

            def encode_both(lt: list[str] = left_texts, rt: list[str] = right_texts) -> None:
                encoder.encode(lt + rt)

            encode_s = median_seconds(encode_both, repeat=args.repeat)
            cosine_s = median_seconds(cosine_only, repeat=args.repeat)
            eq7_s = median_seconds(eq7, repeat=args.repeat)
            for label, extra in (("excluded", 0.0), ("included", encode_s)):
                table.add_row(
                    f"{m:,}",
                    str(n),
                    label,
                    f"{(cosine_s + extra) * 1e3:.3f}",
                    f"{(eq7_s + extra) * 1e3:.3f}",
                    f"{(eq7_s + extra) / (cosine_s + extra):.2f}x",
                )
    Console().print(table)


if __name__ == "__main__":
    main()
