"""The promotion gate: Eq. 7 dev average against the active version's, or `force`."""

import json
from pathlib import Path

import pytest

from core.bundle_manifest import MANIFEST
from core.registry import BundleStore
from worker.retrain import gate

SETUP = {"anchors": 16, "lambda_inf": 0.1, "anchor_corpus": "wiki.txt"}


def _recorded(store: BundleStore, version: str, score: float, setup: dict) -> None:
    """A bundle directory holding only its manifest: all the gate reads."""
    path = store.bundles / version
    path.mkdir(parents=True)
    manifest = {
        "version": version,
        "created_at": "2025-01-01T00:00:00+00:00",
        "method": "simcse",
        "parent": None,
        "metrics": {"dev": {"blend": {"avg": score}}, "dev_setup": setup},
        "encoder": {"name": "m", "dim": 384, "checksum": "0"},
        "anchors": {"count": 16, "texts_sha256": "0"},
        "files": {},
    }
    (path / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("candidate", "force", "promote"),
    [(80.0, False, True), (80.5, False, True), (79.9, False, False), (79.9, True, True)],
)
def test_against_the_parent_measured_in_the_same_job(tmp_path: Path, candidate, force, promote):
    decision = gate(
        candidate,
        active="base-1",
        parent="base-1",
        parent_score=80.0,
        setup=SETUP,
        store=BundleStore(tmp_path),
        force=force,
    )
    assert decision["promote"] is promote
    assert decision["passed"] is (candidate >= 80.0)
    assert (decision["active_score"], decision["metric"]) == (80.0, "blend.avg")


def test_against_another_active_version_uses_its_recorded_metric(tmp_path: Path):
    store = BundleStore(tmp_path)
    _recorded(store, "v9", 82.0, SETUP)
    decision = gate(
        81.0,
        active="v9",
        parent="base-1",
        parent_score=80.0,
        setup=SETUP,
        store=store,
        force=False,
    )
    assert (decision["active_score"], decision["promote"]) == (82.0, False)


def test_a_metric_from_another_setup_is_not_comparable(tmp_path: Path):
    store = BundleStore(tmp_path)
    _recorded(store, "v9", 10.0, SETUP | {"anchors": 10_000})
    kwargs = {"active": "v9", "parent": "base-1", "parent_score": 80.0, "setup": SETUP}
    refused = gate(99.0, store=store, force=False, **kwargs)
    assert (refused["active_score"], refused["promote"]) == (None, False)
    assert gate(99.0, store=store, force=True, **kwargs)["promote"] is True
