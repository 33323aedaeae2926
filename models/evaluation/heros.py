"""HEROS minimal-pair diagnostic: mean normalised similarity per subset.

Reference: Chiang et al., "Revealing the Blind Spot of Sentence Encoder Evaluation by HEROS"
(RepL4NLP 2023), Sections 2-3 and Appendix D. Each subset pairs an original sentence with a copy
that differs in one word (synonym, antonym, random MLM word, typo) or in negation. The score of a
subset is the mean over its pairs of Eq. 1 of Appendix D,

    cos_normalised = (cos - cos_avg) / (1 - cos_avg),

where cos_avg is the mean similarity of the 500 x 500 pairs formed by the first and the last 500
of the 1000 originals: how similar two unrelated sentences look to this encoder. 1 means "as
similar as identical sentences", 0 "as similar as two random sentences".

The same normalisation is applied to the rank similarity z_i.z_j (RankEncoder Eq. 2-3) and to the
Eq. 7 blend, each with its own baseline, so the scorings share one scale.

File format (the public heros.tsv): tab-separated, a header row
`Original, Synonym, Antonym, Negation, Random, Typo, Negation`, where the first Negation column is
Negation (Main) and the second Negation (Antonym). Empty cells are allowed (a generated file fills
only some subsets); a subset with no filled cell is left out.
"""

import csv
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch

from models.anchors import AnchorSet
from models.encoder import Encoder
from models.evaluation.sts import Scoring
from models.ranking import blend
from models.scoring import pair_scores

PAPER_ORIGINALS = 1000  # HEROS has 1000 originals; its baseline is 500 x 500 pairs


class Subset(StrEnum):
    SYNONYM = "Synonym"
    ANTONYM = "Antonym"
    NEGATION_MAIN = "Negation (Main)"
    RANDOM = "Random MLM"
    TYPO = "Typo"
    NEGATION_ANTONYM = "Negation (Antonym)"


# Column order of heros.tsv after `Original`; the header names Negation twice.
HEROS_HEADER = ("Original", "Synonym", "Antonym", "Negation", "Random", "Typo", "Negation")
COLUMN_SUBSETS = (
    Subset.SYNONYM,
    Subset.ANTONYM,
    Subset.NEGATION_MAIN,
    Subset.RANDOM,
    Subset.TYPO,
    Subset.NEGATION_ANTONYM,
)
# The order of the paper's Figures 1-2, which charts and tables follow.
DISPLAY_ORDER = (
    Subset.SYNONYM,
    Subset.TYPO,
    Subset.RANDOM,
    Subset.ANTONYM,
    Subset.NEGATION_MAIN,
    Subset.NEGATION_ANTONYM,
)


SubsetMeans = dict[Scoring, dict[Subset, float]]


class HerosFormatError(ValueError):
    """The file does not follow the heros.tsv layout; the message names the file and line."""


@dataclass(frozen=True)
class HerosData:
    originals: list[str]
    # Per subset, one cell per original (None = empty); only subsets with a filled cell appear.
    variants: dict[Subset, list[str | None]]

    def pairs(self, subset: Subset) -> list[tuple[int, str]]:
        """(index of the original, variant) for every filled cell of the subset."""
        return [(i, text) for i, text in enumerate(self.variants[subset]) if text is not None]

    @property
    def subsets(self) -> list[Subset]:
        return [subset for subset in DISPLAY_ORDER if subset in self.variants]


def _is_header(cells: list[str]) -> bool:
    names = [cell.strip().lower() for cell in cells]
    return bool(names) and names[0] == "original"


def read_heros(path: Path) -> HerosData:
    """Parse a heros.tsv-format file (header optional, quoting as pandas writes it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HerosFormatError(f"{path}: file not found") from None
    except UnicodeDecodeError as error:
        raise HerosFormatError(f"{path}: not valid UTF-8 ({error})") from error
    rows = list(csv.reader(text.splitlines(), delimiter="\t"))
    originals: list[str] = []
    cells: dict[Subset, list[str | None]] = {subset: [] for subset in COLUMN_SUBSETS}
    for line_no, row in enumerate(rows, start=1):
        if not any(cell.strip() for cell in row):
            continue
        if line_no == 1 and _is_header(row):
            continue
        if len(row) != len(HEROS_HEADER):
            raise HerosFormatError(
                f"{path}:{line_no}: expected {len(HEROS_HEADER)} tab-separated columns "
                f"({', '.join(HEROS_HEADER)}), found {len(row)}"
            )
        original = row[0].strip()
        if not original:
            raise HerosFormatError(f"{path}:{line_no}: the Original column is empty")
        originals.append(original)
        for subset, cell in zip(COLUMN_SUBSETS, row[1:], strict=True):
            cells[subset].append(cell.strip() or None)
    if len(originals) < 2:
        raise HerosFormatError(f"{path}: needs at least two rows of originals for the baseline")
    variants = {
        subset: column
        for subset, column in cells.items()
        if any(cell is not None for cell in column)
    }
    if not variants:
        raise HerosFormatError(f"{path}: every variant column is empty")
    return HerosData(originals=originals, variants=variants)


def write_heros(path: Path, data: HerosData) -> None:
    """Write `data` in the heros.tsv layout; subsets that `data` lacks get empty cells."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(HEROS_HEADER)
        for i, original in enumerate(data.originals):
            row = [original]
            for subset in COLUMN_SUBSETS:
                column = data.variants.get(subset)
                row.append((column[i] or "") if column else "")
            writer.writerow(row)


def baseline_halves(count: int) -> tuple[slice, slice]:
    """First and last floor(count/2) originals: HEROS Appendix D's 500 + 500 when count = 1000.

    With an odd count the middle original belongs to neither half.
    """
    if count < 2:
        raise ValueError("the baseline needs at least two originals")
    half = count // 2
    return slice(0, half), slice(count - half, count)


def cross_half_mean(vectors: torch.Tensor) -> float:
    """Mean inner product over all (first half, second half) pairs of the originals' vectors.

    For unit embeddings this is cos_avg of HEROS Appendix D; for rank vectors, the mean Spearman.
    """
    first, second = baseline_halves(vectors.shape[0])
    return float((vectors[first] @ vectors[second].T).mean())  # mean of (half, half)


def normalise(similarity: torch.Tensor, baseline: float) -> torch.Tensor:
    """HEROS Appendix D, Eq. 1: (s - s_avg) / (1 - s_avg)."""
    if baseline >= 1.0:
        raise ValueError("baseline similarity of 1 leaves nothing to normalise against")
    return (similarity - baseline) / (1.0 - baseline)  # (n,)


@dataclass(frozen=True)
class HerosResult:
    model: str
    lambda_inf: float
    originals: int
    baseline_half: int  # the baseline averages baseline_half x baseline_half pairs
    baseline: dict[Scoring, float]  # mean similarity of unrelated originals, per scoring
    mean_raw: SubsetMeans
    mean_normalised: SubsetMeans
    pairs: dict[Subset, int]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, keyed by the subset and scoring names."""
        return {
            "model": self.model,
            "lambda_inf": self.lambda_inf,
            "originals": self.originals,
            "baseline_pairs": self.baseline_half * self.baseline_half,
            "baseline": {str(s): v for s, v in self.baseline.items()},
            "pairs": {str(s): n for s, n in self.pairs.items()},
            "mean_normalised": {
                str(s): {str(sub): v for sub, v in per.items()}
                for s, per in self.mean_normalised.items()
            },
            "mean_raw": {
                str(s): {str(sub): v for sub, v in per.items()} for s, per in self.mean_raw.items()
            },
            "notes": list(self.notes),
        }


def heros_from_vectors(
    embeddings: torch.Tensor,
    ranks: torch.Tensor,
    originals: torch.Tensor,
    subset_pairs: dict[Subset, tuple[torch.Tensor, torch.Tensor]],
    lambda_inf: float,
) -> tuple[dict[Scoring, float], SubsetMeans, SubsetMeans]:
    """Baselines and per-subset means from precomputed vectors.

    `embeddings` (u, d) and `ranks` (u, m) hold every distinct sentence; `originals` (n,) indexes
    the originals in file order; each subset maps to (row indices of its originals, row indices
    of its variants), both (k,). Returns (baseline, mean raw, mean normalised) per scoring.
    The Eq. 7 baseline is the blend of the two baselines: a mean is linear.
    """
    baseline = {
        Scoring.COSINE: cross_half_mean(embeddings[originals]),
        Scoring.RANK: cross_half_mean(ranks[originals]),
    }
    means = torch.tensor([baseline[Scoring.COSINE], baseline[Scoring.RANK]])
    baseline[Scoring.BLEND] = float(blend(means[0], means[1], lambda_inf))
    raw: SubsetMeans = {scoring: {} for scoring in Scoring}
    normalised: SubsetMeans = {scoring: {} for scoring in Scoring}
    for subset, (left, right) in subset_pairs.items():
        scores = pair_scores(embeddings, ranks, left, right)  # (k,) each
        per_scoring = {
            Scoring.COSINE: scores.cosine,
            Scoring.RANK: scores.rank,
            Scoring.BLEND: scores.blended(lambda_inf),
        }
        for scoring, similarity in per_scoring.items():
            raw[scoring][subset] = float(similarity.mean())
            normalised[scoring][subset] = float(normalise(similarity, baseline[scoring]).mean())
    return baseline, raw, normalised


def evaluate_heros(
    encoder: Encoder, anchors: AnchorSet, data: HerosData, lambda_inf: float, *, label: str = ""
) -> HerosResult:
    """Encode every distinct sentence once, then score each subset under the three scorings."""
    texts = list(data.originals)
    for subset in data.subsets:
        texts += [text for _, text in data.pairs(subset)]
    unique = list(dict.fromkeys(texts))
    position = {text: i for i, text in enumerate(unique)}
    embeddings = encoder.encode(unique)  # (u, dim)
    ranks = anchors.rank_vectors(embeddings)  # (u, m)
    device = ranks.device
    embeddings = embeddings.to(device)

    def index(items: list[str]) -> torch.Tensor:
        return torch.tensor([position[t] for t in items], dtype=torch.long, device=device)

    originals = index(data.originals)
    subset_pairs = {}
    pair_counts = {}
    for subset in data.subsets:
        pairs = data.pairs(subset)
        subset_pairs[subset] = (
            index([data.originals[i] for i, _ in pairs]),
            index([text for _, text in pairs]),
        )
        pair_counts[subset] = len(pairs)
    baseline, raw, normalised = heros_from_vectors(
        embeddings, ranks, originals, subset_pairs, lambda_inf
    )
    count = len(data.originals)
    half = count // 2
    notes = []
    if count != PAPER_ORIGINALS:
        notes.append(
            f"{count} originals: the baseline averages the first {half} x last {half} originals "
            f"({half * half} pairs), not HEROS's 500 x 500"
            + (" (the middle original is in neither half)" if count % 2 else "")
        )
    return HerosResult(
        model=label or encoder.name,
        lambda_inf=lambda_inf,
        originals=count,
        baseline_half=half,
        baseline=baseline,
        mean_raw=raw,
        mean_normalised=normalised,
        pairs=pair_counts,
        notes=notes,
    )
