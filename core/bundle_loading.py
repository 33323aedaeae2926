"""Loading a verified bundle (core/registry.py) into what a serving engine needs, checking it
on the way: the encoder must load and match the manifest's checksum and dimension, encode a few
sentences to finite vectors, and every matrix must have the rows and dimension the manifest
promises, all finite. Any doubt is a CorruptBundleError, before a caller sees the bundle.
"""

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from core.bundle_manifest import (
    ANCHOR_TEXTS,
    ANCHORS,
    CORPUS,
    CORPUS_IDS,
    ENCODER_DIR,
    VARIANTS_DIR,
    CorruptBundleError,
    Manifest,
)
from core.store_types import CorpusSnapshot, LoadedBundle
from models.anchors import AnchorSet
from models.checksums import sha256_texts
from models.encoder import Encoder, load_encoder

SMOKE_TEXTS = (
    "A man is playing a guitar.",
    "The stock market fell sharply on Monday.",
    "Zwei Hunde spielen im Schnee.",
)


def check_matrix(name: str, matrix: np.ndarray, rows: int, dim: int, where: str) -> None:
    if matrix.ndim != 2 or matrix.shape[1] != dim:
        raise CorruptBundleError(
            f"{where}: {name} has shape {matrix.shape}, the encoder's dimension is {dim}"
        )
    if matrix.shape[0] != rows:
        raise CorruptBundleError(f"{where}: {name} has {matrix.shape[0]} rows, expected {rows}")
    if not np.isfinite(matrix).all():
        raise CorruptBundleError(f"{where}: {name} holds non-finite values")


def load_checked(
    root: Path,
    manifest: Manifest,
    *,
    device: str | None = None,
    max_seq_length: int | None = None,
    batch_size: int = 64,
    encoder_loader: Callable[[Path, Path | None], Encoder] | None = None,
) -> LoadedBundle:
    """The bundle in `root`, whose files already match `manifest`, loaded and smoke-tested.

    `encoder_loader(encoder_dir, variants_dir)` loads the encoder (with a backend and its
    prebuilt variant); without one, torch fp32 with the arguments above.
    """
    where = manifest.version
    variants = root / VARIANTS_DIR if (root / VARIANTS_DIR).is_dir() else None
    try:
        if encoder_loader is not None:
            encoder = encoder_loader(root / ENCODER_DIR, variants)
        else:
            encoder = load_encoder(
                root / ENCODER_DIR,
                device=device,
                max_seq_length=max_seq_length,
                batch_size=batch_size,
            )
    except Exception as error:
        raise CorruptBundleError(f"{where}: the encoder does not load: {error}") from error
    encoder.name = manifest.encoder.name
    if encoder.checksum != manifest.encoder.checksum:
        raise CorruptBundleError(f"{where}: encoder checksum disagrees with the manifest")
    if encoder.dim != manifest.encoder.dim:
        raise CorruptBundleError(
            f"{where}: encoder dimension {encoder.dim}, manifest says {manifest.encoder.dim}"
        )
    smoke = encoder.encode(list(SMOKE_TEXTS))  # (3, dim)
    if smoke.shape != (len(SMOKE_TEXTS), encoder.dim) or not torch.isfinite(smoke).all():
        raise CorruptBundleError(f"{where}: the encoder's smoke encode is not finite")

    anchor_matrix = np.load(root / ANCHORS, allow_pickle=False)  # (m, dim)
    check_matrix(ANCHORS, anchor_matrix, manifest.anchors.count, encoder.dim, where)
    texts = json.loads((root / ANCHOR_TEXTS).read_text(encoding="utf-8"))
    if len(texts) != manifest.anchors.count or sha256_texts(texts) != (
        manifest.anchors.texts_sha256
    ):
        raise CorruptBundleError(f"{where}: anchor texts disagree with the manifest")
    anchors = AnchorSet(
        texts=texts,
        embeddings=torch.from_numpy(anchor_matrix).to(encoder.device),
        texts_checksum=manifest.anchors.texts_sha256,
        encoder_checksum=encoder.checksum,
    )

    corpus = None
    if manifest.corpus is not None:
        matrix = np.load(root / CORPUS, allow_pickle=False)  # (n, dim)
        ids = json.loads((root / CORPUS_IDS).read_text(encoding="utf-8"))
        check_matrix(CORPUS, matrix, manifest.corpus.count, encoder.dim, where)
        if len(ids) != manifest.corpus.count or not all(type(i) is int for i in ids):
            raise CorruptBundleError(f"{where}: corpus ids disagree with the manifest")
        corpus = CorpusSnapshot(manifest.corpus.revision, ids, matrix)
    return LoadedBundle(manifest=manifest, encoder=encoder, anchors=anchors, corpus=corpus)
