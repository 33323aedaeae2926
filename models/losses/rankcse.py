"""RankCSE's total objective (Eq. 6) with multi-teacher pseudo labels.

Reference: Liu et al., "RankCSE" (ACL 2023), Section 4.4 (S^T = alpha S_1^T + (1 - alpha) S_2^T,
Eq. 6: L = L_infoNCE + beta L_consistency + gamma L_rank) and Appendix A (alpha = 1/3,
beta = gamma = 1, tau_1 = 0.05).
"""

from enum import StrEnum

import torch
from sentence_transformers import SentenceTransformer
from torch import nn

from models.losses.encoding import cosine_matrix, dropout_views
from models.losses.infonce import DEFAULT_TEMPERATURE, info_nce
from models.losses.listmle import listmle
from models.losses.listnet import DEFAULT_TAU_STUDENT, DEFAULT_TAU_TEACHER, listnet
from models.losses.rankcse_consistency import js_ranking_consistency

DEFAULT_ALPHA = 1 / 3
DEFAULT_BETA = 1.0
DEFAULT_GAMMA = 1.0


class Listwise(StrEnum):
    LISTNET = "listnet"
    LISTMLE = "listmle"


def mix_teachers(teacher_scores: torch.Tensor, alpha: float = DEFAULT_ALPHA) -> torch.Tensor:
    """S^T = alpha S_1^T + (1 - alpha) S_2^T; a single teacher is returned unchanged.

    teacher_scores: (T, B, B) with T in {1, 2}.
    """
    if teacher_scores.shape[0] == 1:
        return teacher_scores[0]  # (B, B)
    if teacher_scores.shape[0] != 2:
        raise ValueError(f"RankCSE mixes one or two teachers, got {teacher_scores.shape[0]}")
    return alpha * teacher_scores[0] + (1 - alpha) * teacher_scores[1]  # (B, B)


def rankcse_total(
    view1: torch.Tensor,
    view2: torch.Tensor,
    teacher: torch.Tensor,
    *,
    listwise: Listwise,
    temperature: float = DEFAULT_TEMPERATURE,
    tau_student: float = DEFAULT_TAU_STUDENT,
    tau_teacher: float = DEFAULT_TAU_TEACHER,
    beta: float = DEFAULT_BETA,
    gamma: float = DEFAULT_GAMMA,
) -> torch.Tensor:
    """Eq. 6 over two dropout views (B, dim) and the mixed teacher list S^T (B, B).

    The student list S(x_i) is row i of cos(f(x_i), f(x_j)'), the matrix InfoNCE also uses.
    """
    similarity = cosine_matrix(view1, view2)  # (B, B)
    contrastive = info_nce(view1, view2, temperature)
    consistency = js_ranking_consistency(similarity, temperature)
    if listwise is Listwise.LISTNET:
        ranking = listnet(similarity, teacher, tau_student, tau_teacher)
    else:
        ranking = listmle(similarity, teacher, tau_student)
    return contrastive + beta * consistency + gamma * ranking


class RankCSELoss(nn.Module):
    """RankCSE with ListNet or ListMLE distillation from one or two teachers.

    Example: `RankCSELoss(model, Listwise.LISTNET)(texts, teacher_scores)` with
    teacher_scores (T, B, B) the teachers' in-batch cosine matrices.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        listwise: Listwise,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        tau_student: float = DEFAULT_TAU_STUDENT,
        tau_teacher: float = DEFAULT_TAU_TEACHER,
        alpha: float = DEFAULT_ALPHA,
        beta: float = DEFAULT_BETA,
        gamma: float = DEFAULT_GAMMA,
    ) -> None:
        super().__init__()
        self.model = model
        self.listwise = listwise
        self.temperature = temperature
        self.tau_student = tau_student
        self.tau_teacher = tau_teacher
        self.alpha = alpha
        self.beta = beta
        self.gamma = gamma

    def compute_loss_from_embeddings(
        self, view1: torch.Tensor, view2: torch.Tensor, teacher_scores: torch.Tensor
    ) -> torch.Tensor:
        return rankcse_total(
            view1,
            view2,
            mix_teachers(teacher_scores, self.alpha),
            listwise=self.listwise,
            temperature=self.temperature,
            tau_student=self.tau_student,
            tau_teacher=self.tau_teacher,
            beta=self.beta,
            gamma=self.gamma,
        )

    def forward(self, texts: list[str], teacher_scores: torch.Tensor) -> torch.Tensor:
        view1, view2 = dropout_views(self.model, texts)  # (B, dim) each
        return self.compute_loss_from_embeddings(view1, view2, teacher_scores)
