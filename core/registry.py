"""Versioned model bundles `<store>/bundles/<version>/`, written atomically, verified on load.

A bundle is everything one serving engine needs, so a replica can load it beside the live one
and swap a single reference (docs/design.md, "Hot swap, in one picture"):

    encoder/               the sentence-transformers directory (the student's weights)
    anchors.npy            (m, dim) unit embeddings of the anchor corpus C by that encoder
    anchor-texts.json      the m anchor sentences, in row order
    variants/<backend>/    the encoder exported for ONNX Runtime or OpenVINO, plus parity.json
                           (optional: core/backend_choice.py builds them for the settings)
    corpus.npy             (n, dim) document embeddings at `corpus.revision` (optional)
    corpus-ids.json        the n document numbers (search-index ids), in row order
    manifest.json          version, method, parent, metrics, dimensions, sha256 of every file

The file names, the manifest's schema, version names and the errors are in
core/bundle_manifest.py. ModelStore is what callers need of a store wherever its bundles live:
BundleStore keeps them in a directory that every process shares, core/s3_store.py in
S3-compatible object storage with a verified local copy (core/stores.py picks one). Writing
goes to a temporary directory inside the same `bundles/` folder, fsyncs every file and
directory, then renames it into place: a reader sees a whole bundle or none. Loading
re-hashes every file against the manifest, then core/bundle_loading.py checks every matrix's
dimension against the encoder's and smoke-encodes a few sentences, before the caller ever sees
the result.
"""

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from core.bundle_loading import check_matrix, load_checked
from core.bundle_manifest import (
    ANCHOR_TEXTS,
    ANCHORS,
    BUNDLES_DIR,
    CORPUS,
    CORPUS_IDS,
    ENCODER_DIR,
    JOBS_DIR,
    MANIFEST,
    REPORT_DIR,
    REPORT_JSON,
    VARIANTS_DIR,
    VERSION_PATTERN,
    AnchorInfo,
    BundleExistsError,
    BundleNotFoundError,
    CorpusInfo,
    CorruptBundleError,
    EncoderInfo,
    InvalidVersionError,
    Manifest,
    ReportNotFoundError,
    parse_manifest,
    validate_version,
)
from core.store_types import CorpusSnapshot, JobCheckpoints, LoadedBundle
from models.anchors import AnchorSet
from models.atomic import (
    atomic_write_json,
    atomic_write_text,
    fsync_directory,
    fsync_file,
    save_npy,
)
from models.checksums import sha256_directory, sha256_file
from models.encoder import Encoder

TMP_PREFIX = ".tmp-"


def _float32(matrix: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(matrix, dtype=np.float32)


def _bundle_files(root: Path) -> list[Path]:
    """Every file under `root` except the manifest; a symlink anywhere is corruption."""
    files = []
    for directory, subdirs, names in os.walk(root):
        for name in subdirs + names:
            if (Path(directory) / name).is_symlink():
                raise CorruptBundleError(f"{root.name}: {name} is a symlink; bundles hold files")
        files.extend(Path(directory) / name for name in names)
    return sorted(path for path in files if path.relative_to(root).as_posix() != MANIFEST)


class BundleStore:
    """The `bundles/` folder of a store directory shared by the worker and every replica."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.bundles = self.root / BUNDLES_DIR

    @property
    def location(self) -> str:
        return str(self.bundles)

    def job_dir(self, job_id: str) -> Path:
        """Where a retrain job keeps its run (resume checkpoints, text): in the store, which
        every worker shares, so a retry on another worker resumes instead of restarting."""
        return self.root / JOBS_DIR / f"retrain-{validate_version(job_id)}"

    def job_checkpoints(self, job_id: str) -> JobCheckpoints:
        """The job's run folder, already shared: nothing to upload or download."""
        return JobCheckpoints(self.job_dir(job_id))

    def path_for(self, version: str) -> Path:
        """The bundle directory of `version`, guaranteed to lie inside the store."""
        validate_version(version)
        path = self.bundles / version
        # A symlinked bundle directory could point anywhere: bundles are real directories.
        if path.is_symlink() or path.resolve().parent != self.bundles.resolve():
            raise InvalidVersionError(f"bundle {version!r} is a link or resolves outside the store")
        return path

    def exists(self, version: str) -> bool:
        return (self.path_for(version) / MANIFEST).is_file()

    def versions(self) -> list[str]:
        """Names of complete bundles (with a manifest), oldest first by creation time."""
        if not self.bundles.is_dir():
            return []
        found = []
        for entry in self.bundles.iterdir():
            named = VERSION_PATTERN.fullmatch(entry.name)
            if named and not entry.is_symlink() and (entry / MANIFEST).is_file():
                found.append(entry.name)
        return sorted(found, key=lambda v: ((self.bundles / v / MANIFEST).stat().st_mtime, v))

    def manifest(self, version: str) -> Manifest:
        """The parsed manifest, without hashing the files (cheap; for listings)."""
        path = self.path_for(version) / MANIFEST
        if not path.is_file():
            raise BundleNotFoundError(f"no bundle named {version!r} in {self.bundles}")
        return parse_manifest(version, path.read_bytes())

    def publish(self, version: str, **parts: Any) -> Manifest:
        """ModelStore's name for `write`: the bundle, complete, or nothing."""
        return self.write(version, **parts)

    def fetch(self, version: str) -> Path:
        """The bundle's folder, after every file has been checked against the manifest."""
        self.verify(version)
        return self.path_for(version)

    def write(
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
    ) -> Manifest:
        """Write a complete bundle for `version`, or nothing at all.

        `report` is a folder holding REPORT_JSON and the charts it names; `variants` one of
        exported encoder backends (core/backend_choice.build_variants), so that replicas do
        not export at start. Both are checksummed like every other file.
        """
        final = self.path_for(version)
        if final.exists():
            raise BundleExistsError(f"bundle {version!r} already exists")
        if anchors.encoder_checksum != encoder.checksum:
            raise ValueError("the anchor embeddings were not made by this encoder")
        anchor_matrix = anchors.embeddings.detach().float().cpu().numpy()  # (m, dim)
        check_matrix(ANCHORS, anchor_matrix, anchors.count, encoder.dim, version)
        if corpus is not None:
            check_matrix(CORPUS, corpus.embeddings, len(corpus.ids), encoder.dim, version)

        self.bundles.mkdir(parents=True, exist_ok=True)
        tmp = self.bundles / f"{TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(encoder.path, tmp / ENCODER_DIR, symlinks=False)
            save_npy(tmp / ANCHORS, _float32(anchor_matrix))
            atomic_write_json(tmp / ANCHOR_TEXTS, anchors.texts, indent=2)
            if corpus is not None:
                save_npy(tmp / CORPUS, _float32(corpus.embeddings))
                atomic_write_json(tmp / CORPUS_IDS, corpus.ids, indent=2)
            if report is not None:
                shutil.copytree(report, tmp / REPORT_DIR, symlinks=False)
            if variants is not None:
                shutil.copytree(variants, tmp / VARIANTS_DIR, symlinks=False)
            files = _bundle_files(tmp)
            manifest = Manifest(
                version=version,
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                method=method,
                parent=parent,
                metrics=metrics or {},
                encoder=EncoderInfo(
                    name=encoder.name,
                    dim=encoder.dim,
                    checksum=sha256_directory(tmp / ENCODER_DIR),
                ),
                anchors=AnchorInfo(count=anchors.count, texts_sha256=anchors.texts_checksum),
                corpus=None
                if corpus is None
                else CorpusInfo(revision=corpus.revision, count=len(corpus.ids)),
                files={path.relative_to(tmp).as_posix(): sha256_file(path) for path in files},
            )
            atomic_write_text(tmp / MANIFEST, manifest.model_dump_json(indent=2))
            # The copied trees (encoder/, report/) are not on disk yet; the files written
            # atomically above are, and a second fsync of those costs nothing.
            for path in files:
                fsync_file(path)
            for directory, _, _ in os.walk(tmp):
                fsync_directory(Path(directory))
            try:
                os.rename(tmp, final)
            except OSError as error:
                raise BundleExistsError(f"bundle {version!r} appeared meanwhile") from error
            fsync_directory(self.bundles)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return manifest

    def report(self, version: str) -> tuple[dict[str, Any], Path]:
        """The diagnostics stored with `version`, and the folder holding their charts."""
        self.manifest(version)
        folder = self.path_for(version) / REPORT_DIR
        path = folder / REPORT_JSON
        if not path.is_file():
            raise ReportNotFoundError(f"bundle {version!r} has no diagnostics report")
        return json.loads(path.read_text(encoding="utf-8")), folder

    def verify(self, version: str) -> Manifest:
        """The manifest, after every file has been re-hashed and matched against it."""
        manifest = self.manifest(version)
        root = self.path_for(version)
        present = {path.relative_to(root).as_posix(): path for path in _bundle_files(root)}
        missing = sorted(set(manifest.files) - set(present))
        if missing:
            raise CorruptBundleError(f"{version}: missing files {missing}")
        extra = sorted(set(present) - set(manifest.files))
        if extra:
            raise CorruptBundleError(f"{version}: files not in the manifest {extra}")
        for name, expected in manifest.files.items():
            if sha256_file(present[name]) != expected:
                raise CorruptBundleError(f"{version}: {name} does not match its sha256")
        return manifest

    def load(
        self,
        version: str,
        *,
        device: str | None = None,
        max_seq_length: int | None = None,
        batch_size: int = 64,
        encoder_loader: Callable[[Path, Path | None], Encoder] | None = None,
    ) -> LoadedBundle:
        """Verify, load and smoke-test a bundle; raises CorruptBundleError on any doubt.

        `encoder_loader(encoder_dir, variants_dir)` loads the verified encoder (with a
        backend and its prebuilt variant); without one, torch fp32 with the arguments above.
        """
        manifest = self.verify(version)
        return load_checked(
            self.path_for(version),
            manifest,
            device=device,
            max_seq_length=max_seq_length,
            batch_size=batch_size,
            encoder_loader=encoder_loader,
        )

    def remove_stale_temporaries(self, older_than_s: float = 3600.0) -> list[Path]:
        """Delete half-written bundles that a crashed writer left; returns what it removed."""
        if not self.bundles.is_dir():
            return []
        cutoff = time.time() - older_than_s
        removed = []
        for entry in self.bundles.iterdir():
            if entry.name.startswith(TMP_PREFIX) and entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        return removed
