"""Corpus snapshots in the S3 bucket of the bundles (core/snapshots.py has the layout):

    <prefix>/snapshots/<name>/documents.jsonl.gz
    <prefix>/snapshots/<name>/manifest.json       uploaded last, only if none exists yet

Listing looks at manifests alone, so an upload that stopped halfway is never a snapshot. A
restore downloads the documents into a local temporary file, hashing as it streams, and reads
them only when they match the manifest.
"""

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.bundle_manifest import CorruptBundleError
from core.s3_client import S3_ERRORS, error_code, is_not_found, unavailable
from core.s3_store import S3BundleStore
from core.snapshots import (
    DOCUMENTS,
    MANIFEST,
    NAME_PATTERN,
    SNAPSHOTS_DIR,
    CorruptSnapshotError,
    SnapshotExistsError,
    SnapshotManifest,
    SnapshotNotFoundError,
    SnapshotStore,
    parse_manifest,
    validate_name,
)


class S3SnapshotStore(SnapshotStore):
    """Snapshots under `<prefix>/snapshots/`; `root` (the local cache) holds only temporaries."""

    def __init__(self, bundles: S3BundleStore) -> None:
        super().__init__(bundles.root)
        self.bundles = bundles
        self.remote = bundles.remote
        self.client = bundles.client

    def _key(self, name: str, file: str) -> str:
        return self.remote.key(SNAPSHOTS_DIR, validate_name(name), file)

    @contextmanager
    def workdir(self) -> Iterator[Path]:
        self.root.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".tmp-{uuid.uuid4().hex[:8]}-", dir=self.root))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def exists(self, name: str) -> bool:
        try:
            self.client.head_object(Bucket=self.remote.bucket, Key=self._key(name, MANIFEST))
        except S3_ERRORS as error:
            if is_not_found(error):
                return False
            raise unavailable(error, f"for snapshot {name}") from error
        return True

    def manifest(self, name: str) -> SnapshotManifest:
        key = self._key(name, MANIFEST)
        try:
            raw = self.client.get_object(Bucket=self.remote.bucket, Key=key)["Body"].read()
        except S3_ERRORS as error:
            if is_not_found(error):
                raise SnapshotNotFoundError(f"no snapshot named {name!r}") from None
            raise unavailable(error, f"for snapshot {name}'s manifest") from error
        return parse_manifest(name, raw)

    def manifests(self) -> list[SnapshotManifest]:
        prefix = self.remote.key(SNAPSHOTS_DIR, "")
        names = set()
        for entry in self.bundles.list_objects(prefix):
            name, _, file = entry["Key"][len(prefix) :].partition("/")
            if file == MANIFEST and NAME_PATTERN.fullmatch(name):
                names.add(name)
        found = []
        for name in names:
            try:
                found.append(self.manifest(name))
            except (CorruptSnapshotError, SnapshotNotFoundError):
                continue
        return sorted(found, key=lambda m: (m.created_at, m.name))

    def publish(self, folder: Path, manifest: SnapshotManifest) -> None:
        name = manifest.name
        if self.exists(name):
            raise SnapshotExistsError(f"snapshot {name!r} already exists")
        bucket = self.remote.bucket
        key = self._key(name, DOCUMENTS)
        try:
            self.client.upload_file(str(folder / DOCUMENTS), bucket, key)
        except S3_ERRORS as error:
            raise unavailable(error, f"uploading {key}") from error
        body = manifest.model_dump_json(indent=2).encode()
        key = self._key(name, MANIFEST)
        try:
            # Conditional: of two writers of one name, only the first makes it visible.
            self.client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
        except S3_ERRORS as error:
            if error_code(error) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise SnapshotExistsError(f"snapshot {name!r} appeared meanwhile") from error
            if error_code(error) not in ("NotImplemented", "501"):
                raise unavailable(error, f"uploading {key}") from error
            # Servers without conditional writes: the existence check above has to do.
            try:
                self.client.put_object(Bucket=bucket, Key=key, Body=body)
            except S3_ERRORS as retry_error:
                raise unavailable(retry_error, f"uploading {key}") from retry_error

    @contextmanager
    def documents(self, name: str) -> Iterator[tuple[SnapshotManifest, Path]]:
        manifest = self.manifest(name)
        with self.workdir() as folder:
            path = folder / DOCUMENTS
            with path.open("xb") as handle:
                try:
                    digest = self.bundles.download_object(self._key(name, DOCUMENTS), handle)
                except CorruptBundleError:
                    # download_object's word for a missing object.
                    raise CorruptSnapshotError(f"snapshot {name!r} has no documents file") from None
                handle.flush()
                os.fsync(handle.fileno())
            if (
                digest != manifest.documents_sha256
                or path.stat().st_size != manifest.documents_bytes
            ):
                raise CorruptSnapshotError(f"snapshot {name!r}: its documents do not match")
            yield manifest, path
