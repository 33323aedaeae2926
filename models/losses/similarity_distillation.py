"""Similarity distillation over long lists: a batch against a reference set (memory table).

The student's similarity list of each batch sentence against R reference sentences (R in the
thousands: a table of the student's own, detached embeddings, with the batch's rows live) is
pulled towards a target list mixed from two teachers, as in RankCSE's multi-teacher pseudo
labels S^T = alpha S_1^T + (1 - alpha) S_2^T (Liu et al., "RankCSE", ACL 2023, Section 4.4;
papers/rankcse.md), here with S_1 = all-mpnet-base-v2's cosines and S_2 = the frozen base
student's own cosines, which keeps the student near its start. Two terms:

- a row-wise KL between the top-one distributions softmax(S^T / tau) and softmax(S / tau) over
  the whole list (ListNet, Cao et al. ICML 2007 / RankCSE Eq. 4, with one tau for both): the
  shape of each sentence's nearest neighbourhood;
- an MSE between the cosine values themselves on each row's top-k target neighbours (plus any
  extra columns the caller marks, e.g. a random sample): the absolute scale of the close pairs
  that STS scores, as in relational / similarity-preserving distillation (Park et al., "Relational
  Knowledge Distillation", CVPR 2019; Tung & Mori, "Similarity-Preserving Knowledge
  Distillation", ICCV 2019).

Each batch row's own column in the reference (the sentence against itself) is excluded from both
terms when `self_columns` names it.
"""

import torch
from sentence_transformers import SentenceTransformer
from torch import nn

from models.losses.encoding import embed

DEFAULT_ALPHA = 0.67  # weight of the strong teacher (all-mpnet-base-v2) in S^T
DEFAULT_TAU = 0.05  # temperature of both top-one distributions
DEFAULT_KL_WEIGHT = 1.0
DEFAULT_MSE_WEIGHT = 10.0
DEFAULT_TOP_K = 64  # target neighbours per row whose cosine values the MSE matches
DEFAULT_RANDOM_COLUMNS = 1024  # random reference columns per step added to the MSE

_MASKED = -1e9  # logit given to excluded columns before a softmax


def mix_teachers(
    teacher: torch.Tensor, base: torch.Tensor, alpha: float = DEFAULT_ALPHA
) -> torch.Tensor:
    """S^T = alpha S_teacher + (1 - alpha) S_base (RankCSE Sec. 4.4). Any matching shapes."""
    if teacher.shape != base.shape:
        raise ValueError(f"teacher {tuple(teacher.shape)} and base {tuple(base.shape)} differ")
    return alpha * teacher + (1 - alpha) * base


def self_mask(target: torch.Tensor, self_columns: torch.Tensor | None) -> torch.Tensor:
    """True where row i meets its own sentence: column self_columns[i] (-1: none). (B, R)"""
    mask = torch.zeros_like(target, dtype=torch.bool)  # (B, R)
    if self_columns is not None:
        rows = torch.arange(target.shape[0], device=target.device)  # (B,)
        present = self_columns >= 0  # (B,)
        mask[rows[present], self_columns[present]] = True
    return mask


def list_kl(
    student: torch.Tensor,
    target: torch.Tensor,
    excluded: torch.Tensor,
    tau: float = DEFAULT_TAU,
) -> torch.Tensor:
    """sum_j p_ij (log p_ij - log q_ij), p = softmax(target_i / tau), q = softmax(student_i / tau)
    over the columns not excluded, mean over rows. student, target, excluded: (B, R)."""
    log_p = torch.log_softmax((target / tau).masked_fill(excluded, _MASKED), dim=-1)  # (B, R)
    log_q = torch.log_softmax((student / tau).masked_fill(excluded, _MASKED), dim=-1)  # (B, R)
    terms = (log_p.exp() * (log_p - log_q)).masked_fill(excluded, 0.0)  # (B, R)
    return terms.sum(dim=-1).mean()


def neighbour_mse(
    student: torch.Tensor,
    target: torch.Tensor,
    excluded: torch.Tensor,
    top_k: int = DEFAULT_TOP_K,
    extra_columns: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean of (student_ij - target_ij)^2 over each row's top_k target columns (ties broken by
    torch.topk) and the columns marked in extra_columns (B, R) bool, excluded ones never."""
    selected = torch.zeros_like(excluded)  # (B, R)
    if top_k > 0:
        ranked = target.masked_fill(excluded, float("-inf"))  # (B, R)
        top = ranked.topk(min(top_k, target.shape[1]), dim=-1).indices  # (B, k)
        selected.scatter_(1, top, True)
    if extra_columns is not None:
        selected |= extra_columns
    selected &= ~excluded
    if not bool(selected.any()):
        return (student * 0.0).sum()
    return ((student - target)[selected] ** 2).mean()


def similarity_distillation(
    batch: torch.Tensor,
    reference: torch.Tensor,
    target: torch.Tensor,
    *,
    self_columns: torch.Tensor | None = None,
    extra_columns: torch.Tensor | None = None,
    tau: float = DEFAULT_TAU,
    kl_weight: float = DEFAULT_KL_WEIGHT,
    mse_weight: float = DEFAULT_MSE_WEIGHT,
    top_k: int = DEFAULT_TOP_K,
) -> torch.Tensor:
    """kl_weight * list_kl + mse_weight * neighbour_mse of cos(batch, reference) against target.

    batch: (B, d) student embeddings with grad; reference: (R, d) student embeddings of the
    reference set (need not be normalised); target: (B, R) mixed teacher cosines (mix_teachers);
    self_columns: (B,) long, the column of each row's own sentence in the reference, -1 if none.
    """
    batch = torch.nn.functional.normalize(batch, dim=-1)  # (B, d)
    reference = torch.nn.functional.normalize(reference, dim=-1)  # (R, d)
    student = batch @ reference.T  # (B, R)
    if student.shape != target.shape:
        raise ValueError(f"student list {tuple(student.shape)} vs target {tuple(target.shape)}")
    excluded = self_mask(target, self_columns)  # (B, R)
    loss = student.new_zeros(())
    if kl_weight:
        loss = loss + kl_weight * list_kl(student, target, excluded, tau)
    if mse_weight:
        loss = loss + mse_weight * neighbour_mse(student, target, excluded, top_k, extra_columns)
    return loss


class SimilarityDistillationLoss(nn.Module):
    """similarity_distillation of each batch against every training sentence.

    The reference set is the whole training text: a table of the student's own embeddings,
    started from the frozen parent's and refreshed (detached) with each batch's live rows, so
    every row of the target is a list of N similarities, not the batch's B. The target mixes
    the teacher's and the frozen parent's cosines (mix_teachers), both from embeddings computed
    once before training (models/training/signals.py caches them).

    Example: `SimilarityDistillationLoss(model, teacher, parent)(texts, rows).backward()` with
    `rows` the indices of `texts` in the training text.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        teacher: torch.Tensor,
        parent: torch.Tensor,
        *,
        alpha: float = DEFAULT_ALPHA,
        tau: float = DEFAULT_TAU,
        kl_weight: float = DEFAULT_KL_WEIGHT,
        mse_weight: float = DEFAULT_MSE_WEIGHT,
        top_k: int = DEFAULT_TOP_K,
        random_columns: int = DEFAULT_RANDOM_COLUMNS,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if teacher.shape[0] != parent.shape[0]:
            raise ValueError("teacher and parent must embed the same training sentences")
        self.model = model
        self.teacher = torch.nn.functional.normalize(teacher.float(), dim=-1)  # (N, d_t)
        self.parent = torch.nn.functional.normalize(parent.float(), dim=-1)  # (N, d)
        self.table = self.parent.clone()  # (N, d) the student's own, refreshed per batch
        self.alpha = alpha
        self.tau = tau
        self.kl_weight = kl_weight
        self.mse_weight = mse_weight
        self.top_k = top_k
        self.random_columns = random_columns
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, texts: list[str], rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(torch.long).cpu()  # (B,)
        with torch.no_grad():
            target = mix_teachers(
                self.teacher[rows] @ self.teacher.T,  # (B, N)
                self.parent[rows] @ self.parent.T,  # (B, N)
                self.alpha,
            )
        batch = torch.nn.functional.normalize(embed(self.model, texts), dim=-1)  # (B, d)
        device = batch.device
        reference = self.table.to(device).index_put((rows.to(device),), batch)  # (N, d)
        extra = None
        if self.random_columns > 0:
            columns = torch.randint(
                0, len(self.table), (self.random_columns,), generator=self.generator
            )
            extra = torch.zeros(target.shape, dtype=torch.bool)  # (B, N)
            extra[:, columns] = True
            extra = extra.to(device)
        loss = similarity_distillation(
            batch,
            reference,
            target.to(device),
            self_columns=rows.to(device),
            extra_columns=extra,
            tau=self.tau,
            kl_weight=self.kl_weight,
            mse_weight=self.mse_weight,
            top_k=self.top_k,
        )
        self.table[rows] = batch.detach().to(self.table.device)
        return loss
