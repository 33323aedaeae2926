"""Config: paper presets, file overrides on the CPU recipe, unknown keys refused."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from models.training.config import Recipe, TrainConfig, recipe_config
from models.training.methods import (
    METHODS,
    Method,
    SignalKind,
    UnknownMethodError,
    method_config,
    method_spec,
    paper_config,
)


def test_cpu_recipe_and_paper_presets():
    cpu = TrainConfig()
    assert (cpu.max_sentences, cpu.max_seq_length, cpu.batch_size) == (2048, 32, 64)
    assert (cpu.tau_lower, cpu.tau_upper, cpu.lambda_train) == (0.5, 0.8, 0.05)
    rankcse = paper_config(Method.RANKCSE_LISTNET)
    assert (rankcse.batch_size, rankcse.epochs, rankcse.alpha) == (128, 4, pytest.approx(1 / 3))
    assert paper_config(Method.MNRL).batch_size == 12
    assert paper_config(Method.SIMCSE, seed=5).seed == 5
    assert paper_config(Method.SIMCSE).max_sentences is None


def test_recipes_by_name():
    assert recipe_config("quick") == TrainConfig()
    full = recipe_config(Recipe.FULL, seed=3)
    assert full.max_sentences is None and full.seed == 3
    with pytest.raises(ValueError, match="not a valid Recipe"):
        recipe_config("huge")


def test_a_method_row_adjusts_the_full_recipe_and_overrides_still_win():
    full = recipe_config(Recipe.FULL)
    assert method_config(Method.MNRL, "full") == full
    tuned = method_config(Method.MNRL_DISTILLATION, "full")
    assert tuned == full.model_copy(update=dict(METHODS[Method.MNRL_DISTILLATION].full))
    assert tuned.learning_rate != full.learning_rate
    assert method_config(Method.MNRL_DISTILLATION, "quick") == TrainConfig()
    assert method_config(Method.MNRL_DISTILLATION, "full", learning_rate=1e-6).learning_rate == 1e-6


def test_every_method_has_one_row_and_unknown_names_are_errors():
    assert set(METHODS) == set(Method)
    for spec in METHODS.values():
        low, high = spec.teachers
        assert 0 <= low <= high
        assert (low > 0) == (spec.signal is not SignalKind.NONE)
    with pytest.raises(UnknownMethodError, match="one of simcse"):
        method_spec("rankcse")


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
