import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr
from typer.testing import CliRunner

from cli.main import app
from core.settings import get_settings
from models.encoder import Encoder
from tests.cli.conftest import flat

PAIRS = [
    ("a man is playing a guitar .", "a man plays the guitar .", 4.8),
    ("a woman is slicing an onion .", "a man is playing a flute .", 0.2),
    ("the cat sleeps on the sofa .", "a cat is sleeping on a couch .", 4.5),
    ("stocks fell sharply on monday .", "a dog runs through the snow .", 0.0),
    ("two boys are playing football .", "kids are playing soccer .", 3.6),
    ("a chef is cooking pasta .", "someone is preparing food .", 3.0),
]


@pytest.fixture
def senteval_dir(tmp_path: Path) -> Path:
    path = tmp_path / "STS" / "STSBenchmark" / "sts-dev.csv"
    path.parent.mkdir(parents=True)
    path.write_text(
        "".join(f"g\tf\t2012\t{i}\t{s}\t{a}\t{b}\n" for i, (a, b, s) in enumerate(PAIRS))
    )
    return tmp_path


@pytest.fixture
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RANKSERVE_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("RANKSERVE_DEVICE", "cpu")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.slow
def test_evaluate_writes_json_matching_a_direct_computation(
    senteval_dir: Path, tmp_path: Path, encoder: Encoder, isolated_settings
) -> None:
    out = tmp_path / "result.json"
    result = CliRunner().invoke(
        app, ["evaluate", "--data", str(senteval_dir), "--anchors", "64", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "STSBenchmark-dev" in result.output  # the table was printed
    payload = json.loads(out.read_text())
    assert payload["anchors"] == 64
    assert payload["primary_metric"] == "avg"
    cosine = payload["results"]["cosine"]
    left = encoder.encode([a for a, _, _ in PAIRS])
    right = encoder.encode([b for _, b, _ in PAIRS])
    direct = spearmanr([s for *_, s in PAIRS], (left * right).sum(1).numpy()).statistic * 100
    assert cosine["STSBenchmark-dev"] == pytest.approx(direct, abs=1e-6)
    assert set(payload["results"]) == {"cosine", "rank", "blend"}
    for per_task in payload["results"].values():
        assert all(np.isfinite(v) and -100 <= v <= 100 for v in per_task.values())
    assert list((tmp_path / "var" / "cache" / "anchors").glob("*.npy"))


def test_missing_data_directory_is_a_clear_error(tmp_path: Path, isolated_settings) -> None:
    result = CliRunner().invoke(app, ["evaluate", "--data", str(tmp_path / "absent")])
    assert result.exit_code == 2
    assert "data directory not found" in flat(result.output)
