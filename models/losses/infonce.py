"""InfoNCE with dropout positives (unsupervised SimCSE).

Reference: Gao et al., "SimCSE" (EMNLP 2021), Eq. 1; the same objective is RankEncoder's l_cl
(Seonwoo et al., ACL 2023, Eq. 1) and RankCSE's L_infoNCE (Liu et al., ACL 2023, Eq. 1).
"""

import torch
from sentence_transformers import SentenceTransformer
from torch import nn

from models.losses.encoding import cosine_matrix, dropout_views

DEFAULT_TEMPERATURE = 0.05  # tau_1 of SimCSE and RankCSE Appendix A


def info_nce(
    anchors: torch.Tensor, positives: torch.Tensor, temperature: float = DEFAULT_TEMPERATURE
) -> torch.Tensor:
    """-log( e^{cos(v_i, v_i^+)/tau} / sum_j e^{cos(v_i, v_j^+)/tau} ), averaged over i.

    The papers write a sum over the batch; the mean (as SimCSE's code does) keeps the loss
    scale independent of the batch size. anchors, positives: (B, dim).
    """
    logits = cosine_matrix(anchors, positives) / temperature  # (B, B)
    targets = torch.arange(len(anchors), device=anchors.device)  # (B,)
    return nn.functional.cross_entropy(logits, targets)


class InfoNCELoss(nn.Module):
    """SimCSE: each sentence's second dropout view is its positive, the others' are negatives.

    Example: `InfoNCELoss(model)(["a cat sat.", "stocks fell."]).backward()`.
    """

    def __init__(
        self, model: SentenceTransformer, temperature: float = DEFAULT_TEMPERATURE
    ) -> None:
        super().__init__()
        self.model = model
        self.temperature = temperature

    def compute_loss_from_embeddings(
        self, view1: torch.Tensor, view2: torch.Tensor
    ) -> torch.Tensor:
        return info_nce(view1, view2, self.temperature)

    def forward(self, texts: list[str]) -> torch.Tensor:
        view1, view2 = dropout_views(self.model, texts)  # (B, dim) each
        return self.compute_loss_from_embeddings(view1, view2)
