"""Shared fixtures: the real default encoder and a small real anchor set, loaded once."""

from pathlib import Path

import pytest

from core.settings import DATA_DIR, Settings
from models.anchors import AnchorSet, load_anchor_set
from models.encoder import Encoder, load_encoder

TEST_ANCHORS = 512  # enough for stable rank similarities, a few seconds to encode


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    return load_encoder(device="cpu")


@pytest.fixture(scope="session")
def anchor_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def exported_variants(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export cache for the default checkpoint's ONNX and OpenVINO variants, shared by the
    tests that load them: all five exports take about a minute on a 2-core Zen 3."""
    return tmp_path_factory.mktemp("encoder-variants")


@pytest.fixture(scope="session")
def anchors(encoder: Encoder, anchor_cache: Path) -> AnchorSet:
    return load_anchor_set(
        encoder, DATA_DIR / "corpus" / "wiki-sentences.txt", TEST_ANCHORS, cache_dir=anchor_cache
    )


def served(anchors: AnchorSet) -> AnchorSet:
    """The anchors as a test's API holds them (RANKSERVE_ANCHOR_DTYPE), for references computed
    from the definitions: Eq. 7 is exact against the matrix it is served with."""
    return anchors.stored_as(Settings().anchor_dtype)
