"""Exporting a sentence-transformers pipeline to ONNX: the first step of every exported variant
(models/backends.py; `onnx-int8` then rewrites the file, models/onnx_int8.py). For
ONNX Runtime, a pipeline whose passes can be packed (models/packing.py) has its transformer
exported re-fed for packed rows instead, which it runs on every pass (models/onnx_runner.py)."""

import copy
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from models.packing import ATTENTION_MASK, PACK_MASK, POSITION_IDS, ROW_TOKENS, pack

ONNX_OPSET = 17
PACKED_STATES = "token_states"


class _SentenceGraph(torch.nn.Module):
    """The whole pipeline as a function of positional tensors, which is what tracing needs."""

    def __init__(self, model: SentenceTransformer, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        features = dict(zip(self.names, tensors, strict=True))
        return self.model(features)["sentence_embedding"]


class _PackedTransformer(torch.nn.Module):
    """The pipeline's transformer given each row's positions and block-diagonal mask, as
    models/torch_packing.py runs it: its token states out, pooled by the runner."""

    def __init__(self, model: SentenceTransformer, names: list[str]) -> None:
        super().__init__()
        self.transformer = model[0].auto_model
        self.names = names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        *tokens, positions, mask = tensors
        return self.transformer(
            **dict(zip(self.names, tokens, strict=True)),
            position_ids=positions,
            attention_mask=mask,  # 4-D and additive: transformers adds it to the scores as it is
        ).last_hidden_state  # (rows, tokens, dim)


def _eager_copy(model: SentenceTransformer) -> SentenceTransformer:
    """A copy of `model`, on the CPU that the variants run on, with attention in plain
    products."""
    # torch's SDPA traces into a graph with a NaN guard after each softmax, which kept
    # OpenVINO's CPU plugin from fusing attention into one kernel. Exported eagerly,
    # `openvino-int8-static` ran 1.02-1.18x as fast, and the other exported backends 1.1-1.3x on
    # long texts and 0.88-1.11x on short ones (AMD EPYC Zen 4, alternating in one process;
    # docs/benchmarks.md).
    model = copy.deepcopy(model).to("cpu")
    model[0].auto_model.set_attn_implementation("eager")
    return model


def _trace(
    graph: torch.nn.Module,
    target: Path,
    example: Mapping[str, torch.Tensor],
    output: str,
    dynamic: dict[str, dict[int, str]],
) -> None:
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        # The trace warns about every Python-level shape check in transformers: noise here,
        # since the parity check compares the exported graph with torch on real text.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph.eval(),
            tuple(tensor.cpu() for tensor in example.values()),
            str(target),
            input_names=list(example),
            output_names=[output],
            dynamic_axes=dynamic,
            opset_version=ONNX_OPSET,
            dynamo=False,  # the TorchScript tracer: no onnxscript needed, and it handles BERT
        )


def export_onnx(
    model: SentenceTransformer, target: Path, example: Mapping[str, torch.Tensor]
) -> None:
    """Trace `model` into the ONNX file `target`, with batch and token axes dynamic; `example`:
    the tokenizer's tensors of two texts of different lengths, so that the trace contains the
    padding path."""
    names = list(example)
    dynamic = {name: {0: "batch", 1: "tokens"} for name in names}
    dynamic["sentence_embedding"] = {0: "batch"}
    graph = _SentenceGraph(_eager_copy(model), names)
    _trace(graph, target, example, "sentence_embedding", dynamic)


def export_packed_onnx(
    model: SentenceTransformer, target: Path, example: Mapping[str, torch.Tensor]
) -> None:
    """Trace `model`'s transformer, re-fed for packed rows, into the ONNX file `target`: the
    token inputs of `example` (the tokenizer's tensors of texts that share a row) packed, plus
    `position_ids` (rows, tokens) and the additive `pack_mask` (rows, 1, tokens or 1, tokens) in
    float32; out the token states (rows, tokens, dim)."""
    names = [name for name in example if name != ATTENTION_MASK]
    features = {name: tensor.numpy() for name, tensor in example.items()}
    rows = pack(features, names, ROW_TOKENS, 1, np.dtype(np.float32)).inputs
    packed = {name: torch.from_numpy(rows[name]) for name in [*names, POSITION_IDS, PACK_MASK]}
    dynamic = {name: {0: "rows", 1: "tokens"} for name in [*names, POSITION_IDS]}
    dynamic[PACK_MASK] = {0: "rows", 2: "queries", 3: "tokens"}
    dynamic[PACKED_STATES] = {0: "rows", 1: "tokens"}
    _trace(_PackedTransformer(_eager_copy(model), names), target, packed, PACKED_STATES, dynamic)
