from pathlib import Path

import numpy as np
import pytest

from models.evaluation.senteval import SentEvalFormatError, load_sts_tasks


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_sts_year_concatenates_subsets_and_skips_unlabeled_pairs(tmp_path: Path) -> None:
    year = tmp_path / "STS" / "STS12-en-test"
    write(year / "STS.input.MSRpar.txt", "a\tb\nc\td\n")
    write(year / "STS.gs.MSRpar.txt", "1.0\n\n")  # second pair is unlabeled
    write(year / "STS.input.MSRvid.txt", "e\tf\n")
    write(year / "STS.gs.MSRvid.txt", "4.5\n")
    (task,) = load_sts_tasks(tmp_path)
    assert task.name == "STS12"
    assert task.pairs == [("a", "b"), ("e", "f")]
    np.testing.assert_array_equal(task.gold, [1.0, 4.5])


def test_stsb_yields_a_similar_pairs_subset_outside_the_average(tmp_path: Path) -> None:
    rows = [("0.5", "a", "b"), ("3.4", "c", "d"), ("3.35", "e", "f"), ("5.0", "g", "h")]
    write(
        tmp_path / "STS" / "STSBenchmark" / "sts-dev.csv",
        "".join(f"genre\tfile\t2012\t{i:04d}\t{s}\t{a}\t{b}\n" for i, (s, a, b) in enumerate(rows)),
    )
    full, similar = load_sts_tasks(tmp_path)
    assert full.name == "STSBenchmark-dev" and full.in_average
    assert similar.name == "STSBenchmark-dev-similar" and not similar.in_average
    # 3.4/5 = 0.68 and 5/5 = 1.0 are inside [0.67, 1.0]; 3.35/5 = 0.67 sits on the boundary
    assert similar.pairs == [("c", "d"), ("e", "f"), ("g", "h")]


def test_sick_reads_relatedness_after_the_header(tmp_path: Path) -> None:
    write(
        tmp_path / "SICK" / "SICK_trial.txt",
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
        "1\tx\ty\t4.2\tNEUTRAL\n",
    )
    (task,) = load_sts_tasks(tmp_path)
    assert task.name == "SICKRelatedness-trial"
    assert task.pairs == [("x", "y")]
    np.testing.assert_array_equal(task.gold, [4.2])


def test_missing_gold_file_is_named(tmp_path: Path) -> None:
    write(tmp_path / "STS" / "STS13-en-test" / "STS.input.FNWN.txt", "a\tb\n")
    with pytest.raises(SentEvalFormatError, match=r"STS\.gs\.FNWN\.txt: gold-score file missing"):
        load_sts_tasks(tmp_path)


def test_malformed_score_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "STS" / "STSBenchmark" / "sts-dev.csv", "g\tf\t2012\t0\tfive\ta\tb\n")
    with pytest.raises(SentEvalFormatError, match=r"sts-dev\.csv:1: score 'five' is not a number"):
        load_sts_tasks(tmp_path)


def test_short_row_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "STS" / "STSBenchmark" / "sts-dev.csv", "g\tf\t2012\t0\t1.0\ta\tb\ng\tf\n")
    with pytest.raises(SentEvalFormatError, match=r"sts-dev\.csv:2: expected 7"):
        load_sts_tasks(tmp_path)


def test_empty_directory_and_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(SentEvalFormatError, match="no SentEval STS files found"):
        load_sts_tasks(tmp_path)
    with pytest.raises(SentEvalFormatError, match="data directory not found"):
        load_sts_tasks(tmp_path / "nope")


def test_bundled_dev_sets_load_in_full() -> None:
    from core.settings import DATA_DIR

    names = {task.name: len(task.pairs) for task in load_sts_tasks(DATA_DIR / "senteval")}
    assert names["STSBenchmark-dev"] == 1500
    assert names["SICKRelatedness-trial"] == 500
    assert 0 < names["STSBenchmark-dev-similar"] < 1500
