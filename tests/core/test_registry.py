"""Bundles: atomic write, verified load, and refusal of corrupt bundles and unsafe names."""

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from core.bundle_manifest import (
    ANCHORS,
    CORPUS,
    ENCODER_DIR,
    MANIFEST,
    REPORT_DIR,
    REPORT_JSON,
    BundleExistsError,
    CorruptBundleError,
    InvalidVersionError,
    ReportNotFoundError,
    validate_version,
)
from core.registry import BundleStore
from core.store_types import CorpusSnapshot
from models.anchors import AnchorSet
from models.checksums import sha256_directory, sha256_file
from models.encoder import Encoder

pytestmark = pytest.mark.slow

CORPUS_TEXTS = ["first document", "a second, longer document about cats", "third"]


@pytest.fixture(scope="module")
def written(
    tmp_path_factory: pytest.TempPathFactory, encoder: Encoder, anchors: AnchorSet
) -> BundleStore:
    store = BundleStore(tmp_path_factory.mktemp("store"))
    corpus = CorpusSnapshot(
        revision=17,
        ids=[4, 9, 11],
        embeddings=encoder.encode(CORPUS_TEXTS).cpu().numpy(),
    )
    store.write(
        "v1",
        encoder=encoder,
        anchors=anchors,
        corpus=corpus,
        method="simcse",
        parent="base",
        metrics={"blend": {"avg": 80.5}},
    )
    return store


def _copy_store(store: BundleStore, tmp_path: Path) -> BundleStore:
    shutil.copytree(store.root, tmp_path / "store")
    return BundleStore(tmp_path / "store")


def _rehash(store: BundleStore, version: str, relative: str) -> None:
    """Make the manifest agree with an edited file, as a buggy (not a torn) writer would."""
    path = store.path_for(version) / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["files"][relative] = sha256_file(store.path_for(version) / relative)
    path.write_text(json.dumps(manifest))


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime)
        for p in sorted(root.rglob("*"))
    }


def test_round_trip_keeps_every_part(written: BundleStore, encoder: Encoder, anchors: AnchorSet):
    loaded = written.load("v1", device="cpu")
    manifest = loaded.manifest
    assert (manifest.version, manifest.method, manifest.parent) == ("v1", "simcse", "base")
    assert manifest.metrics == {"blend": {"avg": 80.5}}
    assert manifest.encoder.dim == encoder.dim
    assert manifest.encoder.checksum == encoder.checksum
    assert loaded.encoder.name == encoder.name
    assert loaded.anchors.texts == anchors.texts
    assert torch.equal(loaded.anchors.embeddings.cpu(), anchors.embeddings.cpu())
    assert loaded.corpus is not None
    assert loaded.corpus.revision == 17
    assert loaded.corpus.ids == [4, 9, 11]
    again = loaded.encoder.encode(CORPUS_TEXTS).cpu().numpy()
    np.testing.assert_allclose(loaded.corpus.embeddings, again, atol=1e-5)
    assert written.versions() == ["v1"]
    # Every file is in the manifest, and no temporary directory is left behind.
    root = written.path_for("v1")
    files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert files - {MANIFEST} == set(manifest.files)
    assert [p.name for p in written.bundles.iterdir()] == ["v1"]


def test_existing_version_is_not_overwritten(
    written: BundleStore, encoder: Encoder, anchors: AnchorSet
):
    before = sha256_file(written.path_for("v1") / MANIFEST)
    with pytest.raises(BundleExistsError):
        written.write("v1", encoder=encoder, anchors=anchors)
    assert sha256_file(written.path_for("v1") / MANIFEST) == before


def test_failed_write_leaves_nothing(tmp_path: Path, encoder: Encoder, anchors: AnchorSet):
    store = BundleStore(tmp_path)
    broken = Encoder(
        model=encoder.model,
        path=tmp_path / "no-such-checkpoint",
        name=encoder.name,
        checksum=encoder.checksum,
        device=encoder.device,
    )
    with pytest.raises(FileNotFoundError):
        store.write("v2", encoder=broken, anchors=anchors)
    assert list(store.bundles.iterdir()) == []


def test_truncated_weights_are_refused(written: BundleStore, tmp_path: Path):
    store = _copy_store(written, tmp_path)
    weights = store.path_for("v1") / ENCODER_DIR / "model.safetensors"
    with weights.open("r+b") as handle:
        handle.truncate(weights.stat().st_size // 2)
    with pytest.raises(CorruptBundleError, match=r"model\.safetensors does not match its sha256"):
        store.load("v1", device="cpu")


def test_wrong_anchor_dimension_is_refused(written: BundleStore, tmp_path: Path):
    store = _copy_store(written, tmp_path)
    count = store.manifest("v1").anchors.count
    np.save(store.path_for("v1") / ANCHORS, np.ones((count, 128), dtype=np.float32))
    _rehash(store, "v1", ANCHORS)
    with pytest.raises(CorruptBundleError, match="encoder's dimension is 384"):
        store.load("v1", device="cpu")


def test_wrong_corpus_dimension_is_refused(written: BundleStore, tmp_path: Path):
    store = _copy_store(written, tmp_path)
    np.save(store.path_for("v1") / CORPUS, np.ones((3, 768), dtype=np.float32))
    _rehash(store, "v1", CORPUS)
    with pytest.raises(CorruptBundleError, match=r"corpus\.npy has shape"):
        store.load("v1", device="cpu")


def test_non_finite_weights_fail_the_smoke_encode(written: BundleStore, tmp_path: Path):
    store = _copy_store(written, tmp_path)
    relative = f"{ENCODER_DIR}/model.safetensors"
    weights = store.path_for("v1") / relative
    tensors = load_file(weights)
    tensors = {
        name: torch.full_like(t, float("nan")) if t.is_floating_point() else t
        for name, t in tensors.items()
    }
    save_file(tensors, weights)
    _rehash(store, "v1", relative)
    manifest_path = store.path_for("v1") / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["encoder"]["checksum"] = sha256_directory(store.path_for("v1") / ENCODER_DIR)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptBundleError, match="smoke encode is not finite"):
        store.load("v1", device="cpu")


def test_unlisted_file_and_symlink_inside_a_bundle_are_refused(
    written: BundleStore, tmp_path: Path
):
    store = _copy_store(written, tmp_path)
    (store.path_for("v1") / "extra.bin").write_bytes(b"x")
    with pytest.raises(CorruptBundleError, match="not in the manifest"):
        store.verify("v1")
    (store.path_for("v1") / "extra.bin").unlink()
    (store.path_for("v1") / "link").symlink_to("/etc/passwd")
    with pytest.raises(CorruptBundleError, match="symlink"):
        store.verify("v1")


BAD_NAMES = [
    "../outside",
    "..",
    ".",
    "",
    "/etc",
    "/tmp/evil",
    "a/b",
    "a\\b",
    ".hidden",
    "-rf",
    "v1\x00",
    "name with space",
    "x" * 101,
    "%2e%2e",
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_unsafe_version_names_are_refused_and_touch_nothing(
    name: str, tmp_path: Path, encoder: Encoder, anchors: AnchorSet
):
    (tmp_path / "store").mkdir()
    store = BundleStore(tmp_path / "store")
    before = _tree(tmp_path)
    with pytest.raises(InvalidVersionError):
        validate_version(name)
    with pytest.raises(InvalidVersionError):
        store.write(name, encoder=encoder, anchors=anchors)
    with pytest.raises(InvalidVersionError):
        store.load(name, device="cpu")
    assert _tree(tmp_path) == before


def test_symlinked_bundle_leaving_the_store_is_refused(written: BundleStore, tmp_path: Path):
    store = _copy_store(written, tmp_path)
    outside = tmp_path / "outside"
    shutil.copytree(store.path_for("v1"), outside)
    os.symlink(outside, store.bundles / "escape")
    with pytest.raises(InvalidVersionError, match="link or resolves outside"):
        store.load("escape", device="cpu")
    assert store.versions() == ["v1"]


def test_stale_temporaries_are_removed_fresh_ones_kept(tmp_path: Path):
    store = BundleStore(tmp_path)
    stale = store.bundles / ".tmp-v9-deadbeef"
    fresh = store.bundles / ".tmp-v10-cafebabe"
    for directory in (stale, fresh):
        (directory / ENCODER_DIR).mkdir(parents=True)
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    assert store.remove_stale_temporaries(older_than_s=3600) == [stale]
    assert not stale.exists() and fresh.exists()
    assert store.versions() == []


def test_a_report_folder_travels_with_the_bundle_and_is_checksummed(
    tmp_path: Path, encoder: Encoder, anchors: AnchorSet
) -> None:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / REPORT_JSON).write_text(json.dumps({"charts": {"heros": "heros.png"}, "x": 1}))
    (folder / "heros.png").write_bytes(b"\x89PNG fake chart")
    store = BundleStore(tmp_path / "store")
    manifest = store.write("r1", encoder=encoder, anchors=anchors, report=folder)
    assert f"{REPORT_DIR}/{REPORT_JSON}" in manifest.files
    assert f"{REPORT_DIR}/heros.png" in manifest.files
    data, stored = store.report("r1")
    assert data == {"charts": {"heros": "heros.png"}, "x": 1}
    assert (stored / "heros.png").read_bytes() == b"\x89PNG fake chart"
    (stored / "heros.png").write_bytes(b"tampered")
    with pytest.raises(CorruptBundleError):
        store.verify("r1")


def test_a_bundle_without_report_says_so(written: BundleStore) -> None:
    with pytest.raises(ReportNotFoundError, match="no diagnostics report"):
        written.report("v1")
