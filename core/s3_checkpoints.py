"""A retrain job's resume checkpoint mirrored to S3-compatible storage (core/s3_store.py)."""

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from core.bundle_manifest import BundleStoreUnavailableError
from core.s3_client import S3_ERRORS, is_not_found, unavailable
from core.store_types import JobCheckpoints
from models.atomic import atomic_write
from models.checksums import sha256_file
from models.training.trainer import RESUME_DIR

if TYPE_CHECKING:
    from core.s3_store import S3BundleStore

logger = logging.getLogger(__name__)
SHA256_METADATA = "sha256"  # x-amz-meta-sha256 of an uploaded checkpoint
RESUME_STATE = f"{RESUME_DIR}/state.pt"  # what models/training/trainer.py resumes from
_SAVE_BACKOFF_S = 60.0  # after a failed checkpoint upload, training goes on this long first


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

    def __init__(self, path: Path, store: "S3BundleStore", prefix: str) -> None:
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
        except S3_ERRORS as error:
            if is_not_found(error):
                return self.path
            raise unavailable(error, f"for {self._key}") from error
        expected = head.get("Metadata", {}).get(SHA256_METADATA)
        got: list[str] = []

        def download(handle: BinaryIO) -> None:
            got.append(self.store.download_object(self._key, handle))

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
            keys = [entry["Key"] for entry in self.store.list_objects(self.prefix)]
            if keys:
                self.store.delete_objects(keys)
        except BundleStoreUnavailableError as error:
            # The job's work is done (or restarts); a leftover checkpoint only costs space.
            logger.warning("could not delete the checkpoints under %s: %s", self.prefix, error)
