"""ONNX Runtime's runner of an exported sentence pipeline (models/backends.py): the pipeline's
graph run on padded passes or, where the variant holds the transformer re-fed for packed rows
(models/onnx_export.py), every pass packed (models/packing.py) and its token states pooled here.

Packed, batches of 8 and 16 short texts ran 1.23-1.43x as fast as padded passes cut by length,
batches of 64 1.06-1.09x, single texts and long ones 0.94-1.02x, within the noise of such runs
(AMD EPYC Zen 3, docs/benchmarks.md), with texts too long to share a row costed as padded
(models/pass_slices.py).
"""

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from models.packing import PACK_MASK, POSITION_IDS, ROW_TOKENS, Pooling, pack

if TYPE_CHECKING:
    import onnxruntime as ort


def _session(path: Path, threads: int | None) -> "ort.InferenceSession":
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    # One graph per call: inter-op parallelism only adds threads competing for the cores.
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxRunner:
    """Tokenizer features in, (texts, dim) embeddings out. `pooling` given, the graph at `path`
    is a packed transformer's (models/onnx_export.py export_packed_onnx), pooled that way."""

    def __init__(self, path: Path, threads: int | None, pooling: Pooling | None = None) -> None:
        self.session = _session(path, threads)
        names = [node.name for node in self.session.get_inputs()]
        self.pooling = pooling
        self.packed = pooling is not None
        # The token inputs a packed graph takes, besides the positions and the mask.
        others = [name for name in names if name not in (POSITION_IDS, PACK_MASK)]
        self.packed_inputs = others if self.packed else []
        self.inputs = names

    def __call__(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        if self.pooling is None:
            return self.session.run(None, {name: features[name] for name in self.inputs})[0]
        rows = pack(features, self.packed_inputs, ROW_TOKENS, 1, np.dtype(np.float32))
        states = self.session.run(None, {name: rows.inputs[name] for name in self.inputs})[0]
        return rows.pool(states, self.pooling)  # (texts, dim)
