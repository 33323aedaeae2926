from pathlib import Path

import numpy as np
import pytest
import torch

from models.anchors import build_anchor_set, read_sentences, select_anchors
from models.encoder import Encoder

TEXTS = [f"sentence number {i} about topic {i % 7}" for i in range(40)]


def test_read_sentences_drops_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text("  first  \n\nsecond\n   \n")
    assert read_sentences(path) == ["first", "second"]


def test_first_m_or_seeded_sample() -> None:
    assert select_anchors(TEXTS, 5) == TEXTS[:5]
    sample = select_anchors(TEXTS, 5, seed=3)
    assert sample == select_anchors(TEXTS, 5, seed=3)
    assert sample != select_anchors(TEXTS, 5, seed=4)
    assert set(sample) <= set(TEXTS) and len(set(sample)) == 5
    assert select_anchors(TEXTS, None) == TEXTS
    assert select_anchors(TEXTS, 1000) == TEXTS


def test_one_anchor_is_refused() -> None:
    with pytest.raises(ValueError, match="two anchors"):
        select_anchors(TEXTS, 1)


def test_anchor_matrix_is_cached_and_reused(encoder: Encoder, tmp_path: Path) -> None:
    texts = TEXTS[:12]
    first = build_anchor_set(encoder, texts, cache_dir=tmp_path)
    files = list((tmp_path / "anchors").glob("*.npy"))
    assert len(files) == 1
    assert first.count == 12 and first.embeddings.shape == (12, encoder.dim)
    # Overwrite the cache with recognisable values: a second build must return them, which
    # proves it read the file instead of re-encoding.
    marker = np.full((12, encoder.dim), 0.5, dtype=np.float32)
    np.save(files[0], marker)
    second = build_anchor_set(encoder, texts, cache_dir=tmp_path)
    torch.testing.assert_close(second.embeddings, torch.from_numpy(marker))


def test_cache_key_depends_on_texts_and_count(encoder: Encoder, tmp_path: Path) -> None:
    build_anchor_set(encoder, TEXTS[:6], cache_dir=tmp_path)
    build_anchor_set(encoder, TEXTS[:7], cache_dir=tmp_path)
    build_anchor_set(encoder, TEXTS[1:7], cache_dir=tmp_path)
    assert len(list((tmp_path / "anchors").glob("*.npy"))) == 3


def test_a_corrupt_cache_file_is_rebuilt(encoder: Encoder, tmp_path: Path) -> None:
    texts = TEXTS[:5]
    build_anchor_set(encoder, texts, cache_dir=tmp_path)
    (path,) = (tmp_path / "anchors").glob("*.npy")
    np.save(path, np.full((5, encoder.dim), np.nan, dtype=np.float32))
    rebuilt = build_anchor_set(encoder, texts, cache_dir=tmp_path)
    assert torch.isfinite(rebuilt.embeddings).all()
    torch.testing.assert_close(rebuilt.embeddings, encoder.encode(texts))


def test_a_truncated_cache_file_is_rebuilt(encoder: Encoder, tmp_path: Path) -> None:
    texts = TEXTS[:4]
    build_anchor_set(encoder, texts, cache_dir=tmp_path)
    (path,) = (tmp_path / "anchors").glob("*.npy")
    path.write_bytes(path.read_bytes()[:100])
    rebuilt = build_anchor_set(encoder, texts, cache_dir=tmp_path)
    torch.testing.assert_close(rebuilt.embeddings, encoder.encode(texts))
