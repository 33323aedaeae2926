"""Corpus snapshots in the bundle store, beside the bundles: `<store>/snapshots/<name>/` in the
directory store, `<prefix>/snapshots/<name>/` in the S3 bucket (core/s3_snapshots.py).

    documents.jsonl.gz   every document as of `revision`, in id order (core/corpus_files.py)
    manifest.json        name, created_at, revision, count, the active model version then,
                         and the documents file's sha256 and size

Written as bundles are: in a directory, a `.tmp-` folder fsynced and renamed into place; in
S3, the documents first and the manifest last, on condition that none exists. A snapshot
exists once its manifest does. Its documents are checked against the manifest's sha256
before a restore reads a line of them.
"""

import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.bundle_manifest import VERSION_PATTERN
from core.registry import BundleStore
from models.atomic import atomic_write_text, fsync_directory, fsync_file
from models.checksums import sha256_file

SNAPSHOTS_DIR = "snapshots"
DOCUMENTS = "documents.jsonl.gz"
MANIFEST = "manifest.json"
TMP_PREFIX = ".tmp-"
FORMAT = 1
NAME_PATTERN = VERSION_PATTERN  # one safe path component, as bundle versions are
_STALE_S = 24 * 3600.0  # temporary folders older than this were left by a writer that died


class SnapshotError(Exception):
    """Base of the snapshot store's errors; messages name snapshots, never paths."""


class InvalidSnapshotNameError(SnapshotError, ValueError):
    pass


class SnapshotNotFoundError(SnapshotError):
    pass


class SnapshotExistsError(SnapshotError):
    pass


class CorruptSnapshotError(SnapshotError):
    """The documents file disagrees with the manifest, or the manifest is unreadable."""


class SnapshotManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: int = FORMAT
    name: str
    created_at: str
    revision: int = Field(ge=0)  # the corpus revision every document is as of
    count: int = Field(ge=0)
    model_version: str | None  # the active bundle at that revision; None = the settings model
    documents_sha256: str
    documents_bytes: int = Field(ge=0)


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidSnapshotNameError(
            f"invalid snapshot name {name!r}: use 1-100 letters, digits, '.', '-', '_', "
            "starting with a letter or digit"
        )
    return name


def parse_manifest(name: str, raw: bytes) -> SnapshotManifest:
    try:
        manifest = SnapshotManifest.model_validate_json(raw)
    except ValidationError:
        raise CorruptSnapshotError(f"snapshot {name!r} has an unreadable manifest") from None
    if manifest.name != name:
        raise CorruptSnapshotError(f"snapshot {name!r}: its manifest names {manifest.name!r}")
    return manifest


def check_documents(name: str, path: Path, manifest: SnapshotManifest) -> None:
    if path.stat().st_size != manifest.documents_bytes or (
        sha256_file(path) != manifest.documents_sha256
    ):
        raise CorruptSnapshotError(f"snapshot {name!r}: its documents do not match the manifest")


class SnapshotStore:
    """Snapshots in the directory store, `<root>/snapshots/`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / SNAPSHOTS_DIR

    def path_for(self, name: str) -> Path:
        return self.root / validate_name(name)

    @contextmanager
    def workdir(self) -> Iterator[Path]:
        """A temporary folder on the store's own filesystem, removed afterwards: a snapshot is
        written into it and `publish` renames it into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_stale()
        folder = self.root / f"{TMP_PREFIX}{uuid.uuid4().hex}"
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _remove_stale(self) -> None:
        cutoff = time.time() - _STALE_S
        for entry in self.root.iterdir():
            if entry.name.startswith(TMP_PREFIX) and entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)

    def exists(self, name: str) -> bool:
        return (self.path_for(name) / MANIFEST).is_file()

    def manifest(self, name: str) -> SnapshotManifest:
        path = self.path_for(name) / MANIFEST
        if not path.is_file():
            raise SnapshotNotFoundError(f"no snapshot named {name!r}")
        return parse_manifest(name, path.read_bytes())

    def manifests(self) -> list[SnapshotManifest]:
        """Every readable snapshot, oldest first."""
        if not self.root.is_dir():
            return []
        found = []
        for entry in self.root.iterdir():
            if NAME_PATTERN.fullmatch(entry.name) and (entry / MANIFEST).is_file():
                try:
                    found.append(self.manifest(entry.name))
                except CorruptSnapshotError:
                    continue
        return sorted(found, key=lambda m: (m.created_at, m.name))

    def publish(self, folder: Path, manifest: SnapshotManifest) -> None:
        """Make `folder` (a `workdir` holding DOCUMENTS) the snapshot `manifest.name`."""
        final = self.path_for(manifest.name)
        if final.exists():
            raise SnapshotExistsError(f"snapshot {manifest.name!r} already exists")
        fsync_file(folder / DOCUMENTS)
        atomic_write_text(folder / MANIFEST, manifest.model_dump_json(indent=2))
        fsync_directory(folder)
        try:
            os.rename(folder, final)
        except OSError:
            raise SnapshotExistsError(f"snapshot {manifest.name!r} appeared meanwhile") from None
        fsync_directory(self.root)

    @contextmanager
    def documents(self, name: str) -> Iterator[tuple[SnapshotManifest, Path]]:
        """The manifest, and the documents file once it matched the manifest's sha256."""
        manifest = self.manifest(name)
        path = self.path_for(name) / DOCUMENTS
        if not path.is_file():
            raise CorruptSnapshotError(f"snapshot {name!r} has no documents file")
        check_documents(name, path, manifest)
        yield manifest, path


def snapshots_of(bundles: BundleStore) -> SnapshotStore:
    """The snapshot store beside these bundles: S3 when the bundles are in S3."""
    # core.s3_store imports boto3, an optional dependency: it can only be an S3 store when
    # that module was loaded (core/stores.py loads it for an S3 URL alone).
    s3_store = sys.modules.get("core.s3_store")
    if s3_store is not None and isinstance(bundles, s3_store.S3BundleStore):
        from core.s3_snapshots import S3SnapshotStore

        return S3SnapshotStore(bundles)
    return SnapshotStore(bundles.root)
