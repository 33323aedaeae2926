"""RankEncoder's distillation of rank-vector similarities (Eq. 4-6) and hinge total (Eq. 5).

Reference: Seonwoo et al., "Ranking-Enhanced Unsupervised Sentence Representation Learning"
(ACL 2023), Sections 3.4-3.5; hyper-parameters from Section 4.3.
"""

import torch
from sentence_transformers import SentenceTransformer
from torch import nn

from models.losses.encoding import cosine_matrix, dropout_views
from models.losses.infonce import DEFAULT_TEMPERATURE, info_nce

DEFAULT_TAU_LOWER = 0.5  # tau_l, Section 4.3
DEFAULT_TAU_UPPER = 0.8  # tau_u, Section 4.3
DEFAULT_LAMBDA_TRAIN = 0.05  # lambda_train, Section 4.3


def filtered_rank_mse(
    teacher_rank_similarity: torch.Tensor,
    student_cosine: torch.Tensor,
    tau_lower: float = DEFAULT_TAU_LOWER,
    tau_upper: float = DEFAULT_TAU_UPPER,
) -> torch.Tensor:
    """Eq. 6: mean of (u_i.u_j - cos(E2 x_i, E2 x_j))^2 over pairs with tau_l <= u_i.u_j <= tau_u.

    teacher_rank_similarity: (B, B) inner products of E1's normalised rank vectors (Spearman);
    student_cosine: (B, B). Zero (with a gradient path) when no pair passes the filter.
    """
    keep = (teacher_rank_similarity >= tau_lower) & (teacher_rank_similarity <= tau_upper)
    squared = (teacher_rank_similarity - student_cosine) ** 2  # (B, B)
    kept = keep.sum()
    if kept == 0:
        return (squared * 0.0).sum()
    return (squared * keep).sum() / kept


def hinge_total(
    rank_loss: torch.Tensor, contrastive_loss: torch.Tensor, lambda_train: float
) -> torch.Tensor:
    """Eq. 5: l_total = max(lambda_train * l_r, l_cl)."""
    return torch.maximum(lambda_train * rank_loss, contrastive_loss)


class RankEncoderLoss(nn.Module):
    """E2 learns E1's rank-vector similarities (Eq. 6) under a hinge with SimCSE (Eq. 5).

    The teacher matrix u_i.u_j comes precomputed per batch (see models.training.signals).
    Example: `RankEncoderLoss(model)(texts, teacher_rank_similarity)`.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        tau_lower: float = DEFAULT_TAU_LOWER,
        tau_upper: float = DEFAULT_TAU_UPPER,
        lambda_train: float = DEFAULT_LAMBDA_TRAIN,
    ) -> None:
        super().__init__()
        self.model = model
        self.temperature = temperature
        self.tau_lower = tau_lower
        self.tau_upper = tau_upper
        self.lambda_train = lambda_train

    def compute_loss_from_embeddings(
        self, view1: torch.Tensor, view2: torch.Tensor, teacher_rank_similarity: torch.Tensor
    ) -> torch.Tensor:
        rank_loss = filtered_rank_mse(
            teacher_rank_similarity, cosine_matrix(view1, view1), self.tau_lower, self.tau_upper
        )
        return hinge_total(rank_loss, info_nce(view1, view2, self.temperature), self.lambda_train)

    def forward(self, texts: list[str], teacher_rank_similarity: torch.Tensor) -> torch.Tensor:
        view1, view2 = dropout_views(self.model, texts)  # (B, dim) each
        return self.compute_loss_from_embeddings(view1, view2, teacher_rank_similarity)
