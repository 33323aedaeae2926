"""Where a retrain job's training text comes from: the general clean text (Wikipedia + SNLI
sentences), the user's own documents from the corpus store, or a mix of the two.

A user who retrains wants the student to get better at *their* documents. With `text` "auto"
(the default) a job trains on the documents once the corpus holds enough distinct texts
(RANKSERVE_RETRAIN_MIN_DOCUMENTS), mixed with general text so that documents make up
`documents_share` of it; the bundle's manifest records the source, the corpus revision and the
mix. Supervised methods (NLI pairs) always use their NLI files.
"""

import random
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from models.training.data import read_text_file

TEXT_FILE = "documents-text.txt"
_WHITESPACE = re.compile(r"\s+")


class TextSource(StrEnum):
    AUTO = "auto"
    DOCUMENTS = "documents"
    GENERAL = "general"


class NotEnoughDocumentsError(ValueError):
    pass


@dataclass(frozen=True)
class TrainingText:
    files: list[Path]
    record: dict[str, Any]  # what the manifest says about the text


def resolve_source(requested: TextSource, distinct_documents: int, minimum: int) -> TextSource:
    """ "auto" becomes "documents" once the corpus holds `minimum` distinct texts; asking for
    documents explicitly needs at least two."""
    if requested is TextSource.AUTO:
        return TextSource.DOCUMENTS if distinct_documents >= minimum else TextSource.GENERAL
    if requested is TextSource.DOCUMENTS and distinct_documents < 2:
        raise NotEnoughDocumentsError("training on documents needs two or more distinct texts")
    return requested


def one_line(text: str) -> str:
    """A document as one line of a sentence file (the trainer reads one text per line)."""
    return _WHITESPACE.sub(" ", text).strip()


def mix_texts(documents: list[str], general: list[str], share: float, seed: int) -> list[str]:
    """Every document text, plus a seeded sample of general text so that documents make up
    `share` of the result (as far as the general text reaches)."""
    if not 0.0 < share <= 1.0:
        raise ValueError(f"documents_share must lie in (0, 1], got {share}")
    wanted = round(len(documents) * (1.0 - share) / share)
    pool = [text for text in dict.fromkeys(general) if text not in set(documents)]
    extra = random.Random(seed).sample(pool, min(wanted, len(pool)))
    return documents + extra


def training_text(
    source: TextSource,
    *,
    general_files: list[Path],
    documents: list[str],
    revision: int,
    share: float,
    seed: int,
    out_dir: Path,
) -> TrainingText:
    """The files the trainer reads, and their record; documents are written to `out_dir`."""
    if source is not TextSource.DOCUMENTS:
        return TrainingText(general_files, {"source": str(TextSource.GENERAL)})
    texts = list(dict.fromkeys(t for t in (one_line(d) for d in documents) if t))
    general = [text for path in general_files for text in read_text_file(path)]
    mixed = mix_texts(texts, general, share, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / TEXT_FILE
    path.write_text("\n".join(mixed) + "\n", encoding="utf-8")
    record = {
        "source": str(TextSource.DOCUMENTS),
        "corpus_revision": revision,
        "documents": len(texts),
        "general": len(mixed) - len(texts),
        "documents_share": share,
    }
    return TrainingText([path], record)
