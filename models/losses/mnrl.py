"""Multiple negatives ranking loss on NLI pairs, with optional hard negatives.

Reference: "Sentence embeddings with MNRL-SBERT" (mnrl-sbert), Section III.B, Eq. 1: in-batch
negatives over (anchor, positive) entailment pairs. Section III.B describes, and leaves to
future work, triplets whose third member (a contradiction hypothesis) is a hard negative; here
every anchor is scored against all positives and all hard negatives of the batch.
"""

import torch
from sentence_transformers import SentenceTransformer
from torch import nn

from models.losses.encoding import cosine_matrix, embed

DEFAULT_SCALE = 20.0  # 1 / temperature; the sentence-transformers MNRL default (tau = 0.05)


def mnrl(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    hard_negatives: torch.Tensor | None = None,
    scale: float = DEFAULT_SCALE,
) -> torch.Tensor:
    """Cross-entropy of each anchor against [positives; hard negatives], target = its positive.

    anchors, positives: (B, dim); hard_negatives: (B, dim) or None. Mean over the batch.
    """
    candidates = positives if hard_negatives is None else torch.cat([positives, hard_negatives])
    logits = cosine_matrix(anchors, candidates) * scale  # (B, B) or (B, 2B)
    targets = torch.arange(len(anchors), device=anchors.device)  # (B,)
    return nn.functional.cross_entropy(logits, targets)


class MNRLLoss(nn.Module):
    """Example: `MNRLLoss(model)(premises, entailed, contradicted)`; pass None for no negatives."""

    def __init__(self, model: SentenceTransformer, scale: float = DEFAULT_SCALE) -> None:
        super().__init__()
        self.model = model
        self.scale = scale

    def compute_loss_from_embeddings(
        self,
        anchors: torch.Tensor,
        positives: torch.Tensor,
        hard_negatives: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return mnrl(anchors, positives, hard_negatives, self.scale)

    def forward(
        self, anchors: list[str], positives: list[str], hard_negatives: list[str] | None = None
    ) -> torch.Tensor:
        texts = anchors + positives + (hard_negatives or [])
        embedded = embed(self.model, texts)  # (2B or 3B, dim)
        n = len(anchors)
        negatives = embedded[2 * n :] if hard_negatives else None
        return self.compute_loss_from_embeddings(embedded[:n], embedded[n : 2 * n], negatives)
