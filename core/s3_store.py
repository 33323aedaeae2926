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
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import urlparse

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

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
)
from core.registry import TMP_PREFIX, BundleStore
from core.settings import Settings
from core.store_types import JobCheckpoints
from models.atomic import atomic_write, fsync_directory
from models.checksums import sha256_file
from models.training.trainer import RESUME_DIR

logger = logging.getLogger(__name__)

RESUME_STATE = f"{RESUME_DIR}/state.pt"  # what models/training/trainer.py resumes from
SHA256_METADATA = "sha256"  # x-amz-meta-sha256 of an uploaded checkpoint
_CHUNK = 1024 * 1024
_MULTIPART = 64 * 1024 * 1024  # parts of large uploads (encoder weights, corpus.npy)
_SAVE_BACKOFF_S = 60.0  # after a failed checkpoint upload, training goes on this long first
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})
# What a request that the store did not serve raises (connection, timeout, torn stream, an
# error answer); anything else, such as a full local disk, is not the store's and propagates.
_S3_ERRORS = (BotoCoreError, ClientError, S3UploadFailedError)


@dataclass(frozen=True)
class S3Location:
    """`s3://bucket/prefix` split; `prefix` is empty or ends with one slash."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> "S3Location":
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc or parsed.query or parsed.fragment:
            raise ValueError(f"not an s3://bucket/prefix URL: {url!r}")
        prefix = parsed.path.strip("/")
        return cls(parsed.netloc, f"{prefix}/" if prefix else "")

    def key(self, *parts: str) -> str:
        return self.prefix + "/".join(parts)

    def url(self, *parts: str) -> str:
        return f"s3://{self.bucket}/{self.key(*parts)}"


def s3_client(settings: Settings) -> Any:
    """A boto3 S3 client as the settings describe it (endpoint, region, addressing, checksums)."""
    config = Config(
        request_checksum_calculation=settings.s3_checksums,
        response_checksum_validation=settings.s3_checksums,
        s3={"addressing_style": settings.s3_addressing_style},
        retries={"max_attempts": 5, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
    )
    # A session of its own: boto3's default session is not thread-safe to create clients from.
    return boto3.session.Session().client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        config=config,
    )


def _error_code(error: Exception) -> str | None:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "")) or None
    return None


def _is_not_found(error: Exception) -> bool:
    return _error_code(error) in _NOT_FOUND


def _unavailable(error: Exception, what: str) -> BundleStoreUnavailableError:
    code = _error_code(error)
    reason = f"{code}: {error}" if code else f"{type(error).__name__}: {error}"
    return BundleStoreUnavailableError(f"object storage did not answer {what} ({reason})")


def _safe_relative(version: str, name: str) -> PurePosixPath:
    """A manifest's file name as a path that stays inside the bundle folder."""
    path = PurePosixPath(name)
    if (
        not name
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in name.split("/"))
        or name == MANIFEST
    ):
        raise CorruptBundleError(f"{version}: the manifest names an unsafe file {name!r}")
    return path


def _parse_manifest(version: str, raw: bytes) -> Manifest:
    try:
        manifest = Manifest.model_validate_json(raw)
    except ValidationError as error:
        raise CorruptBundleError(f"{version}: unreadable manifest: {error}") from None
    if manifest.version != version:
        raise CorruptBundleError(f"{version}: manifest names version {manifest.version!r}")
    return manifest


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

    def _list(self, prefix: str) -> list[dict[str, Any]]:
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.remote.bucket, Prefix=prefix
            )
            return [entry for page in pages for entry in page.get("Contents", [])]
        except _S3_ERRORS as error:
            raise _unavailable(error, f"listing {prefix!r}") from error

    def versions(self) -> list[str]:
        """Versions with a manifest in the bucket, oldest first by the manifest's upload."""
        prefix = self.remote.key(BUNDLES_DIR, "")
        found = {}
        for entry in self._list(prefix):
            version, _, name = entry["Key"][len(prefix) :].partition("/")
            if name == MANIFEST and VERSION_PATTERN.fullmatch(version):
                found[version] = entry["LastModified"]
        return sorted(found, key=lambda v: (found[v], v))

    def exists(self, version: str) -> bool:
        self.path_for(version)
        try:
            self.client.head_object(Bucket=self.remote.bucket, Key=self._key(version, MANIFEST))
        except _S3_ERRORS as error:
            if _is_not_found(error):
                return False
            raise _unavailable(error, f"for {version}") from error
        return True

    def _remote_manifest(self, version: str) -> tuple[Manifest, bytes]:
        key = self._key(version, MANIFEST)
        try:
            raw = self.client.get_object(Bucket=self.remote.bucket, Key=key)["Body"].read()
        except _S3_ERRORS as error:
            if _is_not_found(error):
                raise BundleNotFoundError(
                    f"no bundle named {version!r} in {self.location}"
                ) from None
            raise _unavailable(error, f"for {version}'s manifest") from error
        return _parse_manifest(version, raw), raw

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

    def _download_object(self, key: str, handle: BinaryIO) -> str:
        """Stream one object into `handle`; its sha256."""
        digest = hashlib.sha256()
        try:
            body = self.client.get_object(Bucket=self.remote.bucket, Key=key)["Body"]
            for chunk in body.iter_chunks(_CHUNK):
                digest.update(chunk)
                handle.write(chunk)
        except _S3_ERRORS as error:
            if _is_not_found(error):
                raise CorruptBundleError(f"{key} is missing from the bucket") from None
            raise _unavailable(error, f"downloading {key}") from error
        return digest.hexdigest()

    def _download(self, version: str, manifest: Manifest, raw: bytes) -> None:
        self.bundles.mkdir(parents=True, exist_ok=True)
        tmp = self.bundles / f"{TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        try:
            for name, expected in sorted(manifest.files.items()):
                target = tmp.joinpath(*_safe_relative(version, name).parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("xb") as handle:
                    got = self._download_object(self._key(version, name), handle)
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
            except _S3_ERRORS as error:
                raise _unavailable(error, f"uploading {key}") from error
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
        except _S3_ERRORS as error:
            code = _error_code(error)
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise BundleExistsError(f"bundle {version!r} appeared meanwhile") from error
            if code not in ("NotImplemented", "501"):
                raise _unavailable(error, f"uploading {key}") from error
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
            except _S3_ERRORS as retry_error:
                raise _unavailable(retry_error, f"uploading {key}") from retry_error

    def remove_stale_temporaries(self, older_than_s: float = 3600.0) -> list[Path]:
        """Local half-written folders (BundleStore's rule), and in the bucket the objects of
        versions that never got a manifest, once nothing was uploaded there for as long."""
        removed = super().remove_stale_temporaries(older_than_s)
        prefix = self.remote.key(BUNDLES_DIR, "")
        by_version: dict[str, list[dict[str, Any]]] = {}
        for entry in self._list(prefix):
            version = entry["Key"][len(prefix) :].partition("/")[0]
            by_version.setdefault(version, []).append(entry)
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
        for version, entries in by_version.items():
            names = {entry["Key"].rsplit("/", 1)[-1] for entry in entries}
            if MANIFEST in names or max(e["LastModified"] for e in entries) >= cutoff:
                continue
            self._delete([entry["Key"] for entry in entries])
            url = self.remote.url(BUNDLES_DIR, version)
            logger.warning("removed a half-published bundle: %s", url)
        return removed

    def _delete(self, keys: list[str]) -> None:
        # One DeleteObject per key, not DeleteObjects: that call must carry a checksum, which
        # boto3 >= 1.36 sends as CRC32 where many MinIO and Ceph versions insist on
        # Content-MD5. Deletes are few (orphaned uploads, a finished job's checkpoint).
        for key in keys:
            try:
                self.client.delete_object(Bucket=self.remote.bucket, Key=key)
            except _S3_ERRORS as error:
                raise _unavailable(error, f"deleting {key}") from error

    # -- retrain checkpoints -----------------------------------------------------------------

    def job_checkpoints(self, job_id: str) -> JobCheckpoints:
        path = self.job_dir(job_id)
        return S3JobCheckpoints(path, self, self.remote.key(JOBS_DIR, path.name, ""))


def _signature(path: Path) -> tuple[int, int, int]:
    """Identifies one version of a file that is only ever replaced by a rename."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


class S3JobCheckpoints(JobCheckpoints):
    """A job's run folder on local disk, its resume checkpoint mirrored to the bucket.

    The trainer replaces `.resume/state.pt` atomically every `save_every` steps. `save()`,
    called after every step, uploads it when it changed since the last upload (a stat
    otherwise), so the bucket holds a checkpoint at most one step behind the local one. A
    retry on another pod calls `restore()`, which downloads it, checks its sha256, and puts it
    where the trainer resumes from. An upload that fails is logged and tried again after a
    while: it costs progress on a retry, never the job.
    """

    def __init__(self, path: Path, store: S3BundleStore, prefix: str) -> None:
        super().__init__(path)
        self.store = store
        self.prefix = prefix  # "<prefix>/jobs/retrain-<job>/"
        self._key = prefix + RESUME_STATE
        self._url = f"s3://{store.remote.bucket}/{self._key}"
        self._uploaded: tuple[int, int, int] | None = None
        self._retry_at = 0.0

    @property
    def _state(self) -> Path:
        return self.path / RESUME_STATE

    def restore(self) -> Path:
        state = self._state
        if state.is_file():
            # This pod ran the job before: its own checkpoint is at least as new as the
            # bucket's, which was uploaded from it.
            self._uploaded = _signature(state)
            return self.path
        client, bucket = self.store.client, self.store.remote.bucket
        try:
            head = client.head_object(Bucket=bucket, Key=self._key)
        except _S3_ERRORS as error:
            if _is_not_found(error):
                return self.path
            raise _unavailable(error, f"for {self._key}") from error
        expected = head.get("Metadata", {}).get(SHA256_METADATA)
        got: list[str] = []

        def download(handle: BinaryIO) -> None:
            got.append(self.store._download_object(self._key, handle))

        atomic_write(state, download)
        if got != [expected]:
            # Not what was uploaded: training from step 0 is slower, resuming from it wrong.
            state.unlink(missing_ok=True)
            logger.warning("checkpoint %s does not match its sha256; starting afresh", self._url)
            return self.path
        self._uploaded = _signature(state)
        logger.info("restored the resume checkpoint %s", self._url)
        return self.path

    def save(self) -> None:
        try:
            signature = _signature(self._state)
        except FileNotFoundError:
            return
        if signature == self._uploaded or time.monotonic() < self._retry_at:
            return
        try:
            digest = sha256_file(self._state)
            self.store.client.upload_file(
                str(self._state),
                self.store.remote.bucket,
                self._key,
                ExtraArgs={"Metadata": {SHA256_METADATA: digest}},
            )
        except Exception as error:
            # Whatever went wrong (store, network, reading the file), the job trains on.
            self._retry_at = time.monotonic() + _SAVE_BACKOFF_S
            logger.warning("checkpoint upload to %s failed, training goes on: %s", self._url, error)
            return
        self._uploaded = signature

    def discard(self) -> None:
        super().discard()
        self._uploaded = None
        try:
            keys = [entry["Key"] for entry in self.store._list(self.prefix)]
            if keys:
                self.store._delete(keys)
        except BundleStoreUnavailableError as error:
            # The job's work is done (or restarts); a leftover checkpoint only costs space.
            logger.warning("could not delete the checkpoints under %s: %s", self.prefix, error)
