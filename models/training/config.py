"""Training configuration: every knob of a run, with the papers' loss defaults (SimCSE tau
0.05; RankEncoder Section 4.3 lambda_train 0.05, tau_l 0.5, tau_u 0.8; RankCSE Appendix A
alpha 1/3, beta = gamma = 1, tau_2 0.05 / tau_3 0.025) and the CPU recipe as field defaults.
The papers' batch sizes and schedules are in models/training/methods.py.
"""

import json
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from models.losses import similarity_distillation as distill
from models.losses.infonce import DEFAULT_TEMPERATURE
from models.losses.listnet import DEFAULT_TAU_STUDENT, DEFAULT_TAU_TEACHER
from models.losses.mnrl import DEFAULT_SCALE
from models.losses.rankcse import DEFAULT_ALPHA, DEFAULT_BETA, DEFAULT_GAMMA
from models.losses.rankencoder import DEFAULT_LAMBDA_TRAIN, DEFAULT_TAU_LOWER, DEFAULT_TAU_UPPER


class TrainConfig(BaseModel):
    """Every knob of a run. The field defaults are the CPU recipe: 2,048 examples, batches of 64,
    max length 32, one epoch (32 steps), learning rate 1e-5."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    max_sentences: int | None = Field(default=2048, ge=2, description="seeded sample; None=all")
    max_seq_length: int = Field(default=32, ge=8)
    batch_size: int = Field(default=64, ge=2)
    epochs: int = Field(default=1, ge=1)
    max_steps: int | None = Field(default=None, ge=1, description="stop early; None = all epochs")
    learning_rate: float = Field(default=1e-5, gt=0)
    warmup_ratio: float = Field(default=0.05, ge=0, le=1)
    weight_decay: float = Field(default=0.0, ge=0)
    save_every: int = Field(default=50, ge=1, description="steps between resumable checkpoints")

    temperature: float = Field(default=DEFAULT_TEMPERATURE, gt=0, description="tau_1")
    # RankEncoder (Eq. 5-6).
    lambda_train: float = Field(default=DEFAULT_LAMBDA_TRAIN, ge=0)
    tau_lower: float = DEFAULT_TAU_LOWER
    tau_upper: float = DEFAULT_TAU_UPPER
    teacher_anchor_count: int | None = Field(default=10_000, ge=2, description="E1's corpus C")
    # RankCSE (Eq. 4-6).
    tau_student: float = Field(default=DEFAULT_TAU_STUDENT, gt=0, description="tau_2")
    tau_teacher: float = Field(default=DEFAULT_TAU_TEACHER, gt=0, description="tau_3")
    alpha: float = Field(default=DEFAULT_ALPHA, ge=0, le=1, description="weight of teacher 1")
    beta: float = Field(default=DEFAULT_BETA, ge=0)
    gamma: float = Field(default=DEFAULT_GAMMA, ge=0)
    # Similarity distillation (models/losses/similarity_distillation.py).
    distill_alpha: float = Field(
        default=distill.DEFAULT_ALPHA, ge=0, le=1, description="teacher's weight"
    )
    distill_tau: float = Field(default=distill.DEFAULT_TAU, gt=0)
    distill_kl_weight: float = Field(default=distill.DEFAULT_KL_WEIGHT, ge=0)
    distill_mse_weight: float = Field(default=distill.DEFAULT_MSE_WEIGHT, ge=0)
    distill_top_k: int = Field(default=distill.DEFAULT_TOP_K, ge=0)
    distill_random_columns: int = Field(default=distill.DEFAULT_RANDOM_COLUMNS, ge=0)
    # MNRL.
    mnrl_scale: float = Field(default=DEFAULT_SCALE, gt=0)
    hard_negatives: bool = True

    # Evaluation after training (dev sets only), and the device.
    eval_anchor_count: int | None = Field(default=10_000, ge=2)
    eval_data: Path | None = Field(default=None, description="SentEval dir; None = settings")
    device: str | None = None

    @classmethod
    def from_file(cls, path: Path, base: "TrainConfig | None" = None) -> "TrainConfig":
        """Overrides from a .json or .toml file on top of `base` (default: the CPU recipe)."""
        text = path.read_text(encoding="utf-8")
        values = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        return (base or cls()).model_copy(update=cls(**values).model_dump(exclude_unset=True))


# Every clean training sentence once (37,290: Wikipedia + SNLI), teacher embeddings cached:
# 1,165 steps of 32. Through the worker on 2 cores, similarity-distillation took 64 min in all:
# 29 for all-mpnet-base-v2's embeddings of the text, 30 for the steps, 5 for evaluation and the
# bundle (docs/training.md). The optimiser settings are those of the best run there.
FULL_RECIPE: Mapping[str, Any] = MappingProxyType(
    {
        "max_sentences": None,
        "batch_size": 32,
        "max_seq_length": 32,
        "epochs": 1,
        "learning_rate": 4e-5,
        "warmup_ratio": 0.1,
        "weight_decay": 0.01,
        "save_every": 100,
    }
)


class Recipe(StrEnum):
    """Named CPU recipes: `quick` is the field defaults (tests, smoke runs); `full` is as many
    sentences and steps as fit in about an hour on 2 CPU cores, teacher embeddings cached."""

    QUICK = "quick"
    FULL = "full"


RECIPES: Mapping[Recipe, Mapping[str, Any]] = MappingProxyType(
    {
        Recipe.QUICK: {},
        Recipe.FULL: FULL_RECIPE,
    }
)


def recipe_config(recipe: Recipe | str, **overrides: Any) -> TrainConfig:
    """The named recipe with `overrides` on top (ValueError for an unknown name)."""
    return TrainConfig(**(dict(RECIPES[Recipe(recipe)]) | overrides))
