"""What a model bundle is on disk: its file names, its manifest, its version names, its errors.

core/registry.py writes, verifies and loads bundles (BundleStore); this module holds what a
caller needs without touching a bundle: the layout (`<store>/bundles/<version>/`), the
manifest's schema and its parsing (one rule for the directory and the S3 store), the rule for
version and file names, and the errors the store raises.
"""

import re
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

BUNDLES_DIR = "bundles"
JOBS_DIR = "jobs"
MANIFEST = "manifest.json"
ENCODER_DIR = "encoder"
ANCHORS = "anchors.npy"
ANCHOR_TEXTS = "anchor-texts.json"
CORPUS = "corpus.npy"
CORPUS_IDS = "corpus-ids.json"
REPORT_DIR = "report"  # diagnostics of the version: report.json plus its PNG charts
REPORT_JSON = "report.json"
VARIANTS_DIR = "variants"  # exported encoder backends and their parity (core/backend_choice.py)
FORMAT = 1

# Letters, digits, dot, dash, underscore; a letter or digit first, so "." and ".." and hidden
# names are impossible and the name is always one path component.
VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class BundleError(Exception):
    """Base of every registry error; the message says which bundle and what is wrong."""


class InvalidVersionError(BundleError, ValueError):
    """A version name that could leave the store or is not one safe path component."""


class BundleNotFoundError(BundleError, FileNotFoundError):
    pass


class BundleExistsError(BundleError, FileExistsError):
    pass


class ReportNotFoundError(BundleError, FileNotFoundError):
    """The bundle exists but carries no diagnostics report."""


class CorruptBundleError(BundleError):
    """Checksums, dimensions or the smoke encode disagree with the manifest: never serve it."""


class BundleStoreUnavailableError(BundleError):
    """The store did not answer (object storage down, credentials refused): nothing is known
    to be wrong with the bundle, so the same call may succeed later."""


def validate_version(version: str) -> str:
    """`version` unchanged when it is a safe bundle name, else InvalidVersionError."""
    if not isinstance(version, str) or not VERSION_PATTERN.fullmatch(version):
        raise InvalidVersionError(
            f"invalid version name {version!r}: use 1-100 letters, digits, '.', '-', '_', "
            "starting with a letter or digit"
        )
    return version


class EncoderInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    dim: int = Field(ge=1)
    checksum: str  # sha256_directory of encoder/, the key of every embedding cache


class AnchorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(ge=2)
    texts_sha256: str


class CorpusInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    revision: int = Field(ge=0)  # the document store's revision the embeddings reflect
    count: int = Field(ge=0)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: int = FORMAT
    version: str
    created_at: str
    method: str | None  # training method, None for an imported base checkpoint
    parent: str | None  # the version it was trained from
    metrics: dict[str, Any] = Field(default_factory=dict)  # dev metrics, promotion-gate result
    encoder: EncoderInfo
    anchors: AnchorInfo
    corpus: CorpusInfo | None = None
    files: dict[str, str]  # relative POSIX path -> sha256, every file but the manifest


def parse_manifest(version: str, raw: bytes) -> Manifest:
    """The manifest of bundle `version` from its JSON; CorruptBundleError if it is not one."""
    try:
        manifest = Manifest.model_validate_json(raw)
    except ValidationError as error:
        raise CorruptBundleError(f"{version}: unreadable manifest: {error}") from None
    if manifest.version != version:
        raise CorruptBundleError(f"{version}: manifest names version {manifest.version!r}")
    return manifest


def safe_file_name(version: str, name: str) -> PurePosixPath:
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
