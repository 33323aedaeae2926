import math
from pathlib import Path

import numpy as np
import pytest
import torch

from core.settings import DATA_DIR
from models.anchors import AnchorSet
from models.encoder import Encoder
from models.evaluation.heros import (
    COLUMN_SUBSETS,
    HerosData,
    HerosFormatError,
    Subset,
    baseline_halves,
    cross_half_mean,
    evaluate_heros,
    heros_from_vectors,
    normalise,
    read_heros,
    write_heros,
)
from models.evaluation.sts import Scoring

HEADER = "Original\tSynonym\tAntonym\tNegation\tRandom\tTypo\tNegation\n"
SAMPLE = DATA_DIR / "heros-sample.tsv"
NEGATIONS = {"not", "n't", "cannot"}


def test_normalise_by_hand() -> None:
    # (0.96 - 0.7) / 0.3 = 0.8667; a pair as similar as the baseline is 0; identical is 1.
    result = normalise(torch.tensor([0.96, 0.7, 1.0]), 0.7)
    assert result.tolist() == pytest.approx([0.26 / 0.3, 0.0, 1.0], abs=1e-6)
    with pytest.raises(ValueError, match="baseline"):
        normalise(torch.tensor([0.5]), 1.0)


def test_baseline_uses_first_and_last_half_and_skips_the_middle_of_an_odd_count() -> None:
    assert baseline_halves(1000) == (slice(0, 500), slice(500, 1000))
    assert baseline_halves(5) == (slice(0, 2), slice(3, 5))
    # first half (1,0),(0,1); second half (.6,.8),(.8,.6): dots .6 .8 .8 .6 -> mean 0.7
    even = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]])
    assert cross_half_mean(even) == pytest.approx(0.7)
    odd = torch.cat([even[:2], torch.tensor([[-1.0, 0.0]]), even[2:]])
    assert cross_half_mean(odd) == pytest.approx(0.7)


def test_subset_means_under_each_scoring_by_hand() -> None:
    # Rows 0-3 are the originals, row 4 a Typo variant of original 0, row 5 a Negation (Main)
    # variant of original 1.
    embeddings = torch.tensor(
        [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6], [0.96, 0.28], [0.28, 0.96]]
    )
    ranks = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    baseline, raw, normalised = heros_from_vectors(
        embeddings,
        ranks,
        torch.arange(4),
        {
            Subset.TYPO: (torch.tensor([0]), torch.tensor([4])),
            Subset.NEGATION_MAIN: (torch.tensor([1]), torch.tensor([5])),
        },
        lambda_inf=0.1,
    )
    # cosine baseline 0.7; rank baseline (0 + 1 + 1 + 0) / 4 = 0.5; blend .1*.5 + .9*.7 = 0.68
    assert baseline[Scoring.COSINE] == pytest.approx(0.7)
    assert baseline[Scoring.RANK] == pytest.approx(0.5)
    assert baseline[Scoring.BLEND] == pytest.approx(0.68)
    # Typo: cos .96 -> .26/.3; rank .8 -> .3/.5 = .6; blend .1*.8 + .9*.96 = .944 -> .264/.32
    assert raw[Scoring.BLEND][Subset.TYPO] == pytest.approx(0.944)
    assert normalised[Scoring.COSINE][Subset.TYPO] == pytest.approx(0.26 / 0.3)
    assert normalised[Scoring.RANK][Subset.TYPO] == pytest.approx(0.6)
    assert normalised[Scoring.BLEND][Subset.TYPO] == pytest.approx(0.264 / 0.32)
    # Negation: cos .96, rank 1.0 -> rank normalised 1; blend .1 + .864 = .964 -> .284/.32
    assert normalised[Scoring.RANK][Subset.NEGATION_MAIN] == pytest.approx(1.0)
    assert normalised[Scoring.BLEND][Subset.NEGATION_MAIN] == pytest.approx(0.284 / 0.32)


def test_read_maps_the_two_negation_columns_and_keeps_empty_cells(tmp_path: Path) -> None:
    path = tmp_path / "h.tsv"
    path.write_text(
        HEADER
        + "o1\tsyn1\tant1\tneg1\trand1\ttypo1\tnegant1\n"
        + "o2\t\tant2\tneg2\t\ttypo2\tnegant2\n"
        + "\n"
    )
    data = read_heros(path)
    assert data.originals == ["o1", "o2"]
    assert data.variants[Subset.NEGATION_MAIN] == ["neg1", "neg2"]
    assert data.variants[Subset.NEGATION_ANTONYM] == ["negant1", "negant2"]
    assert data.variants[Subset.SYNONYM] == ["syn1", None]
    assert data.pairs(Subset.RANDOM) == [(0, "rand1")]


def test_read_accepts_a_file_without_header_and_a_pandas_header(tmp_path: Path) -> None:
    rows = "o1\ts\ta\tn\tr\tt\tna\no2\ts2\ta2\tn2\tr2\tt2\tna2\n"
    bare, pandas = tmp_path / "bare.tsv", tmp_path / "pandas.tsv"
    bare.write_text(rows)
    pandas.write_text("Original\tSynonym\tAntonym\tNegation\tRandom\tTypo\tNegation.1\n" + rows)
    assert read_heros(bare) == read_heros(pandas)
    assert len(read_heros(bare).originals) == 2


def test_malformed_files_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(HEADER + "o1\ts\ta\tn\tr\tt\tna\no2\tonly three\tcolumns\n")
    with pytest.raises(HerosFormatError, match=r"bad.tsv:3: expected 7 tab-separated columns"):
        read_heros(path)
    path.write_text(HEADER + "o1\t\t\t\t\t\t\no2\t\t\t\t\t\t\n")
    with pytest.raises(HerosFormatError, match="every variant column is empty"):
        read_heros(path)
    path.write_text(HEADER + "o1\ts\ta\tn\tr\tt\tna\n")
    with pytest.raises(HerosFormatError, match="at least two rows"):
        read_heros(path)
    with pytest.raises(HerosFormatError, match="file not found"):
        read_heros(tmp_path / "absent.tsv")


def test_write_then_read_round_trips_quotes_and_missing_subsets(tmp_path: Path) -> None:
    data = HerosData(
        originals=['He said "stop" twice.', "Plain one."],
        variants={Subset.TYPO: ['He siad "stop" twice.', None]},
    )
    path = tmp_path / "out.tsv"
    write_heros(path, data)
    assert path.read_text().splitlines()[0] == HEADER.rstrip("\n")
    assert read_heros(path) == data


def test_shipped_sample_is_complete_and_each_variant_is_a_minimal_pair() -> None:
    data = read_heros(SAMPLE)
    assert 40 <= len(data.originals) <= 60
    assert set(data.variants) == set(COLUMN_SUBSETS)
    for i, original in enumerate(data.originals):
        words = original.split()
        assert 8 < len(words) < 25, original  # HEROS 2.2.1's length window
        typo = data.variants[Subset.TYPO][i].split()
        assert len(typo) == len(words)
        assert sum(a != b for a, b in zip(words, typo, strict=True)) == 1, original
        for subset in (Subset.NEGATION_MAIN, Subset.NEGATION_ANTONYM):
            variant = data.variants[subset][i]
            before = sum(w.strip(".,").lower().endswith(tuple(NEGATIONS)) for w in words)
            after = sum(w.strip(".,").lower().endswith(tuple(NEGATIONS)) for w in variant.split())
            assert abs(after - before) == 1, (subset, original, variant)
        for subset in COLUMN_SUBSETS:
            assert data.variants[subset][i] != original


@pytest.mark.slow
def test_sample_scores_match_a_direct_numpy_computation(
    encoder: Encoder, anchors: AnchorSet
) -> None:
    data = read_heros(SAMPLE)
    result = evaluate_heros(encoder, anchors, data, lambda_inf=0.1)
    half = len(data.originals) // 2
    assert result.baseline_half == half
    assert result.notes and f"{half} x last {half}" in result.notes[0]
    assert result.pairs == {subset: len(data.originals) for subset in data.subsets}

    originals = encoder.encode(data.originals).numpy()
    synonyms = encoder.encode(data.variants[Subset.SYNONYM]).numpy()
    cos_avg = float((originals[:half] @ originals[-half:].T).mean())
    direct = float(np.mean(((originals * synonyms).sum(1) - cos_avg) / (1 - cos_avg)))
    assert result.baseline[Scoring.COSINE] == pytest.approx(cos_avg, abs=1e-5)
    assert result.mean_normalised[Scoring.COSINE][Subset.SYNONYM] == pytest.approx(direct, abs=1e-5)
    for per_subset in result.mean_normalised.values():
        assert all(math.isfinite(v) and v <= 1.0 + 1e-6 for v in per_subset.values())
    payload = result.to_dict()
    assert payload["baseline_pairs"] == half * half
    assert set(payload["mean_normalised"]) == {"cosine", "rank", "blend"}
