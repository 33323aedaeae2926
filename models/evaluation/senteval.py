"""Read STS tasks from a SentEval-layout directory (whichever known files are present).

Layout: <root>/STS/STS1{2..6}-en-test/STS.input.<subset>.txt with STS.gs.<subset>.txt,
<root>/STS/STSBenchmark/sts-{dev,test}.csv, <root>/SICK/SICK_{trial,test_annotated}.txt.
The column parsers of STS-B and SICK files (`parse_stsb`, `parse_sick`) are the only ones in
the project: training reads the sentences of the train splits through them too.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

STS_YEARS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "OnWN", "images", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
STSB_SPLITS = {"dev": "sts-dev.csv", "test": "sts-test.csv"}
SICK_SPLITS = {"trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}

# RankEncoder Table 5 / Figure 5: STS-B pairs whose gold, scaled to [0, 1], is at least 0.67.
SIMILAR_PAIRS_RANGE = (0.67, 1.0)
STSB_MAX_SCORE = 5.0
SICK_HEADER = "pair_ID"  # first field of a SICK file's header line


class SentEvalFormatError(ValueError):
    """A SentEval file is missing or does not parse; the message names the file and line."""


@dataclass(frozen=True)
class StsTask:
    name: str
    pairs: list[tuple[str, str]]
    gold: np.ndarray  # (n,) float64
    in_average: bool = True  # similar-pair subsets are an analysis, not a benchmark task


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise SentEvalFormatError(f"{path}: not valid UTF-8 ({error})") from error


def _parse_score(raw: str, path: Path, line_no: int) -> float:
    try:
        return float(raw)
    except ValueError:
        raise SentEvalFormatError(f"{path}:{line_no}: score {raw!r} is not a number") from None


def _read_sts_subset(input_path: Path) -> tuple[list[tuple[str, str]], list[float]]:
    gold_path = input_path.with_name(input_path.name.replace("STS.input.", "STS.gs.", 1))
    if not gold_path.is_file():
        raise SentEvalFormatError(f"{gold_path}: gold-score file missing for {input_path.name}")
    inputs = _read_lines(input_path)
    golds = _read_lines(gold_path)
    if len(inputs) != len(golds):
        raise SentEvalFormatError(
            f"{input_path}: {len(inputs)} pairs but {gold_path.name} has {len(golds)} lines"
        )
    pairs: list[tuple[str, str]] = []
    scores: list[float] = []
    for line_no, (line, gold) in enumerate(zip(inputs, golds, strict=True), start=1):
        if not gold.strip():
            continue  # an empty gold line marks an unlabeled pair
        columns = line.split("\t")
        if len(columns) < 2:
            raise SentEvalFormatError(
                f"{input_path}:{line_no}: expected two tab-separated sentences"
            )
        pairs.append((columns[0].strip(), columns[1].strip()))
        scores.append(_parse_score(gold.strip(), gold_path, line_no))
    return pairs, scores


def parse_stsb(lines: list[str], path: Path) -> tuple[list[tuple[str, str]], list[float]]:
    """Sentence pairs and gold scores of an STS-B file (genre, file, year, id, score, s1, s2).

    `lines` are the file's lines; `path` names the file in errors (SentEvalFormatError).
    """
    pairs: list[tuple[str, str]] = []
    scores: list[float] = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) < 7:
            raise SentEvalFormatError(
                f"{path}:{line_no}: expected 7 tab-separated columns "
                f"(genre, file, year, id, score, s1, s2), found {len(columns)}"
            )
        scores.append(_parse_score(columns[4], path, line_no))
        pairs.append((columns[5].strip(), columns[6].strip()))
    return pairs, scores


def parse_sick(lines: list[str], path: Path) -> tuple[list[tuple[str, str]], list[float]]:
    """Sentence pairs and relatedness scores of a SICK file (header pair_ID, sentence_A, ...).

    `lines` are the file's lines; `path` names the file in errors (SentEvalFormatError).
    """
    if not lines or not lines[0].startswith(SICK_HEADER):
        raise SentEvalFormatError(
            f"{path}:1: expected the header '{SICK_HEADER} sentence_A sentence_B ...'"
        )
    pairs: list[tuple[str, str]] = []
    scores: list[float] = []
    for line_no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) < 4:
            raise SentEvalFormatError(
                f"{path}:{line_no}: expected at least 4 tab-separated columns"
            )
        pairs.append((columns[1].strip(), columns[2].strip()))
        scores.append(_parse_score(columns[3], path, line_no))
    return pairs, scores


def _similar_subset(task: StsTask) -> StsTask:
    low, high = SIMILAR_PAIRS_RANGE
    scaled = task.gold / STSB_MAX_SCORE
    keep = (scaled >= low) & (scaled <= high)
    return StsTask(
        name=f"{task.name}-similar",
        pairs=[pair for pair, kept in zip(task.pairs, keep, strict=True) if kept],
        gold=task.gold[keep],
        in_average=False,
    )


def load_sts_tasks(root: Path) -> list[StsTask]:
    """Every STS task whose files are present under `root`, in the papers' table order."""
    if not root.is_dir():
        raise SentEvalFormatError(f"{root}: data directory not found")
    tasks: list[StsTask] = []
    for year, subsets in STS_YEARS.items():
        year_dir = root / "STS" / f"{year}-en-test"
        pairs: list[tuple[str, str]] = []
        scores: list[float] = []
        for subset in subsets:
            input_path = year_dir / f"STS.input.{subset}.txt"
            if input_path.is_file():
                subset_pairs, subset_scores = _read_sts_subset(input_path)
                pairs += subset_pairs
                scores += subset_scores
        if pairs:
            tasks.append(StsTask(year, pairs, np.asarray(scores, dtype=np.float64)))
    for split, filename in STSB_SPLITS.items():
        path = root / "STS" / "STSBenchmark" / filename
        if path.is_file():
            pairs, scores = parse_stsb(_read_lines(path), path)
            task = StsTask(f"STSBenchmark-{split}", pairs, np.asarray(scores, dtype=np.float64))
            tasks += [task, _similar_subset(task)]
    for split, filename in SICK_SPLITS.items():
        path = root / "SICK" / filename
        if path.is_file():
            pairs, scores = parse_sick(_read_lines(path), path)
            tasks.append(
                StsTask(f"SICKRelatedness-{split}", pairs, np.asarray(scores, dtype=np.float64))
            )
    if not tasks:
        raise SentEvalFormatError(
            f"{root}: no SentEval STS files found; expected e.g. STS/STSBenchmark/sts-dev.csv "
            "or SICK/SICK_trial.txt (see data/README.md)"
        )
    return tasks
