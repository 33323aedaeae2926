"""Training data from files in the repository: plain sentence files and NLI TSV.

Unsupervised methods take sentences; a file of sentence pairs (STS-B train in SentEval layout,
SICK train, SNLI) contributes its sentences as unlabeled text. MNRL takes NLI triples.
Evaluation splits (STS-B dev/test, SICK trial/test) are refused: they are for tuning and
gating only.
"""

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from models.checksums import sha256_file, sha256_texts
from models.evaluation.senteval import (
    SICK_HEADER,
    SICK_SPLITS,
    STSB_SPLITS,
    SentEvalFormatError,
    parse_sick,
    parse_stsb,
)

EVALUATION_FILES = frozenset(STSB_SPLITS.values()) | frozenset(SICK_SPLITS.values())
NLI_HEADER = ("premise", "hypothesis", "label")
_T = TypeVar("_T")


class TrainingDataError(ValueError):
    """A training file is missing, malformed, or an evaluation split."""


@dataclass(frozen=True)
class NliTriple:
    anchor: str  # premise
    positive: str  # an entailed hypothesis
    negative: str | None  # a contradicted hypothesis of the same premise, when there is one


@dataclass(frozen=True)
class TrainingData:
    sentences: list[str]  # unsupervised methods
    triples: list[NliTriple]  # MNRL
    files: dict[str, str]  # path -> sha256 of each file read
    checksum: str  # of the examples actually selected, in order

    def __len__(self) -> int:
        return len(self.triples) or len(self.sentences)

    @property
    def texts(self) -> list[str]:
        """Every distinct text the examples hold, in first-occurrence order."""
        if not self.triples:
            return self.sentences
        members = (t for triple in self.triples for t in (triple.anchor, triple.positive))
        negatives = (triple.negative for triple in self.triples if triple.negative)
        return list(dict.fromkeys([*members, *negatives]))


def _check_path(path: Path) -> None:
    if path.name in EVALUATION_FILES:
        raise TrainingDataError(f"{path}: an evaluation split; never train on it")
    if not path.is_file():
        raise TrainingDataError(f"{path}: training file not found")


def _columns(line: str, count: int, path: Path, line_no: int) -> list[str]:
    columns = line.rstrip("\n").split("\t")
    if len(columns) < count:
        raise TrainingDataError(f"{path}:{line_no}: expected at least {count} tab-separated fields")
    return [column.strip() for column in columns]


def _is_nli(lines: list[str]) -> bool:
    return bool(lines) and tuple(lines[0].strip().split("\t")[:3]) == NLI_HEADER


def read_nli(path: Path) -> list[tuple[str, str, str]]:
    """(premise, hypothesis, label) rows of an NLI TSV with the header premise/hypothesis/label."""
    _check_path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if not _is_nli(lines):
        raise TrainingDataError(f"{path}:1: expected the header 'premise<TAB>hypothesis<TAB>label'")
    rows = []
    for line_no, line in enumerate(lines[1:], start=2):
        if line.strip():
            premise, hypothesis, label = _columns(line, 3, path, line_no)[:3]
            rows.append((premise, hypothesis, label))
    return rows


def read_text_file(path: Path) -> list[str]:
    """Every sentence in a file: NLI TSV, SICK, STS-B (SentEval) or one sentence per line."""
    _check_path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if _is_nli(lines):
        return [text for premise, hypothesis, _ in read_nli(path) for text in (premise, hypothesis)]
    try:
        if lines and lines[0].startswith(SICK_HEADER):
            pairs, _ = parse_sick(lines, path)
        elif path.suffix == ".csv":
            pairs, _ = parse_stsb(lines, path)
        else:
            return [line.strip() for line in lines if line.strip()]
    except SentEvalFormatError as error:
        raise TrainingDataError(str(error)) from None
    return [text for pair in pairs for text in pair]


def nli_triples(rows: list[tuple[str, str, str]], hard_negatives: bool) -> list[NliTriple]:
    """(premise, entailment, contradiction) triples; each entailment gets a contradiction of the
    same premise when `hard_negatives`, and premises without one are then left out."""
    entailed: dict[str, list[str]] = defaultdict(list)
    contradicted: dict[str, list[str]] = defaultdict(list)
    for premise, hypothesis, label in rows:
        if label == "entailment":
            entailed[premise].append(hypothesis)
        elif label == "contradiction":
            contradicted[premise].append(hypothesis)
    triples = []
    for premise, positives in entailed.items():
        negatives = contradicted.get(premise, [])
        if hard_negatives and not negatives:
            continue
        for k, positive in enumerate(positives):
            negative = negatives[k % len(negatives)] if hard_negatives else None
            triples.append(NliTriple(premise, positive, negative))
    return triples


def _sample(items: list[_T], count: int | None, seed: int) -> list[_T]:
    if count is None or count >= len(items):
        return items
    return random.Random(seed).sample(items, count)


def load_sentences(paths: list[Path], max_sentences: int | None, seed: int) -> TrainingData:
    """Distinct sentences of all files (first occurrence order), then a seeded sample."""
    files = {str(path): sha256_file(path) for path in paths}
    texts = list(dict.fromkeys(text for path in paths for text in read_text_file(path)))
    if len(texts) < 2:
        raise TrainingDataError("need at least two distinct training sentences")
    selected = _sample(texts, max_sentences, seed)
    return TrainingData(selected, [], files, sha256_texts(selected))


def load_triples(
    paths: list[Path], max_examples: int | None, seed: int, *, hard_negatives: bool
) -> TrainingData:
    """NLI triples from every file, then a seeded sample."""
    files = {str(path): sha256_file(path) for path in paths}
    triples = nli_triples([row for path in paths for row in read_nli(path)], hard_negatives)
    if len(triples) < 2:
        raise TrainingDataError("need at least two NLI entailment pairs")
    selected = _sample(triples, max_examples, seed)
    flat = [text for t in selected for text in (t.anchor, t.positive, t.negative or "")]
    return TrainingData([], selected, files, sha256_texts(flat))
