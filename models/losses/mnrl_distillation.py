"""MNRL on NLI triples with the in-batch similarity matrix distilled from mixed teachers.

MNRL alone (models/losses/mnrl.py) learns from one bit per row: which candidate is the anchor's
entailed hypothesis. The teachers know more: how close every other candidate of the batch is.
Each anchor's row of cosines against [positives; hard negatives] is pulled towards the target
row S^T = alpha S_teacher + (1 - alpha) S_parent, RankCSE's multi-teacher pseudo labels (Liu et
al., "RankCSE", ACL 2023, Section 4.4; papers/rankcse.md) with the frozen parent as the second
teacher, through

- the MNRL cross-entropy with the positive as target (MNRL-SBERT Eq. 1, contradictions as hard
  negatives, as in models/losses/mnrl.py);
- a row-wise KL between the top-one distributions softmax(S^T / tau) and softmax(S / tau)
  (ListNet, RankCSE Eq. 4 with one tau for both; `list_kl`), i.e. in-batch similarity-matrix
  distillation of the teachers' graded order;
- an MSE between the cosine values themselves (relational distillation; Park et al., CVPR 2019),
  which keeps the scale of the scores that STS correlates with.

The teachers' and the parent's embeddings of every training text are computed once before
training (models/training/signals.py caches them), so a step costs what an MNRL step costs.
"""

from collections.abc import Sequence

import torch
from sentence_transformers import SentenceTransformer
from torch import nn

from models.losses.encoding import cosine_matrix, embed
from models.losses.mnrl import DEFAULT_SCALE, mnrl
from models.losses.similarity_distillation import (
    DEFAULT_ALPHA,
    DEFAULT_KL_WEIGHT,
    DEFAULT_MSE_WEIGHT,
    DEFAULT_TAU,
    list_kl,
    mix_teachers,
)


def mnrl_distillation(
    anchors: torch.Tensor,
    candidates: torch.Tensor,
    target: torch.Tensor,
    *,
    scale: float = DEFAULT_SCALE,
    tau: float = DEFAULT_TAU,
    kl_weight: float = DEFAULT_KL_WEIGHT,
    mse_weight: float = DEFAULT_MSE_WEIGHT,
) -> torch.Tensor:
    """MNRL + kl_weight * KL + mse_weight * MSE of cos(anchors, candidates) against target.

    anchors: (B, d) student embeddings of the premises; candidates: (C, d) of the positives,
    then any hard negatives (C = B or 2B; row i's positive is column i); target: (B, C) the mixed
    teacher cosines (mix_teachers). Need not be normalised.
    """
    batch = len(anchors)
    student = cosine_matrix(anchors, candidates)  # (B, C)
    if student.shape != target.shape:
        raise ValueError(f"student matrix {tuple(student.shape)} vs target {tuple(target.shape)}")
    negatives = candidates[batch:] if len(candidates) > batch else None  # (B, d) or None
    loss = mnrl(anchors, candidates[:batch], negatives, scale)
    if kl_weight:
        none = torch.zeros_like(target, dtype=torch.bool)  # (B, C) every column counts
        loss = loss + kl_weight * list_kl(student, target, none, tau)
    if mse_weight:
        loss = loss + mse_weight * ((student - target) ** 2).mean()
    return loss


class MNRLDistillationLoss(nn.Module):
    """mnrl_distillation with targets looked up from embeddings computed before training.

    `texts` lists every training text once, in the order of the rows of `teacher` (N, d_t) and
    `parent` (N, d), the frozen starting point's embeddings.

    Example: `MNRLDistillationLoss(model, texts, teacher, parent)(premises, entailed,
    contradicted).backward()`; pass None for no hard negatives.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        texts: Sequence[str],
        teacher: torch.Tensor,
        parent: torch.Tensor,
        *,
        alpha: float = DEFAULT_ALPHA,
        scale: float = DEFAULT_SCALE,
        tau: float = DEFAULT_TAU,
        kl_weight: float = DEFAULT_KL_WEIGHT,
        mse_weight: float = DEFAULT_MSE_WEIGHT,
    ) -> None:
        super().__init__()
        if not len(texts) == teacher.shape[0] == parent.shape[0]:
            raise ValueError("texts, teacher and parent must list the same training texts")
        self.model = model
        self.rows = {text: row for row, text in enumerate(texts)}
        self.teacher = torch.nn.functional.normalize(teacher.float(), dim=-1)  # (N, d_t)
        self.parent = torch.nn.functional.normalize(parent.float(), dim=-1)  # (N, d)
        self.alpha = alpha
        self.scale = scale
        self.tau = tau
        self.kl_weight = kl_weight
        self.mse_weight = mse_weight

    def target(self, anchors: list[str], candidates: list[str]) -> torch.Tensor:
        """S^T of the anchors against the candidates. (B, C)"""
        a = torch.tensor([self.rows[text] for text in anchors])  # (B,)
        c = torch.tensor([self.rows[text] for text in candidates])  # (C,)
        return mix_teachers(
            self.teacher[a] @ self.teacher[c].T,  # (B, C)
            self.parent[a] @ self.parent[c].T,  # (B, C)
            self.alpha,
        )

    def forward(
        self, anchors: list[str], positives: list[str], hard_negatives: list[str] | None = None
    ) -> torch.Tensor:
        candidates = positives + (hard_negatives or [])
        embedded = embed(self.model, anchors + candidates)  # (B + C, d)
        n = len(anchors)
        return mnrl_distillation(
            embedded[:n],
            embedded[n:],
            self.target(anchors, candidates).to(embedded.device),
            scale=self.scale,
            tau=self.tau,
            kl_weight=self.kl_weight,
            mse_weight=self.mse_weight,
        )
