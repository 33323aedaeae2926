"""The one table of training methods: for each, its loss, the data it reads, the teacher signal
it needs, how many teachers it takes, the paper's settings and its changes to the `full` recipe.

Adding a method means one row here and one loss module in models/losses/. A name that is not
in the table is an error (`UnknownMethodError`), never a fall-back to another loss.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from torch import nn

from models.losses.infonce import InfoNCELoss
from models.losses.mnrl import MNRLLoss
from models.losses.mnrl_distillation import MNRLDistillationLoss
from models.losses.rankcse import Listwise, RankCSELoss
from models.losses.rankencoder import RankEncoderLoss
from models.losses.similarity_distillation import SimilarityDistillationLoss
from models.training.config import Recipe, TrainConfig, recipe_config


class Method(StrEnum):
    SIMCSE = "simcse"
    RANKENCODER = "rankencoder"
    RANKCSE_LISTNET = "rankcse-listnet"
    RANKCSE_LISTMLE = "rankcse-listmle"
    MNRL = "mnrl"
    SIMILARITY_DISTILLATION = "similarity-distillation"
    MNRL_DISTILLATION = "mnrl-distillation"


class DataKind(StrEnum):
    SENTENCES = "sentences"  # unlabeled text
    NLI_TRIPLES = "nli-triples"  # (premise, entailed, contradicted) from an NLI file


class SignalKind(StrEnum):
    NONE = "none"
    COSINE = "cosine"  # the teacher's in-batch cosine matrices (RankCSE S^T)
    RANK = "rank"  # the teacher's in-batch rank-vector similarities (RankEncoder u_i.u_j)
    EMBEDDINGS = "embeddings"  # teacher's and parent's embeddings of every training text


class UnknownMethodError(ValueError):
    pass


@dataclass(frozen=True)
class EmbeddingSignals:
    """Unit embeddings of every distinct training text, computed once before training."""

    texts: list[str]  # (N,) TrainingData.texts: the sentences, or the triples' distinct texts
    teacher: torch.Tensor  # (N, d_t)
    parent: torch.Tensor  # (N, d) the frozen starting point of the student


# (student, config, embeddings for SignalKind.EMBEDDINGS methods, else None) -> the loss.
LossFactory = Callable[[SentenceTransformer, TrainConfig, EmbeddingSignals | None], nn.Module]


@dataclass(frozen=True)
class MethodSpec:
    loss: LossFactory
    data: DataKind
    signal: SignalKind
    teachers: tuple[int, int]  # (fewest, most)
    paper: Mapping[str, Any]  # TrainConfig fields of the paper's (GPU-sized) setting
    # This method's changes to the `full` recipe, chosen on the dev sets (docs/training.md).
    full: Mapping[str, Any] = field(default_factory=dict)

    @property
    def supervised(self) -> bool:
        return self.data is DataKind.NLI_TRIPLES


def _rankcse(listwise: Listwise) -> LossFactory:
    def build(
        model: SentenceTransformer, config: TrainConfig, _: EmbeddingSignals | None
    ) -> nn.Module:
        return RankCSELoss(
            model,
            listwise,
            temperature=config.temperature,
            tau_student=config.tau_student,
            tau_teacher=config.tau_teacher,
            alpha=config.alpha,
            beta=config.beta,
            gamma=config.gamma,
        )

    return build


def _embeddings(signals: EmbeddingSignals | None) -> EmbeddingSignals:
    if signals is None:
        raise ValueError("a distillation loss needs the teacher's and parent's embeddings")
    return signals


def _distill_settings(config: TrainConfig) -> dict[str, float]:
    """The settings both distillation losses share: teacher mixing, temperature, weights."""
    return {
        "alpha": config.distill_alpha,
        "tau": config.distill_tau,
        "kl_weight": config.distill_kl_weight,
        "mse_weight": config.distill_mse_weight,
    }


def _similarity_distillation(
    model: SentenceTransformer, config: TrainConfig, signals: EmbeddingSignals | None
) -> nn.Module:
    embeddings = _embeddings(signals)
    return SimilarityDistillationLoss(
        model,
        embeddings.teacher,
        embeddings.parent,
        top_k=config.distill_top_k,
        random_columns=config.distill_random_columns,
        seed=config.seed,
        **_distill_settings(config),
    )


def _mnrl_distillation(
    model: SentenceTransformer, config: TrainConfig, signals: EmbeddingSignals | None
) -> nn.Module:
    embeddings = _embeddings(signals)
    return MNRLDistillationLoss(
        model,
        embeddings.texts,
        embeddings.teacher,
        embeddings.parent,
        scale=config.mnrl_scale,
        **_distill_settings(config),
    )


def _rankencoder(
    model: SentenceTransformer, config: TrainConfig, _: EmbeddingSignals | None
) -> nn.Module:
    return RankEncoderLoss(
        model,
        temperature=config.temperature,
        tau_lower=config.tau_lower,
        tau_upper=config.tau_upper,
        lambda_train=config.lambda_train,
    )


# Paper settings: SimCSE (Gao et al., 2021, unsupervised BERT-base: batch 64, lr 3e-5, one
# epoch over 10^6 sentences); RankEncoder Section 4.3 (its base encoder's, i.e. SimCSE's);
# RankCSE Appendix A (batch 128, lr 3e-5, 4 epochs, warm-up 5 %); MNRL-SBERT Section IV
# (batch 12, lr 2e-5, one epoch, 10 % warm-up).
_PAPER_DATA = {"max_sentences": None, "teacher_anchor_count": 100_000}
_RANKCSE_PAPER = {"batch_size": 128, "learning_rate": 3e-5, "epochs": 4}
_SIMCSE_PAPER = {"batch_size": 64, "learning_rate": 3e-5, "warmup_ratio": 0.0}

METHODS: Mapping[Method, MethodSpec] = MappingProxyType(
    {
        Method.SIMCSE: MethodSpec(
            loss=lambda model, config, _: InfoNCELoss(model, config.temperature),
            data=DataKind.SENTENCES,
            signal=SignalKind.NONE,
            teachers=(0, 0),
            paper=_SIMCSE_PAPER,
        ),
        Method.RANKENCODER: MethodSpec(
            loss=_rankencoder,
            data=DataKind.SENTENCES,
            signal=SignalKind.RANK,
            teachers=(1, 1),
            paper=_SIMCSE_PAPER,
        ),
        Method.RANKCSE_LISTNET: MethodSpec(
            loss=_rankcse(Listwise.LISTNET),
            data=DataKind.SENTENCES,
            signal=SignalKind.COSINE,
            teachers=(1, 2),
            paper=_RANKCSE_PAPER,
        ),
        Method.RANKCSE_LISTMLE: MethodSpec(
            loss=_rankcse(Listwise.LISTMLE),
            data=DataKind.SENTENCES,
            signal=SignalKind.COSINE,
            teachers=(1, 2),
            paper=_RANKCSE_PAPER,
        ),
        Method.MNRL: MethodSpec(
            loss=lambda model, config, _: MNRLLoss(model, config.mnrl_scale),
            data=DataKind.NLI_TRIPLES,
            signal=SignalKind.NONE,
            teachers=(0, 0),
            paper={"batch_size": 12, "learning_rate": 2e-5, "warmup_ratio": 0.1},
        ),
        # Ours: RankCSE's multi-teacher mixing with the frozen parent as teacher 2, distilled as
        # similarity lists against the whole training text (models/losses/
        # similarity_distillation.py). No paper setting of its own: the paper preset is
        # RankCSE's batch and schedule.
        Method.SIMILARITY_DISTILLATION: MethodSpec(
            loss=_similarity_distillation,
            data=DataKind.SENTENCES,
            signal=SignalKind.EMBEDDINGS,
            teachers=(1, 1),
            paper=_RANKCSE_PAPER,
        ),
        # Ours: MNRL's triples with the in-batch similarity matrix distilled from the same mixed
        # teachers (models/losses/mnrl_distillation.py); the paper preset is MNRL's.
        Method.MNRL_DISTILLATION: MethodSpec(
            loss=_mnrl_distillation,
            data=DataKind.NLI_TRIPLES,
            signal=SignalKind.EMBEDDINGS,
            teachers=(1, 1),
            paper={"batch_size": 12, "learning_rate": 2e-5, "warmup_ratio": 0.1},
            # Dev average Eq. 7 at 4e-5 / 8e-5 / 1.2e-4: 84.01 / 84.07 / 83.98.
            full={"learning_rate": 8e-5},
        ),
    }
)


def method_spec(method: Method | str) -> MethodSpec:
    """The table's row for `method`; UnknownMethodError names the choices."""
    try:
        return METHODS[Method(method)]
    except ValueError:
        choices = ", ".join(m.value for m in Method)
        raise UnknownMethodError(f"unknown method {method!r}; one of {choices}") from None


def method_config(method: Method, recipe: Recipe | str, **overrides: Any) -> TrainConfig:
    """The named recipe for `method` (its row's `full` changes included), `overrides` on top."""
    recipe = Recipe(recipe)
    changes = method_spec(method).full if recipe is Recipe.FULL else {}
    return recipe_config(recipe, **(dict(changes) | overrides))


def paper_config(method: Method, **overrides: Any) -> TrainConfig:
    """The papers' settings for `method` (GPU-sized: 10^6 sentences for the unsupervised)."""
    return TrainConfig(**(_PAPER_DATA | dict(method_spec(method).paper) | overrides))
