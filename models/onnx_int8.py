"""`onnx-int8`'s recipe: every product of an activation with a weight matrix in an exported
ONNX graph (models/onnx_export.py) rewritten as dynamic int8 for ONNX Runtime, with each
token's activations quantised on their own range.

Each row x of the activations (a token's features) is quantised asymmetrically, as its pass
runs: scale s = (max(x, 0) - min(x, 0)) / 255 and zero point z = round(-min(x, 0) / s), so
q = round(x / s) + z in [0, 255]. Weights are quantised per output column j, symmetrically at
7 bits (w = ws_j * Wq, |Wq| <= 63): without AVX-512 VNNI, ONNX Runtime multiplies u8 x s8 with
vpmaddubsw, whose 16-bit pair sums can saturate at 8. Then

    x . W[:, j] ~ s * ws_j * (q . Wq[:, j] - z * sum_k Wq[k, j]),

and ONNX Runtime's MatMulIntegerToFloat takes one zero point per tensor only, so the term in z is
multiplied inside the same integer product: q gets E more columns each holding z, Wq E more rows
that sum to -sum_k Wq[k, j], each within +-63 (E = 8-59 for MiniLM-L6, against K = 384 or 1,536).

Why per token: ONNX Runtime's own dynamic int8 (`quantize_dynamic`) scales a pass's activations
as one tensor, so a text's embedding depended on which texts shared its pass, and on MiniLM's
full dev sets the feed-forward layers in int8 failed the parity check at some batch sizes
(Spearman gap 0.21-0.26), so only the attention projections were int8. Per token, every weight
product is int8 and a text encodes the same in any pass: the gap reads 0.11 (mean cosine 0.9978)
at batches of 1, 8 and 64. Against the attention-only recipe, alternating in one process on an
AMD EPYC Zen 3 (no VNNI): long texts in batches of 8 and 64 1.20x and 1.23x as fast, short ones
1.02-1.09x, single texts 0.99-1.00x (docs/benchmarks.md). The products that read the same tokens
(query, key, value) share one quantisation: quantised once per product, single texts ran 0.90x.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WEIGHT_LEVELS = 63  # 7-bit symmetric weights, against vpmaddubsw's saturation (above)
ACTIVATION_LEVELS = 255


def quantize_weights(weights: np.ndarray, extra: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-column symmetric 7-bit weights with the rows that carry the zero point's term
    appended, at least `extra` of them (those past the need are 0): (K + E, n) int8, and the
    (n,) float32 scales."""
    scales = np.maximum(np.abs(weights).max(axis=0), 1e-12) / WEIGHT_LEVELS  # (n,)
    quantized = np.clip(np.round(weights / scales), -WEIGHT_LEVELS, WEIGHT_LEVELS)  # (K, n)
    remainder = -quantized.sum(axis=0)  # (n,): what the E zero point rows must add up to
    rows = []
    while len(rows) < max(extra, 1) or np.any(remainder):
        row = np.clip(remainder, -WEIGHT_LEVELS, WEIGHT_LEVELS)
        rows.append(row)
        remainder = remainder - row
    augmented = np.concatenate([quantized, np.stack(rows)]).astype(np.int8)  # (K + E, n)
    return augmented, scales.astype(np.float32)


class _Rewriter:
    """Builds the nodes that replace MatMuls by weights: each activation that such products
    share (the attention's query, key and value projections read the same tokens) is
    quantised once, by the first of them."""

    def __init__(self, weights: dict[str, list[np.ndarray]]) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._constants: set[str] = set()
        # Per activation, the zero point columns its products need: the most any of them does.
        self._extra = {
            x: max(quantize_weights(w)[0].shape[0] - w.shape[0] for w in matrices)
            for x, matrices in weights.items()
        }
        self._quantized: dict[str, tuple[str, str]] = {}

    def constant(self, name: str, value: np.ndarray) -> str:
        if name not in self._constants:
            self._constants.add(name)
            self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attributes: object) -> str:
        domain = "com.microsoft" if op == "MatMulIntegerToFloat" else ""
        self.nodes.append(
            helper.make_node(op, inputs, [output], name=output, domain=domain, **attributes)
        )
        return output

    def quantized(self, x: str, k: int) -> tuple[str, str]:
        """`x` (..., K) as u8 with its zero point columns appended (..., K + E), and each
        token's scale (..., 1)."""
        if x in self._quantized:
            return self._quantized[x]
        c, node, at = self.constant, self.node, f"{x}/int8/"
        extra = self._extra[x]
        high = node("ReduceMax", [x], at + "max", axes=[-1], keepdims=1)  # (..., 1)
        low = node("ReduceMin", [x], at + "min", axes=[-1], keepdims=1)  # (..., 1)
        # The range holds 0, and is never empty: a row of zeros gets a scale all the same.
        high = node("Max", [high, c("int8/tiny", np.array(1e-12, np.float32))], at + "high")
        low = node("Min", [low, c("int8/zero", np.array(0.0, np.float32))], at + "low")
        spread = node("Sub", [high, low], at + "spread")
        step = c("int8/step", np.array(1 / ACTIVATION_LEVELS, np.float32))
        scale = node("Mul", [spread, step], at + "scale")  # (..., 1)
        offset = node("Round", [node("Div", [low, scale], at + "low/scale")], at + "offset")
        negated = node("Neg", [offset], at + "-offset")
        point = node("Cast", [negated], at + "z", to=TensorProto.UINT8)  # (..., 1)
        # QuantizeLinear takes scales along one axis: the tokens, flattened.
        flat = c("int8/flat", np.array([-1], np.int64))
        rows = node("Reshape", [x, c(f"int8/rows{k}", np.array([-1, k], np.int64))], at + "x")
        q = node(
            "QuantizeLinear",
            [
                rows,
                node("Reshape", [scale, flat], at + "scale/flat"),
                node("Reshape", [point, flat], at + "z/flat"),
            ],
            at + "q/flat",
            axis=0,
        )  # (N, K) u8
        q = node("Reshape", [q, node("Shape", [x], at + "shape")], at + "q")  # (..., K)
        widths = c(f"int8/extra{extra}", np.array([1, extra], np.int64))
        points = node("Expand", [point, widths], at + "zs")  # (..., E)
        self._quantized[x] = node("Concat", [q, points], at + "qz", axis=-1), scale
        return self._quantized[x]

    def matmul(self, x: str, y: str, weights: np.ndarray) -> None:
        """`y` = `x` (..., K) times `weights` (K, n), in per-token int8."""
        q, scale = self.quantized(x, weights.shape[0])
        augmented, scales = quantize_weights(weights, self._extra[x])
        c, at = self.constant, f"{y}/int8/"
        # The A scale is 1: each token's own scale multiplies after, as the operator takes one.
        one = c("int8/one", np.array(1.0, np.float32))
        integer = [q, c(at + "weights", augmented), one, c(at + "scales", scales)]
        product = self.node("MatMulIntegerToFloat", integer, at + "p")  # (..., n), times ws_j
        self.node("Mul", [product, scale], y)


def _weight_products(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The MatMuls by a 2-D weight matrix: output name -> the matrix."""
    weights = {init.name: init for init in graph.initializer}
    out = {}
    for node in graph.node:
        matrix = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if matrix is not None and len(matrix.dims) == 2:
            out[node.output[0]] = numpy_helper.to_array(matrix)
    return out


def quantize_int8(fp32: Path, target: Path) -> None:
    """Write to `target` the ONNX file `fp32` with every MatMul by a 2-D weight matrix in
    per-token dynamic int8; the products of two activations (attention) stay fp32."""
    model = onnx.load(str(fp32))
    graph = model.graph
    products = _weight_products(graph)
    shared: dict[str, list[np.ndarray]] = {}
    for node in graph.node:
        if node.output[0] in products:
            shared.setdefault(node.input[0], []).append(products[node.output[0]])
    rewriter = _Rewriter(shared)
    for node in graph.node:
        if node.output[0] in products:
            rewriter.matmul(node.input[0], node.output[0], products[node.output[0]])
        else:
            rewriter.nodes.append(node)
    used = {name for node in rewriter.nodes for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.node[:]
    graph.node.extend(rewriter.nodes)
    del graph.initializer[:]
    graph.initializer.extend([*kept, *rewriter.initializers])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(target))
