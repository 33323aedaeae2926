"""The demo corpus indexed on the first start of an empty store (RANKSERVE_DEMO_CORPUS)."""

import json
import logging
from pathlib import Path

from core.documents import DocumentStore, NewDocument

logger = logging.getLogger(__name__)


def read_demo_corpus(path: Path) -> list[NewDocument]:
    """JSON lines {"id", "text", "metadata"}."""
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [NewDocument(row["id"], row["text"], row.get("metadata") or {}) for row in rows]


async def seed_demo(store: DocumentStore, path: Path | None) -> None:
    """Index the demo corpus once: never again after the first start decided about it."""
    if path is not None and await store.seed(read_demo_corpus(path)):
        logger.info("indexed the demo corpus %s", path)
