"""Taking a snapshot of the corpus into the snapshot store, and restoring one: what
`POST /admin/snapshots` and `POST /admin/snapshots/{name}/restore` do (service/routes/
snapshots.py), kept here so any other caller does exactly the same.

A snapshot is every document as of one corpus revision plus the model version active at that
revision (core/corpus_snapshot.py); a restore makes the corpus equal to a snapshot's documents
in one atomic switch (core/corpus_restore.py). Redis, the snapshot store and the files are
reached from worker threads wherever a call would block, so the event loop keeps serving.
"""

import asyncio
from datetime import UTC, datetime

from core.corpus_files import open_corpus, read_documents
from core.corpus_restore import RestoreResult, restore_corpus
from core.corpus_snapshot import read_consistent
from core.documents import DocumentStore
from core.snapshots import DOCUMENTS, SnapshotExistsError, SnapshotManifest, SnapshotStore
from models.checksums import sha256_file


def default_name(now: datetime | None = None) -> str:
    """`snapshot-20240601T120000123456Z`: UTC to the microsecond, so names sort by time."""
    return f"snapshot-{(now or datetime.now(UTC)).strftime('%Y%m%dT%H%M%S%fZ')}"


async def create_snapshot(
    store: DocumentStore, snapshots: SnapshotStore, name: str, *, changes_keep: int
) -> SnapshotManifest:
    """Write the snapshot `name`; SnapshotExistsError if there is one by that name."""
    if await asyncio.to_thread(snapshots.exists, name):
        raise SnapshotExistsError(f"snapshot {name!r} already exists")
    with snapshots.workdir() as folder:
        documents = folder / DOCUMENTS
        cut = await read_consistent(store, documents, folder, changes_keep=changes_keep)
        digest = await asyncio.to_thread(sha256_file, documents)
        manifest = SnapshotManifest(
            name=name,
            created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            revision=cut.revision,
            count=cut.count,
            model_version=cut.model_version,
            documents_sha256=digest,
            documents_bytes=documents.stat().st_size,
        )
        await asyncio.to_thread(snapshots.publish, folder, manifest)
    return manifest


async def restore_snapshot(
    store: DocumentStore,
    snapshots: SnapshotStore,
    name: str,
    *,
    changes_keep: int,
    lock_ttl_s: float = 30.0,
) -> tuple[SnapshotManifest, RestoreResult]:
    """Make the corpus equal to snapshot `name`'s documents, once they matched its sha256."""
    opened = snapshots.documents(name)
    manifest, path = await asyncio.to_thread(opened.__enter__)
    try:
        with open_corpus(path, "r") as handle:
            result = await restore_corpus(
                store,
                read_documents(handle, sorted_ids=True),
                name=name,
                changes_keep=changes_keep,
                lock_ttl_s=lock_ttl_s,
            )
    finally:
        await asyncio.to_thread(opened.__exit__, None, None, None)
    return manifest, result
