"""Batch schedule and teacher signals: contents checked against scipy, computed once, cached."""

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from core.settings import DATA_DIR
from models.encoder import Encoder
from models.training.signals import batch_schedule, cosine_signals, rank_signals

TEXTS = [
    "a man is playing a guitar .",
    "a man plays the guitar .",
    "a woman is slicing an onion .",
    "someone is cutting vegetables .",
    "stocks fell sharply on monday .",
    "the market dropped at the open .",
    "a dog runs through the snow .",
    "kids are playing soccer .",
    "two boys are playing football .",
]
CORPUS = DATA_DIR / "corpus" / "wiki-sentences.txt"


def test_schedule_is_seeded_disjoint_per_epoch_and_drops_the_partial_batch():
    schedule = batch_schedule(10, 4, epochs=2, seed=1)
    assert schedule.shape == (4, 4)  # 2 full batches per epoch
    for epoch in schedule.view(2, 8, -1).squeeze(-1):
        assert len(set(epoch.tolist())) == 8
    assert torch.equal(schedule, batch_schedule(10, 4, epochs=2, seed=1))
    assert not torch.equal(schedule, batch_schedule(10, 4, epochs=2, seed=2))
    with pytest.raises(ValueError):
        batch_schedule(3, 4, epochs=1, seed=0)


@pytest.mark.slow
def test_cosine_signals_are_the_teachers_in_batch_cosines(encoder: Encoder, tmp_path: Path):
    schedule = batch_schedule(len(TEXTS), 4, epochs=1, seed=0)
    signals = cosine_signals(encoder, TEXTS, schedule, tmp_path)
    assert signals.shape == (2, 4, 4)
    embeddings = encoder.encode(TEXTS).cpu()
    for step, rows in enumerate(schedule):
        expected = embeddings[rows] @ embeddings[rows].T
        torch.testing.assert_close(signals[step], expected, atol=1e-5, rtol=0)
    files = list((tmp_path / "teacher-signals").glob("*.pt"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    again = cosine_signals(encoder, TEXTS, schedule, tmp_path)
    assert torch.equal(again, signals)
    assert files[0].stat().st_mtime_ns == stamp  # read back, not recomputed


@pytest.mark.slow
def test_rank_signals_are_spearman_of_anchor_cosine_profiles(encoder: Encoder, tmp_path: Path):
    schedule = batch_schedule(len(TEXTS), 3, epochs=1, seed=0)
    signals = rank_signals(encoder, TEXTS, schedule, tmp_path, CORPUS, anchor_count=64)
    assert signals.shape == (3, 3, 3)
    anchors = encoder.encode(CORPUS.read_text().splitlines()[:64]).cpu().numpy()
    embeddings = encoder.encode(TEXTS).cpu().numpy()
    rows = schedule[1].tolist()
    profiles = embeddings[rows] @ anchors.T  # (3, 64)
    expected = spearmanr(profiles, axis=1).statistic  # (3, 3)
    np.testing.assert_allclose(signals[1].numpy(), expected, atol=1e-4)
