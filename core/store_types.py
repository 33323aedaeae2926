"""What a bundle store hands out, wherever its bundles live: a loaded bundle, a corpus
snapshot, a job's checkpoint folder, and the ModelStore interface that core/registry.py (a
shared directory) and core/s3_store.py (S3-compatible storage) both implement."""

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.bundle_manifest import Manifest
from models.anchors import AnchorSet
from models.encoder import Encoder


@dataclass(frozen=True)
class CorpusSnapshot:
    """Document embeddings by the bundle's encoder as of one document-store revision.

    Every document whose last write is at or before `revision` has its row here; later
    writes are for the loader to catch up on.
    """

    revision: int
    ids: list[int]  # the documents' search-index numbers
    embeddings: np.ndarray  # (n, dim) float32, unit rows


@dataclass(frozen=True)
class LoadedBundle:
    manifest: Manifest
    encoder: Encoder
    anchors: AnchorSet
    corpus: CorpusSnapshot | None


class JobCheckpoints:
    """The run folder of one retrain job (resume checkpoints), kept where a retry finds it.

    In a directory store the folder lies in the shared store itself, so there is nothing to
    copy: every method but `discard` is a no-op. The S3 store (core/s3_store.py) keeps the
    folder on local disk and mirrors its resume checkpoint to the bucket. The worker calls, in
    order: `restore()` once, for the folder to train into; `save()` after every training step
    (cheap when no new checkpoint was written); `discard()` once the run is bundled.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def restore(self) -> Path:
        """The folder to train into, holding the latest checkpoint that the store has."""
        return self.path

    def save(self) -> None:
        """Make the folder's newest resume checkpoint durable in the store."""

    def discard(self) -> None:
        """Delete the run, locally and in the store: the job is done or starts afresh."""
        shutil.rmtree(self.path, ignore_errors=True)


@runtime_checkable
class ModelStore(Protocol):
    """What the API, the worker and the CLI need of a bundle store, wherever bundles live.

    Bundles are immutable: once published, a version's files never change. `fetch` and
    `load` only ever hand out a local folder whose every file matched the manifest's sha256.
    """

    @property
    def location(self) -> str:
        """Where the bundles live, for messages (a path or an s3:// URL)."""
        ...

    def publish(
        self,
        version: str,
        *,
        encoder: Encoder,
        anchors: AnchorSet,
        corpus: CorpusSnapshot | None = None,
        method: str | None = None,
        parent: str | None = None,
        metrics: dict[str, Any] | None = None,
        report: Path | None = None,
        variants: Path | None = None,
    ) -> Manifest: ...

    def versions(self) -> list[str]: ...

    def exists(self, version: str) -> bool: ...

    def manifest(self, version: str) -> Manifest: ...

    def fetch(self, version: str) -> Path: ...

    def report(self, version: str) -> tuple[dict[str, Any], Path]: ...

    def load(
        self,
        version: str,
        *,
        device: str | None = None,
        max_seq_length: int | None = None,
        batch_size: int = 64,
        encoder_loader: Callable[[Path, Path | None], Encoder] | None = None,
    ) -> LoadedBundle: ...

    def job_checkpoints(self, job_id: str) -> JobCheckpoints: ...
