"""RankCSE's ranking consistency between two dropout views (Eq. 2).

Reference: Liu et al., "RankCSE: Unsupervised Sentence Representations Learning via Learning
to Rank" (ACL 2023), Section 4.3.
"""

import math

import torch

from models.losses.infonce import DEFAULT_TEMPERATURE


def js_ranking_consistency(
    similarity: torch.Tensor, temperature: float = DEFAULT_TEMPERATURE
) -> torch.Tensor:
    """Eq. 2: JS(P_i || Q_i) of the top-one distributions of S(x_i) and S(x_i)', mean over i.

    similarity: (B, B) with entry (i, j) = cos(f(x_i), f(x_j)'). Row i is S(x_i); row i of the
    transpose is S(x_i)' = {cos(f(x_i)', f(x_j))}_j. P_i, Q_i = softmax of each row / tau_1.
    """
    log_p = torch.log_softmax(similarity / temperature, dim=-1)  # (B, B)
    log_q = torch.log_softmax(similarity.T / temperature, dim=-1)  # (B, B)
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - math.log(2.0)  # (B, B)
    kl_pm = (log_p.exp() * (log_p - log_m)).sum(dim=-1)  # (B,)
    kl_qm = (log_q.exp() * (log_q - log_m)).sum(dim=-1)  # (B,)
    return (0.5 * (kl_pm + kl_qm)).mean()
