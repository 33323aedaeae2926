"""Encoder backends: one checkpoint run by torch (fp32 or bf16 autocast), ONNX Runtime (fp32 or
dynamic int8) or OpenVINO (fp32, int8 weights, or int8 weights and activations), and the
offline export of the non-torch variants.

A variant is a folder `<root>/<backend>/` holding the exported graph and `variant.json` (the
backend, the export recipe's format and the checksum of the checkpoint it was exported from).
The graph is the whole sentence-transformers pipeline (transformer, pooling, normalisation) as
one function of the tokenizer's tensors, so a runner only needs the tokenizer around it; an
ONNX variant of a pipeline whose passes can be packed holds its transformer re-fed for packed
rows instead (models/onnx_runner.py), whose token states the runner pools. Export
reads the loaded local checkpoint only: torch traces it to ONNX (models/onnx_export.py), and
`onnx-int8` rewrites that file's weight products in per-token int8 (models/onnx_int8.py);
OpenVINO converts it to its IR (models/openvino_export.py). Nothing is downloaded.
"""

import importlib.util
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from models.atomic import atomic_directory, atomic_write_json
from models.onnx_export import export_onnx, export_packed_onnx
from models.onnx_int8 import quantize_int8
from models.onnx_runner import OnnxRunner
from models.openvino_export import calibration_samples, convert_openvino
from models.openvino_runner import Graph, OpenVinoRunner, runs_in_bf16
from models.packing import Pooling, packable_pooling
from models.tokenizing import token_arrays

VARIANT_FORMAT = 5  # bump when the export recipe changes: older variants are re-exported
VARIANT_JSON = "variant.json"


class Backend(StrEnum):
    TORCH = "torch"  # fp32, the reference every other backend is checked against
    TORCH_BF16 = "torch-bf16"  # bf16 autocast: AMX or AVX512-BF16 matmuls, fp32 elsewhere
    ONNX = "onnx"
    ONNX_INT8 = "onnx-int8"
    OPENVINO = "openvino"
    OPENVINO_INT8 = "openvino-int8"  # int8 weights, activations quantised as each pass runs
    OPENVINO_INT8_STATIC = "openvino-int8-static"  # activation scales calibrated at export


EXPORTED = (
    Backend.ONNX,
    Backend.ONNX_INT8,
    Backend.OPENVINO,
    Backend.OPENVINO_INT8,
    Backend.OPENVINO_INT8_STATIC,
)
# The graph each OpenVINO backend runs, which decides its precision on a CPU (runs_in_bf16).
OPENVINO_GRAPHS: dict[Backend, Graph] = {
    Backend.OPENVINO: "fp32",
    Backend.OPENVINO_INT8: "int8-weights",
    Backend.OPENVINO_INT8_STATIC: "int8-static",
}
OPENVINO = tuple(OPENVINO_GRAPHS)
# The import names each backend needs at run time (int8 quantisation also needs `onnx`).
REQUIRES: dict[Backend, tuple[str, ...]] = {
    Backend.TORCH: (),
    Backend.TORCH_BF16: (),
    Backend.ONNX: ("onnxruntime",),
    Backend.ONNX_INT8: ("onnxruntime", "onnx"),
    Backend.OPENVINO: ("openvino",),
    Backend.OPENVINO_INT8: ("openvino", "nncf"),
    Backend.OPENVINO_INT8_STATIC: ("openvino", "nncf"),
}
# What one forward pass costs on a CPU beyond its tokens, in tokens' worth of work
# (token_budget_slices in models/encoder.py). Chosen among 16, 64, 256 and 1,024 by timing each
# backend on batches of 16 and 64 short and long texts, the costs alternating in one process
# (AMX Xeon, 2 threads). ONNX Runtime does best with small passes; OpenVINO and bf16 autocast
# with the fewest, as their passes cost more the more shapes they see: a 1,024 cost is the
# whole default budget.
PASS_COST_TOKENS: dict[Backend, int] = {
    Backend.TORCH: 64,
    Backend.TORCH_BF16: 1024,
    Backend.ONNX: 16,
    Backend.ONNX_INT8: 16,
    Backend.OPENVINO: 1024,
    Backend.OPENVINO_INT8: 1024,  # OpenVINO's, not timed apart
    Backend.OPENVINO_INT8_STATIC: 1024,  # likewise
}
_GRAPH_FILE = {
    Backend.ONNX: "model.onnx",
    Backend.ONNX_INT8: "model-int8.onnx",
    Backend.OPENVINO: "model.xml",  # plus model.bin beside it
    Backend.OPENVINO_INT8: "model-int8.xml",
    Backend.OPENVINO_INT8_STATIC: "model-int8-static.xml",
}
# An ONNX variant's graph where the pipeline's passes can be packed (models/packing.py): its
# transformer re-fed for packed rows, in place of the pipeline.
_PACKED_ONNX_FILE = {
    Backend.ONNX: "model-packed.onnx",
    Backend.ONNX_INT8: "model-packed-int8.onnx",
}


class BackendUnavailableError(RuntimeError):
    """The backend's package is not installed (see pyproject.toml's `backends` extra)."""


def available(backend: Backend) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in REQUIRES[backend])


def require(backend: Backend) -> None:
    missing = [name for name in REQUIRES[backend] if importlib.util.find_spec(name) is None]
    if missing:
        raise BackendUnavailableError(
            f"encoder backend {backend} needs {', '.join(missing)}: pip install -e '.[backends]'"
        )


class Runner(Protocol):
    """A sentence pipeline run outside sentence-transformers: tokenizer tensors in, (batch,
    dim) embeddings out. `packed`: whether passes of several texts are packed in rows
    (models/packing.py), so that padding costs nothing."""

    packed: bool

    def __call__(self, features: Mapping[str, np.ndarray]) -> np.ndarray: ...


def openvino_precisions() -> dict[str, str]:
    """The precision each OpenVINO backend runs in on this CPU: parity numbers and `auto`'s
    choice hold only for the precisions they were measured in."""
    return {b.value: "bf16" if runs_in_bf16(g) else "f32" for b, g in OPENVINO_GRAPHS.items()}


def load_runner(
    backend: Backend,
    directory: Path,
    threads: int | None = None,
    single_lengths: Sequence[int] = (),
    on_demand_lengths: Sequence[int] = (),
    pooling: Pooling | None = None,
) -> Runner:
    """The runner of the variant in `directory` (a folder that `ensure_variant` returned).
    OpenVINO's runs single texts of up to each of `single_lengths` tokens in a graph compiled
    for that shape, and of `on_demand_lengths` once such texts keep coming
    (models/openvino_static.py), and packs the texts of other passes into rows
    when the pipeline's `pooling` is given (models/packing.py). ONNX Runtime's packs every pass
    where the variant holds a packed graph, which needs `pooling`."""
    require(backend)
    graph = directory / _GRAPH_FILE[backend]
    if backend in OPENVINO:
        return OpenVinoRunner(
            graph,
            threads,
            int8_weights=backend == Backend.OPENVINO_INT8,
            bf16=runs_in_bf16(OPENVINO_GRAPHS[backend]),
            single_lengths=single_lengths,
            on_demand_lengths=on_demand_lengths,
            word_embeddings_outside=backend == Backend.OPENVINO_INT8_STATIC,
            pooling=pooling,
        )
    packed = directory / _PACKED_ONNX_FILE[backend]
    if not packed.is_file():
        return OnnxRunner(graph, threads)
    if pooling is None:
        raise ValueError(f"{backend}'s variant is packed: its runner needs the pipeline's pooling")
    return OnnxRunner(packed, threads, pooling)


def _onnx_graph(model: SentenceTransformer, backend: Backend) -> tuple[str, Callable[..., None]]:
    """The file an ONNX variant of `model` holds its graph in, and the export that traces it."""
    if packable_pooling(model) is None:
        return _GRAPH_FILE[backend], export_onnx
    return _PACKED_ONNX_FILE[backend], export_packed_onnx


def export_variant(
    model: SentenceTransformer, backend: Backend, out_dir: Path, calibration: Path | None = None
) -> None:
    """Write `backend`'s graph of the loaded checkpoint into `out_dir` (which must exist);
    `calibration`: a file of sentences, one per line, that static int8 calibrates on."""
    require(backend)
    # Two texts of different lengths: the trace then contains the padding path.
    arrays = token_arrays(model, ["a", "a sentence of a few more words"])
    example = {name: torch.from_numpy(values) for name, values in arrays.items()}
    if backend == Backend.ONNX:
        name, export = _onnx_graph(model, backend)
        export(model, out_dir / name, example)
        return
    samples = None
    if backend == Backend.OPENVINO_INT8_STATIC:
        if calibration is None:
            raise ValueError(f"{backend} needs a file of calibration sentences")
        samples = calibration_samples(lambda texts: token_arrays(model, texts), calibration)
    fp32 = out_dir / "fp32.onnx.tmp"
    try:
        if backend == Backend.ONNX_INT8:
            name, export = _onnx_graph(model, backend)
            export(model, fp32, example)
            quantize_int8(fp32, out_dir / name)
        else:
            export_onnx(model, fp32, example)
            convert_openvino(
                fp32,
                out_dir / _GRAPH_FILE[backend],
                int8_weights=backend == Backend.OPENVINO_INT8,
                calibration=samples,
            )
    finally:
        fp32.unlink(missing_ok=True)


def _variant_matches(directory: Path, backend: Backend, checksum: str) -> bool:
    try:
        meta = json.loads((directory / VARIANT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        meta.get("backend") == backend.value
        and meta.get("format") == VARIANT_FORMAT
        and meta.get("source_checksum") == checksum
        and any(
            (directory / files[backend]).is_file()
            for files in (_GRAPH_FILE, _PACKED_ONNX_FILE)
            if backend in files
        )
    )


def build_variant(
    model: SentenceTransformer,
    checksum: str,
    backend: Backend,
    root: Path,
    calibration: Path | None = None,
) -> Path:
    """Export `backend` into `<root>/<backend>/` atomically, unless a matching one is there
    (`calibration`: as for export_variant)."""
    target = root / backend.value
    if _variant_matches(target, backend, checksum):
        return target
    if target.exists():
        # An older recipe or another checkpoint's export: derived data, rebuilt below.
        shutil.rmtree(target)
    with atomic_directory(target) as tmp:
        export_variant(model, backend, tmp, calibration)
        meta = {"backend": backend.value, "format": VARIANT_FORMAT, "source_checksum": checksum}
        atomic_write_json(tmp / VARIANT_JSON, meta, indent=2)
    return target


def variant_cache(root: Path, checksum: str) -> Path:
    """Where, under a cache `root`, the exported variants of the checkpoint with `checksum` live:
    one folder per checkpoint, one per backend inside it."""
    return root / checksum[:16]


def ensure_variant(
    model: SentenceTransformer,
    checksum: str,
    backend: Backend,
    *,
    prebuilt: Path | None,
    cache: Path | None,
    calibration: Path | None = None,
) -> Path:
    """The variant folder to run: the prebuilt one (a bundle's) when it matches the
    checkpoint, else the cache's, exported into it once when absent."""
    if prebuilt is not None and _variant_matches(prebuilt / backend.value, backend, checksum):
        return prebuilt / backend.value
    if cache is None:
        raise FileNotFoundError(
            f"no prebuilt {backend} variant and no cache directory to export one into"
        )
    return build_variant(model, checksum, backend, cache, calibration)
