"""Importing documents into the store, idempotent by id: `rankserve corpus import`.

Each batch is compared with the live documents first, and only the new or different ones are
written, through the store's upsert (core/documents.py): one Lua script per batch, with its
change-log entries and the deployment's WAIT, exactly as `POST /documents` writes. Every
replica's follower then indexes them, embedding through its embedding cache
(service/corpus/embedder.py): a text the cache holds is never encoded again. Re-importing a
file, or resuming an import that stopped, writes only what is not there yet; importing the
same file twice changes nothing, not even the revision.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from core.corpus_files import batched, metadata_json
from core.documents import DocumentStore, NewDocument, StoredDocument

BATCH = 500


@dataclass
class ImportCounts:
    documents: int = 0  # lines read
    written: int = 0  # new or different: upserted
    unchanged: int = 0  # already in the store exactly so (or repeated later in the file)
    revision: int | None = None  # the corpus revision after the last write; None if none


def differs(live: StoredDocument | None, doc: NewDocument) -> bool:
    """Whether writing `doc` would change the store; metadata compared as the store keeps it."""
    return (
        live is None
        or live.text != doc.text
        or metadata_json(live.metadata) != metadata_json(doc.metadata)
    )


async def import_documents(
    store: DocumentStore,
    documents: Iterable[NewDocument],
    *,
    batch_size: int = BATCH,
    on_batch: Callable[[int], None] | None = None,
) -> ImportCounts:
    """Upsert whatever of `documents` the store lacks or holds otherwise; of two lines with
    one id, the later one stays (as in one POST /documents)."""
    counts = ImportCounts()
    for batch in batched(documents, batch_size):
        latest = {doc.id: doc for doc in batch}  # the first position, the last value
        live = await store.get_many(list(latest))
        changed = [doc for doc, now in zip(latest.values(), live, strict=True) if differs(now, doc)]
        if changed:
            _, counts.revision = await store.upsert(changed)
        counts.documents += len(batch)
        counts.written += len(changed)
        counts.unchanged += len(batch) - len(changed)
        if on_batch is not None:
            on_batch(len(batch))
    return counts
