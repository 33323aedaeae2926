"""Training configuration: the papers' defaults, and the CPU recipe that `rankserve train` uses.

Paper settings: SimCSE (Gao et al., 2021, unsupervised BERT-base: batch 64, lr 3e-5, max length
32, one epoch, tau 0.05); RankEncoder Section 4.3 (lambda_train 0.05, tau_l 0.5, tau_u 0.8, the
rest from its base encoder, i.e. SimCSE); RankCSE Appendix A (batch 128, lr 3e-5, 4 epochs,
alpha 1/3, beta = gamma = 1, warm-up 5 %, tau_2 0.05 / tau_3 0.025 from its grid); MNRL-SBERT
Section IV (batch 12, lr 2e-5, one epoch, 10 % warm-up).
"""

import json
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from models.losses.infonce import DEFAULT_TEMPERATURE
from models.losses.listnet import DEFAULT_TAU_STUDENT, DEFAULT_TAU_TEACHER
from models.losses.mnrl import DEFAULT_SCALE
from models.losses.rankcse import DEFAULT_ALPHA, DEFAULT_BETA, DEFAULT_GAMMA
from models.losses.rankencoder import DEFAULT_LAMBDA_TRAIN, DEFAULT_TAU_LOWER, DEFAULT_TAU_UPPER


class Method(StrEnum):
    SIMCSE = "simcse"
    RANKENCODER = "rankencoder"
    RANKCSE_LISTNET = "rankcse-listnet"
    RANKCSE_LISTMLE = "rankcse-listmle"
    MNRL = "mnrl"

    @property
    def teachers_used(self) -> tuple[int, int]:
        """(minimum, maximum) number of teachers the method takes."""
        if self is Method.RANKENCODER:
            return (1, 1)
        if self in (Method.RANKCSE_LISTNET, Method.RANKCSE_LISTMLE):
            return (1, 2)
        return (0, 0)

    @property
    def supervised(self) -> bool:
        """Trains on NLI triples rather than plain sentences."""
        return self is Method.MNRL


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
    # MNRL.
    mnrl_scale: float = Field(default=DEFAULT_SCALE, gt=0)
    hard_negatives: bool = True

    # Evaluation after training (dev sets only), and the device.
    eval_anchor_count: int | None = Field(default=10_000, ge=2)
    eval_data: Path | None = Field(default=None, description="SentEval dir; None = settings")
    device: str | None = None

    @classmethod
    def paper(cls, method: Method, **overrides: Any) -> "TrainConfig":
        """The papers' settings for `method` (GPU-sized: 10^6 sentences for the unsupervised)."""
        per_method: dict[Method, dict[str, Any]] = {
            Method.SIMCSE: {"batch_size": 64, "learning_rate": 3e-5, "warmup_ratio": 0.0},
            Method.RANKENCODER: {"batch_size": 64, "learning_rate": 3e-5, "warmup_ratio": 0.0},
            Method.RANKCSE_LISTNET: {"batch_size": 128, "learning_rate": 3e-5, "epochs": 4},
            Method.RANKCSE_LISTMLE: {"batch_size": 128, "learning_rate": 3e-5, "epochs": 4},
            Method.MNRL: {"batch_size": 12, "learning_rate": 2e-5, "warmup_ratio": 0.1},
        }
        settings = {"max_sentences": None, "teacher_anchor_count": 100_000}
        return cls(**(settings | per_method[method] | overrides))

    @classmethod
    def from_file(cls, path: Path, base: "TrainConfig | None" = None) -> "TrainConfig":
        """Overrides from a .json or .toml file on top of `base` (default: the CPU recipe)."""
        text = path.read_text(encoding="utf-8")
        values = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        return (base or cls()).model_copy(update=cls(**values).model_dump(exclude_unset=True))
