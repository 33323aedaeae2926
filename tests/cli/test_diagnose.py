import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau
from typer.testing import CliRunner

from cli.main import app
from core.settings import DATA_DIR, get_settings
from models.encoder import Encoder
from models.evaluation.heros import read_heros
from tests.cli.conftest import flat

QUERY = "a man is playing a guitar ."
PAIRS = [
    (QUERY, "a man plays the guitar .", 4.8),
    (QUERY, "a person is playing an instrument .", 3.8),
    ("a man is playing a flute .", QUERY, 2.4),
    (QUERY, "a woman is slicing an onion .", 0.4),
    ("the cat sleeps on the sofa .", "a cat is sleeping on a couch .", 4.5),
    ("stocks fell sharply on monday .", "a dog runs through the snow .", 0.0),
    ("two boys are playing football .", "kids are playing soccer .", 3.6),
]
SENTENCES = [
    "The old mill was converted into a museum in the late 1980s.",
    "The village hosted a large music festival every summer for decades.",
    "She studied chemistry at the university before moving to Berlin.",
    "The river floods the valley almost every spring after heavy rain.",
    "Did the committee approve the new budget for the coming year?",
    "The team won the national championship three years in a row.",
]
ANCHORS = ["--anchors", "64"]


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    var = tmp_path_factory.mktemp("var")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RANKSERVE_VAR_DIR", str(var))
        patch.setenv("RANKSERVE_DEVICE", "cpu")
        get_settings.cache_clear()
        yield var
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def senteval_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("senteval")
    path = root / "STS" / "STSBenchmark" / "sts-dev.csv"
    path.parent.mkdir(parents=True)
    path.write_text(
        "".join(f"g\tf\t2012\t{i}\t{s}\t{a}\t{b}\n" for i, (a, b, s) in enumerate(PAIRS))
    )
    return root


def run(*args: str) -> str:
    """The command's output, whitespace runs made one space (tests/cli/conftest.py)."""
    result = CliRunner().invoke(app, ["diagnose", *args])
    assert result.exit_code == 0, result.output
    return flat(result.output)


@pytest.mark.slow
def test_heros_compares_models_on_a_file(var_dir: Path, tmp_path: Path) -> None:
    small = tmp_path / "small.tsv"
    small.write_text("".join((DATA_DIR / "heros-sample.tsv").read_text().splitlines(True)[:12]))
    out = tmp_path / "heros.json"
    output = run(
        "heros", "--data", str(small), "--model", "default", "--model", "default", *ANCHORS,
        "--json", str(out),
    )  # fmt: skip
    assert "Synonym" in output and "baseline (raw)" in output  # the table was printed
    payload = json.loads(out.read_text())
    assert "Synonym" in payload["results"][0]["pairs"]
    assert "the first 5 x last 5 originals" in payload["results"][0]["notes"][0]
    labels = [result["model"] for result in payload["results"]]
    assert labels == ["all-MiniLM-L6-v2 #1", "all-MiniLM-L6-v2 #2"]
    first, second = (r["mean_normalised"]["cosine"] for r in payload["results"])
    assert first == pytest.approx(second)  # the same model twice scores the same
    assert len(first) == 6
    assert Path(payload["chart"]).is_file()
    assert Path(payload["chart"]).parent == var_dir / "diagnostics"


@pytest.mark.slow
def test_heros_generate_builds_typo_and_negation_subsets(var_dir: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "mine.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    saved, out = tmp_path / "generated.tsv", tmp_path / "heros.json"
    output = run(
        "heros", "--generate", str(corpus), "--limit", "4", "--save", str(saved), *ANCHORS,
        "--json", str(out), "--chart", str(tmp_path / "g.png"),
    )  # fmt: skip
    assert "generated 4 minimal-pair rows" in output
    generated = read_heros(saved)
    assert len(generated.originals) == 4
    assert not any(original.endswith("?") for original in generated.originals)
    result = json.loads(out.read_text())["results"][0]
    assert set(result["pairs"]) == {"Typo", "Negation (Main)"}
    assert (tmp_path / "g.png").is_file()


def test_heros_input_errors_exit_with_code_2(var_dir: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "no.tsv")
    result = CliRunner().invoke(app, ["diagnose", "heros", "--data", missing])
    assert result.exit_code == 2
    assert "file not found" in flat(result.output)
    result = CliRunner().invoke(app, ["diagnose", "heros", "--generate", missing])
    assert result.exit_code == 2
    assert "file not found" in flat(result.output)
    both = ["diagnose", "heros", "--data", missing, "--generate", missing]
    result = CliRunner().invoke(app, both)
    assert result.exit_code == 2
    assert "give --data or --generate, not both" in flat(result.output)


@pytest.mark.slow
def test_model_default_is_the_packaged_minilm_whatever_the_settings_name(
    var_dir: Path, senteval_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--model default` never reads RANKSERVE_MODEL_PATH (cli/diagnose.py `_load_model`)."""
    not_a_checkpoint = tmp_path / "other-checkpoint"
    not_a_checkpoint.mkdir()
    monkeypatch.setenv("RANKSERVE_MODEL_PATH", str(not_a_checkpoint))
    get_settings.cache_clear()
    try:
        assert get_settings().model_path == not_a_checkpoint
        args = ["ranking", "--data", str(senteval_dir), *ANCHORS]
        # Without --model the settings' checkpoint is loaded, and this one is not a model.
        result = CliRunner().invoke(app, ["diagnose", *args])
        assert result.exit_code != 0
        assert str(not_a_checkpoint) in f"{result.exception} {result.output}"
        out = tmp_path / "ranking.json"
        run(*args, "--model", "default", "--json", str(out))
    finally:
        get_settings.cache_clear()
    assert list(json.loads(out.read_text())["results"]) == ["all-MiniLM-L6-v2"]


@pytest.mark.slow
def test_ranking_matches_kendall_tau_of_direct_cosines(
    var_dir: Path, senteval_dir: Path, tmp_path: Path, encoder: Encoder
) -> None:
    out = tmp_path / "ranking.json"
    run("ranking", "--data", str(senteval_dir), *ANCHORS, "--json", str(out))
    metrics = json.loads(out.read_text())["results"]["all-MiniLM-L6-v2"]["STSBenchmark-dev"]
    assert metrics["cosine"]["lists"] == 1  # only QUERY has four scored partners
    partners = [b if a == QUERY else a for a, b, _ in PAIRS[:4]]
    cosines = (encoder.encode([QUERY]) @ encoder.encode(partners).T).numpy()[0]
    gold = np.array([s for *_, s in PAIRS[:4]])
    expected = kendalltau(gold, cosines).statistic * 100
    assert metrics["cosine"]["kendall_tau"] == pytest.approx(expected, abs=1e-6)
    assert 0 < metrics["cosine"]["ndcg"] <= 100


@pytest.mark.slow
def test_geometry_similar_pairs_and_report(
    var_dir: Path, senteval_dir: Path, tmp_path: Path
) -> None:
    geometry = tmp_path / "geometry.json"
    run("geometry", "--data", str(senteval_dir), *ANCHORS, "--json", str(geometry))
    result = json.loads(geometry.read_text())["results"][0]
    assert result["positive_pairs"] == 2  # gold 4.8 and 4.5
    assert set(result) >= {"embeddings", "rank_vectors"}

    similar = tmp_path / "similar.json"
    run(
        "similar-pairs", "--data", str(senteval_dir), "--student", "default", *ANCHORS,
        "--json", str(similar),
    )  # fmt: skip
    rows = json.loads(similar.read_text())["rows"]
    assert [r["row"] for r in rows][-2:] == [
        "RankEncoder_E - retrain",
        "RankEncoder_E - retrain - inf",
    ]
    assert {r["pairs_similar"] for r in rows} == {4}  # gold >= 3.35: 4.8, 3.8, 4.5, 3.6
    assert rows[0]["similar"] == pytest.approx(rows[3]["similar"])  # same model as student

    report_dir = tmp_path / "report"
    run("report", "--out", str(report_dir), "--data", str(senteval_dir), *ANCHORS)
    report = json.loads((report_dir / "report.json").read_text())
    assert set(report) >= {"heros", "geometry", "ranking", "similar_pairs", "charts"}
    assert all((report_dir / name).is_file() for name in report["charts"].values())
