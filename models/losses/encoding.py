"""Batch encoding with gradients, shared by the loss classes."""

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.util import batch_to_device


def embed(model: SentenceTransformer, texts: list[str]) -> torch.Tensor:
    """Sentence embeddings with autograd, through every module of the model (pooling, norm)."""
    features = batch_to_device(model.preprocess(texts), model.device)
    return model(features)["sentence_embedding"]  # (n, dim)


def dropout_views(
    model: SentenceTransformer, texts: list[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two embeddings of each text under independent dropout masks (SimCSE's positives).

    One forward pass over the batch written twice: every row draws its own dropout mask, and a
    single pass of 2B rows is cheaper on CPU than two passes of B.
    """
    both = embed(model, texts + texts)  # (2B, dim)
    return both[: len(texts)], both[len(texts) :]  # (B, dim), (B, dim)


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All-pairs cosine similarity; inputs need not be normalised."""
    a = torch.nn.functional.normalize(a, dim=-1)
    b = torch.nn.functional.normalize(b, dim=-1)
    return a @ b.T  # (len(a), len(b))


def off_diagonal(matrix: torch.Tensor) -> torch.Tensor:
    """Row i without its column i: the lists RankCSE ranks once the positive pair is dropped."""
    n = matrix.shape[0]
    keep = ~torch.eye(n, dtype=torch.bool, device=matrix.device)
    return matrix[keep].view(n, n - 1)  # (n, n-1)
