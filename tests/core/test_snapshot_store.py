"""The snapshot store beside the bundles, in a directory and in S3 (a real S3-compatible server
on loopback, moto): a snapshot is published whole or not at all, listed once its manifest
exists, refused when its documents do not match, and written and restored end to end through
core/snapshot_actions.py against the shared Redis."""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.bundle_manifest import BundleStoreUnavailableError
from core.registry import BundleStore
from core.s3_client import s3_client
from core.settings import Settings
from core.snapshot_actions import create_snapshot, default_name, restore_snapshot
from core.snapshots import (
    DOCUMENTS,
    MANIFEST,
    CorruptSnapshotError,
    InvalidSnapshotNameError,
    SnapshotExistsError,
    SnapshotManifest,
    SnapshotNotFoundError,
    SnapshotStore,
    snapshots_of,
)
from core.stores import open_store
from models.checksums import sha256_file
from tests.core.corpus_helpers import (
    corpus,
    delete_keys,
    fresh_keys,
    read_file,
    store_of,
    stored,
    upsert_all,
    write_file,
)
from tests.moto_s3 import REGION, credentials, moto_server

BUCKET = "rankserve-snapshots"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with credentials(), moto_server() as url:
        s3_client(Settings(s3_endpoint_url=url, s3_region=REGION)).create_bucket(Bucket=BUCKET)
        yield url


@pytest.fixture(params=["directory", "s3"])
def snapshots(request: pytest.FixtureRequest, tmp_path: Path) -> SnapshotStore:
    if request.param == "directory":
        return snapshots_of(BundleStore(tmp_path / "store"))
    endpoint = request.getfixturevalue("endpoint")
    settings = Settings(
        store_url=f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}",
        s3_endpoint_url=endpoint,
        s3_region=REGION,
        store_dir=tmp_path / "cache",
    )
    store = snapshots_of(open_store(settings))
    assert type(store).__name__ == "S3SnapshotStore"
    return store


def publish(snapshots: SnapshotStore, name: str, count: int = 10) -> SnapshotManifest:
    with snapshots.workdir() as folder:
        write_file(folder / DOCUMENTS, corpus(count))
        manifest = SnapshotManifest(
            name=name,
            created_at=default_name(),  # sortable, unique per call
            revision=count,
            count=count,
            model_version=None,
            documents_sha256=sha256_file(folder / DOCUMENTS),
            documents_bytes=(folder / DOCUMENTS).stat().st_size,
        )
        snapshots.publish(folder, manifest)
    return manifest


def test_publish_list_read_and_refuse(snapshots: SnapshotStore):
    assert snapshots.manifests() == []
    first = publish(snapshots, "first")
    second = publish(snapshots, "second", count=3)
    assert snapshots.manifests() == [first, second]
    assert snapshots.exists("first") and not snapshots.exists("third")
    with snapshots.documents("second") as (manifest, path):
        assert manifest == second
        assert read_file(path) == corpus(3)
    with pytest.raises(SnapshotExistsError):
        publish(snapshots, "first")
    with pytest.raises(SnapshotNotFoundError, match="no snapshot named 'third'"):
        snapshots.manifest("third")
    with pytest.raises(InvalidSnapshotNameError):
        snapshots.manifest("../first")
    # Nothing of the temporaries stays behind.
    assert not [p for p in snapshots.root.iterdir() if p.name.startswith(".tmp-")]


def test_documents_that_do_not_match_the_manifest_are_refused(tmp_path: Path):
    snapshots = snapshots_of(BundleStore(tmp_path))
    publish(snapshots, "s")
    documents = snapshots.path_for("s") / DOCUMENTS
    documents.write_bytes(documents.read_bytes()[::-1])
    with pytest.raises(CorruptSnapshotError, match="do not match"), snapshots.documents("s"):
        pass
    manifest = json.loads((snapshots.path_for("s") / MANIFEST).read_text())
    (snapshots.path_for("s") / MANIFEST).write_text(json.dumps({**manifest, "name": "t"}))
    with pytest.raises(CorruptSnapshotError):
        snapshots.manifest("s")
    assert snapshots.manifests() == []  # an unreadable snapshot is left out of the listing


def test_an_upload_without_its_manifest_is_no_snapshot(endpoint: str, tmp_path: Path):
    settings = Settings(
        store_url=f"s3://{BUCKET}/half",
        s3_endpoint_url=endpoint,
        s3_region=REGION,
        store_dir=tmp_path,
    )
    snapshots = snapshots_of(open_store(settings))
    client = s3_client(settings)
    client.put_object(Bucket=BUCKET, Key="half/snapshots/torn/documents.jsonl.gz", Body=b"x")
    assert snapshots.manifests() == []
    assert not snapshots.exists("torn")


def test_a_store_that_does_not_answer(tmp_path: Path):
    with credentials():
        settings = Settings(
            store_url=f"s3://{BUCKET}/x",
            s3_endpoint_url="http://127.0.0.1:1",
            s3_region=REGION,
            store_dir=tmp_path,
        )
        snapshots = snapshots_of(open_store(settings))
        with pytest.raises(BundleStoreUnavailableError):
            snapshots.manifests()


async def test_snapshot_and_restore_end_to_end(snapshots: SnapshotStore):
    keys = fresh_keys("snapshot-actions")
    store = store_of(keys)
    try:
        original = corpus(700)
        await upsert_all(store, original)
        manifest = await create_snapshot(store, snapshots, "mine", changes_keep=10)
        assert (manifest.count, manifest.revision) == (700, await store.revision())
        with pytest.raises(SnapshotExistsError):
            await create_snapshot(store, snapshots, "mine", changes_keep=10)
        await store.delete(sorted(original)[:100])
        await upsert_all(store, corpus(50, label="later", start=690))
        restored, result = await restore_snapshot(store, snapshots, "mine", changes_keep=10)
        assert restored == manifest
        assert (result.upserted, result.deleted) == (110, 40)
        assert await stored(store) == original
        with pytest.raises(SnapshotNotFoundError):
            await restore_snapshot(store, snapshots, "nope", changes_keep=10)
    finally:
        await store.client.aclose()
        delete_keys(keys)
