"""ListMLE ranking distillation (RankCSE Eq. 5).

Reference: Liu et al., "RankCSE" (ACL 2023), Section 4.4, Eq. 5, with the permutation
probability of its Section 3; Xia et al., "Listwise Approach to Learning to Rank" (ICML 2008).
"""

import torch

from models.losses.encoding import off_diagonal
from models.losses.listnet import DEFAULT_TAU_STUDENT


def listmle(
    student: torch.Tensor, teacher: torch.Tensor, tau_student: float = DEFAULT_TAU_STUDENT
) -> torch.Tensor:
    """-log P(pi_i^T | S(x_i), tau_2), mean over i.

    pi_i^T sorts row i of the teacher list in descending order; P(pi | S, tau) =
    prod_k e^{s_pi(k)/tau} / sum_{l >= k} e^{s_pi(l)/tau}. As for ListNet (footnote 1) the
    positive pair is left out: the teacher always ranks a sentence first against itself, so
    that term carries no ranking information about the negatives.
    student, teacher: (B, B).
    """
    order = torch.argsort(off_diagonal(teacher), dim=-1, descending=True)  # (B, B-1)
    scores = torch.gather(off_diagonal(student) / tau_student, 1, order)  # (B, B-1)
    # log sum_{l >= k} e^{s_l}: a cumulative logsumexp from the end of each list.
    tail = torch.logcumsumexp(scores.flip(-1), dim=-1).flip(-1)  # (B, B-1)
    return (tail - scores).sum(dim=-1).mean()
