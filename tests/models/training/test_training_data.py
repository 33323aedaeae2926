"""Training data loaders on the repository's own files and on small hand-written ones."""

from pathlib import Path

import pytest

from core.settings import DATA_DIR
from models.training.data import (
    TrainingDataError,
    load_sentences,
    load_triples,
    nli_triples,
    read_text_file,
)

SNLI = DATA_DIR / "nli" / "snli-dev-test.tsv"
STSB_TRAIN = DATA_DIR / "senteval" / "STS" / "STSBenchmark" / "sts-train.csv"
SICK_TRAIN = DATA_DIR / "senteval" / "SICK" / "SICK_train.txt"


def test_sentences_of_each_format(tmp_path: Path):
    plain = tmp_path / "plain.txt"
    plain.write_text("first sentence .\n\n  second sentence .  \n")
    assert read_text_file(plain) == ["first sentence .", "second sentence ."]
    stsb = read_text_file(STSB_TRAIN)
    assert stsb[:2] == ["a plane is taking off .", "an air plane is taking off ."]
    sick = read_text_file(SICK_TRAIN)
    assert sick[0].startswith("A group of kids is playing in a yard")
    assert len(sick) == 2 * 4500
    snli = read_text_file(SNLI)
    assert snli[0] == "Two women are embracing while holding to go packages ."


@pytest.mark.parametrize(
    "name", ["sts-dev.csv", "sts-test.csv", "SICK_trial.txt", "SICK_test_annotated.txt"]
)
def test_evaluation_splits_are_refused(tmp_path: Path, name: str):
    path = tmp_path / name
    path.write_text("a\nb\n")
    with pytest.raises(TrainingDataError, match="evaluation split"):
        read_text_file(path)


def test_malformed_senteval_train_files_name_file_and_line(tmp_path: Path):
    """STS-B and SICK train files go through the evaluation's own SentEval parsers."""
    stsb = tmp_path / "sts-train.csv"
    stsb.write_text("g\tf\t2012\t0\t4.0\ta .\tb .\ng\tf\t2012\t1\t3.0\tonly one\n")
    with pytest.raises(TrainingDataError, match=r"sts-train\.csv:2: expected 7"):
        read_text_file(stsb)
    sick = tmp_path / "SICK_train.txt"
    sick.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\ta .\tb .\tfive\n")
    with pytest.raises(TrainingDataError, match=r"SICK_train\.txt:2: score 'five'"):
        read_text_file(sick)
    sick.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\ta .\tb .\t4.5\n")
    assert read_text_file(sick) == ["a .", "b ."]


def test_nli_triples_pair_entailment_with_a_contradiction_of_the_same_premise():
    rows = [
        ("p1", "e1", "entailment"),
        ("p1", "c1", "contradiction"),
        ("p1", "n1", "neutral"),
        ("p2", "e2", "entailment"),  # no contradiction for p2
    ]
    with_negatives = nli_triples(rows, hard_negatives=True)
    assert [(t.anchor, t.positive, t.negative) for t in with_negatives] == [("p1", "e1", "c1")]
    without = nli_triples(rows, hard_negatives=False)
    assert [(t.anchor, t.positive, t.negative) for t in without] == [
        ("p1", "e1", None),
        ("p2", "e2", None),
    ]


def test_sampling_is_seeded_and_checksummed(tmp_path: Path):
    first = load_sentences([STSB_TRAIN, SICK_TRAIN], 100, seed=3)
    again = load_sentences([STSB_TRAIN, SICK_TRAIN], 100, seed=3)
    other = load_sentences([STSB_TRAIN, SICK_TRAIN], 100, seed=4)
    assert first.sentences == again.sentences and first.checksum == again.checksum
    assert first.checksum != other.checksum
    assert len(set(first.sentences)) == 100
    assert set(first.files) == {str(STSB_TRAIN), str(SICK_TRAIN)}
    triples = load_triples([SNLI], 50, seed=0, hard_negatives=True)
    assert len(triples) == 50 and all(t.negative for t in triples.triples)


def test_texts_are_the_distinct_texts_of_the_examples():
    triples = load_triples([SNLI], 200, seed=1, hard_negatives=True)
    texts = triples.texts
    assert len(texts) == len(set(texts))
    assert set(texts) == {t for x in triples.triples for t in (x.anchor, x.positive, x.negative)}
    sentences = load_sentences([SICK_TRAIN], 50, seed=1)
    assert sentences.texts == sentences.sentences
