"""ListNet ranking distillation with top-one probabilities (RankCSE Eq. 4).

Reference: Liu et al., "RankCSE" (ACL 2023), Section 4.4, Eq. 4 and its footnote 1 (the
positive pair is dropped from both lists before the top-one distributions); Cao et al.,
"Learning to Rank: From Pairwise Approach to Listwise Approach" (ICML 2007).
"""

import torch

from models.losses.encoding import off_diagonal

DEFAULT_TAU_STUDENT = 0.05  # tau_2; RankCSE Appendix A searches {0.0125, 0.025, 0.05}
DEFAULT_TAU_TEACHER = 0.025  # tau_3; same grid


def listnet(
    student: torch.Tensor,
    teacher: torch.Tensor,
    tau_student: float = DEFAULT_TAU_STUDENT,
    tau_teacher: float = DEFAULT_TAU_TEACHER,
) -> torch.Tensor:
    """-sum_j softmax(S^T(x_i)/tau_3)_j log softmax(S(x_i)/tau_2)_j, mean over i, j != i.

    student, teacher: (B, B) similarity lists, row i = sentence i against every in-batch one.
    """
    target = torch.softmax(off_diagonal(teacher) / tau_teacher, dim=-1)  # (B, B-1)
    log_probs = torch.log_softmax(off_diagonal(student) / tau_student, dim=-1)  # (B, B-1)
    return -(target * log_probs).sum(dim=-1).mean()
