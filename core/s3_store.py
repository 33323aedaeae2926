"""Bundles and the checkpoints of running retrain jobs in S3-compatible object storage.

Selected by `RANKSERVE_STORE_URL=s3://bucket/prefix` (core/stores.py). The bucket mirrors the
directory store's layout:

    <prefix>/bundles/<version>/<file>             every file the manifest names
    <prefix>/bundles/<version>/manifest.json      uploaded last: until it exists, no version
    <prefix>/jobs/retrain-<job>/.resume/state.pt  the newest resume checkpoint of a running job

Every process keeps a local copy, `<store_dir>/bundles/<version>/` (var/store by default), that
is a cache and is never shared: BundleStore's code reads it, so loading, reports and every
caller that asks for a path work as with the directory store.

Publishing writes the bundle into the cache exactly as the directory store writes one
(complete, hashed, renamed into place), uploads every file, and uploads the manifest last, on
condition that none exists yet. Listing and existence look only at manifests, so a bundle
whose upload stopped halfway is never seen, and a crashed publisher's orphaned objects are
removed by the next worker to start.

Fetching downloads into a `.tmp-` folder beside the cached bundles, hashes every file as it
streams and compares it with the remote manifest, and renames the folder into place only when
every file matched: a half-finished or tampered download is never served. A cached copy is
used only while its manifest equals the remote one and its files still hash to it; a copy
that does not is dropped and fetched again. When the store does not answer, a verified cached
copy is served and anything else raises BundleStoreUnavailableError (retry later, the bundle is not
to blame).
"""

import hashlib
import logging
import os
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from boto3.s3.transfer import TransferConfig

from core.bundle_manifest import (
    BUNDLES_DIR,
    JOBS_DIR,
    MANIFEST,
    VERSION_PATTERN,
    BundleExistsError,
    BundleNotFoundError,
    BundleStoreUnavailableError,
    CorruptBundleError,
    Manifest,
    parse_manifest,
    safe_file_name,
)
from core.registry import TMP_PREFIX, BundleStore
from core.s3_checkpoints import S3JobCheckpoints
from core.s3_client import S3_ERRORS, S3Location, error_code, is_not_found, s3_client, unavailable
from core.settings import Settings
from core.store_types import JobCheckpoints
from models.atomic import fsync_directory

logger = logging.getLogger(__name__)

_CHUNK = 1024 * 1024
_MULTIPART = 64 * 1024 * 1024  # parts of large uploads (encoder weights, corpus.npy)


class S3BundleStore(BundleStore):
    """ModelStore on S3-compatible object storage; `root` is this process's local cache."""

    def __init__(self, location: S3Location, cache_root: Path, client: Any) -> None:
        super().__init__(cache_root)
        self.remote = location
        self.client = client

    @classmethod
    def from_settings(cls, settings: Settings) -> "S3BundleStore":
        if settings.store_url is None:
            raise ValueError("RANKSERVE_STORE_URL is not set")
        return cls(S3Location.parse(settings.store_url), settings.bundle_store, s3_client(settings))

    @property
    def location(self) -> str:
        return self.remote.url(BUNDLES_DIR)

    # -- what the bucket holds ---------------------------------------------------------------

    def _key(self, version: str, name: str) -> str:
        return self.remote.key(BUNDLES_DIR, version, name)

    def list_objects(self, prefix: str) -> list[dict[str, Any]]:
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.remote.bucket, Prefix=prefix
            )
            return [entry for page in pages for entry in page.get("Contents", [])]
        except S3_ERRORS as error:
            raise unavailable(error, f"listing {prefix!r}") from error

    def versions(self) -> list[str]:
        """Versions with a manifest in the bucket, oldest first by the manifest's upload."""
        prefix = self.remote.key(BUNDLES_DIR, "")
        found = {}
        for entry in self.list_objects(prefix):
            version, _, name = entry["Key"][len(prefix) :].partition("/")
            if name == MANIFEST and VERSION_PATTERN.fullmatch(version):
                found[version] = entry["LastModified"]
        return sorted(found, key=lambda v: (found[v], v))

    def exists(self, version: str) -> bool:
        self.path_for(version)
        try:
            self.client.head_object(Bucket=self.remote.bucket, Key=self._key(version, MANIFEST))
        except S3_ERRORS as error:
            if is_not_found(error):
                return False
            raise unavailable(error, f"for {version}") from error
        return True

    def _remote_manifest(self, version: str) -> tuple[Manifest, bytes]:
        key = self._key(version, MANIFEST)
        try:
            raw = self.client.get_object(Bucket=self.remote.bucket, Key=key)["Body"].read()
        except S3_ERRORS as error:
            if is_not_found(error):
                raise BundleNotFoundError(
                    f"no bundle named {version!r} in {self.location}"
                ) from None
            raise unavailable(error, f"for {version}'s manifest") from error
        return parse_manifest(version, raw), raw

    def manifest(self, version: str) -> Manifest:
        """The parsed manifest: the cached copy's when there is one (bundles never change),
        else the bucket's."""
        if (self.path_for(version) / MANIFEST).is_file():
            return super().manifest(version)
        return self._remote_manifest(version)[0]

    # -- fetching ----------------------------------------------------------------------------

    def verify(self, version: str) -> Manifest:
        """Make the local copy of `version` whole and verified; its manifest.

        Called by `load`, `fetch` and `report`: whatever they read afterwards lies in a
        folder whose every file matched the bucket's manifest.
        """
        final = self.path_for(version)
        cached = final / MANIFEST
        try:
            manifest, raw = self._remote_manifest(version)
        except BundleStoreUnavailableError as error:
            if not cached.is_file():
                raise
            logger.warning("%s; serving the verified cached copy of %s", error, version)
            return super().verify(version)
        if cached.is_file():
            if cached.read_bytes() == raw:
                try:
                    return super().verify(version)
                except CorruptBundleError as error:
                    logger.warning("cached copy damaged, fetching it again: %s", error)
            else:
                logger.warning("cached copy of %s is not the stored bundle; fetching it", version)
            self._drop_cached(version)
        self._download(version, manifest, raw)
        return manifest

    def report(self, version: str) -> tuple[dict[str, Any], Path]:
        self.verify(version)
        return super().report(version)

    def _drop_cached(self, version: str) -> None:
        """Move a cached bundle aside in one rename, then delete it: no reader ever finds a
        half-deleted folder under the version's name."""
        doomed = self.bundles / f"{TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(self.path_for(version), doomed)
        except FileNotFoundError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def download_object(self, key: str, handle: BinaryIO) -> str:
        """Stream one object into `handle`; its sha256."""
        digest = hashlib.sha256()
        try:
            body = self.client.get_object(Bucket=self.remote.bucket, Key=key)["Body"]
            for chunk in body.iter_chunks(_CHUNK):
                digest.update(chunk)
                handle.write(chunk)
        except S3_ERRORS as error:
            if is_not_found(error):
                raise CorruptBundleError(f"{key} is missing from the bucket") from None
            raise unavailable(error, f"downloading {key}") from error
        return digest.hexdigest()

    def _download(self, version: str, manifest: Manifest, raw: bytes) -> None:
        self.bundles.mkdir(parents=True, exist_ok=True)
        tmp = self.bundles / f"{TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        try:
            for name, expected in sorted(manifest.files.items()):
                target = tmp.joinpath(*safe_file_name(version, name).parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("xb") as handle:
                    got = self.download_object(self._key(version, name), handle)
                    handle.flush()
                    os.fsync(handle.fileno())
                if got != expected:
                    raise CorruptBundleError(
                        f"{version}: {name} in {self.location} does not match its sha256"
                    )
            # The manifest that every file was checked against, not a second download of it.
            with (tmp / MANIFEST).open("xb") as handle:
                handle.write(raw)
                handle.flush()
                os.fsync(handle.fileno())
            for directory, _, _ in os.walk(tmp):
                fsync_directory(Path(directory))
            try:
                os.rename(tmp, self.path_for(version))
            except OSError:
                # Another thread or process of this pod fetched it first; theirs is as good.
                if not (self.path_for(version) / MANIFEST).is_file():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
            fsync_directory(self.bundles)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        logger.info("fetched bundle %s from %s", version, self.location)

    # -- publishing --------------------------------------------------------------------------

    def write(self, version: str, **parts: Any) -> Manifest:
        """Write the bundle into the local cache (BundleStore.write), then upload it with the
        manifest last; the version exists for other pods only once its manifest does."""
        if self.exists(version):
            raise BundleExistsError(f"bundle {version!r} already exists in {self.location}")
        # A local copy of a version the bucket lacks is a leftover of an upload that failed.
        self._drop_cached(version)
        manifest = super().write(version, **parts)
        try:
            self._upload(version, manifest)
        except BaseException:
            # Never leave a local copy that would pass for a published bundle.
            self._drop_cached(version)
            raise
        logger.info("published bundle %s to %s", version, self.location)
        return manifest

    def _upload(self, version: str, manifest: Manifest) -> None:
        transfer = TransferConfig(multipart_threshold=_MULTIPART, multipart_chunksize=_MULTIPART)
        root = self.path_for(version)
        bucket = self.remote.bucket
        for name in sorted(manifest.files):
            key = self._key(version, name)
            try:
                self.client.upload_file(str(root / name), bucket, key, Config=transfer)
            except S3_ERRORS as error:
                raise unavailable(error, f"uploading {key}") from error
        body = (root / MANIFEST).read_bytes()
        key = self._key(version, MANIFEST)
        try:
            # Conditional: of two publishers of one version, only the first makes it visible.
            self.client.put_object(
                Bucket=bucket,
                Key=key,
                Body=body,
                ContentType="application/json",
                IfNoneMatch="*",
            )
        except S3_ERRORS as error:
            code = error_code(error)
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise BundleExistsError(f"bundle {version!r} appeared meanwhile") from error
            if code not in ("NotImplemented", "501"):
                raise unavailable(error, f"uploading {key}") from error
            # Servers without conditional writes: the existence check above has to do.
            logger.warning(
                "%s does not support If-None-Match; publishing %s unconditionally",
                self.location,
                version,
            )
            try:
                self.client.put_object(
                    Bucket=bucket, Key=key, Body=body, ContentType="application/json"
                )
            except S3_ERRORS as retry_error:
                raise unavailable(retry_error, f"uploading {key}") from retry_error

    def remove_stale_temporaries(self, older_than_s: float = 3600.0) -> list[Path]:
        """Local half-written folders (BundleStore's rule), and in the bucket the objects of
        versions that never got a manifest, once nothing was uploaded there for as long."""
        removed = super().remove_stale_temporaries(older_than_s)
        prefix = self.remote.key(BUNDLES_DIR, "")
        by_version: dict[str, list[dict[str, Any]]] = {}
        for entry in self.list_objects(prefix):
            version = entry["Key"][len(prefix) :].partition("/")[0]
            by_version.setdefault(version, []).append(entry)
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
        for version, entries in by_version.items():
            names = {entry["Key"].rsplit("/", 1)[-1] for entry in entries}
            if MANIFEST in names or max(e["LastModified"] for e in entries) >= cutoff:
                continue
            self.delete_objects([entry["Key"] for entry in entries])
            url = self.remote.url(BUNDLES_DIR, version)
            logger.warning("removed a half-published bundle: %s", url)
        return removed

    def delete_objects(self, keys: list[str]) -> None:
        # One DeleteObject per key, not DeleteObjects: that call must carry a checksum, which
        # boto3 >= 1.36 sends as CRC32 where many MinIO and Ceph versions insist on
        # Content-MD5. Deletes are few (orphaned uploads, a finished job's checkpoint).
        for key in keys:
            try:
                self.client.delete_object(Bucket=self.remote.bucket, Key=key)
            except S3_ERRORS as error:
                raise unavailable(error, f"deleting {key}") from error

    # -- retrain checkpoints -----------------------------------------------------------------

    def job_checkpoints(self, job_id: str) -> JobCheckpoints:
        path = self.job_dir(job_id)
        return S3JobCheckpoints(path, self, self.remote.key(JOBS_DIR, path.name, ""))
