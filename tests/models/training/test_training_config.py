"""Config: paper presets, file overrides on the CPU recipe, unknown keys refused."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from models.training.config import Method, TrainConfig


def test_cpu_recipe_and_paper_presets():
    cpu = TrainConfig()
    assert (cpu.max_sentences, cpu.max_seq_length, cpu.batch_size) == (2048, 32, 64)
    assert (cpu.tau_lower, cpu.tau_upper, cpu.lambda_train) == (0.5, 0.8, 0.05)
    rankcse = TrainConfig.paper(Method.RANKCSE_LISTNET)
    assert (rankcse.batch_size, rankcse.epochs, rankcse.alpha) == (128, 4, pytest.approx(1 / 3))
    assert TrainConfig.paper(Method.MNRL).batch_size == 12
    assert TrainConfig.paper(Method.SIMCSE, seed=5).seed == 5


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_file_overrides_only_what_it_names(tmp_path: Path, suffix: str):
    path = tmp_path / f"run{suffix}"
    path.write_text('{"alpha": 0.5, "max_steps": 3}' if suffix == ".json" else "alpha = 0.5\n")
    config = TrainConfig.from_file(path)
    assert config.alpha == 0.5
    assert config.batch_size == TrainConfig().batch_size


def test_unknown_or_invalid_keys_are_refused(tmp_path: Path):
    path = tmp_path / "bad.json"
    path.write_text('{"learning_rat": 1e-5}')
    with pytest.raises(ValidationError):
        TrainConfig.from_file(path)
    with pytest.raises(ValidationError):
        TrainConfig(alpha=1.5)
