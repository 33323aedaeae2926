"""`onnx-int8`'s per-token rewrite (models/onnx_int8.py) on small graphs, against the same
quantisation written out in numpy: the maths without a model."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models.onnx_int8 import WEIGHT_LEVELS, quantize_int8, quantize_weights

ort = pytest.importorskip("onnxruntime")

K, N = 48, 24


def _save(
    path: Path,
    nodes: list[onnx.NodeProto],
    outputs: dict[str, list[str | int]],
    **weights: np.ndarray,
) -> None:
    """A graph of input x (b, t, K), the given `outputs` (name -> shape) and weights."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", K])
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in outputs.items()]
    inits = [numpy_helper.from_array(value, name) for name, value in weights.items()]
    graph = helper.make_graph(nodes, "g", [x], values, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _graph(path: Path, weights: np.ndarray) -> None:
    """h = x @ W, y = h @ h^T per batch row: one weight product, one product of two
    activations; both are outputs."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="weights"),
        helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["h", "ht"], ["y"], name="activations"),
    ]
    _save(path, nodes, {"h": ["b", "t", N], "y": ["b", "t", "t"]}, w=weights)


def _run(path: Path, x: np.ndarray, output: str = "y") -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([output], {"x": x})[0]


def _reference(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The docstring's formula, per token row, in float64."""
    rows = x.reshape(-1, K).astype(np.float64)
    high, low = np.maximum(rows.max(1), 0), np.minimum(rows.min(1), 0)
    scale = (high - low).astype(np.float32).astype(np.float64) / 255
    point = np.round(-low / scale)
    q = np.clip(np.round(rows / scale[:, None]) + point[:, None], 0, 255)
    ws = np.abs(weights).max(axis=0) / WEIGHT_LEVELS
    wq = np.clip(np.round(weights / ws), -WEIGHT_LEVELS, WEIGHT_LEVELS)
    out = scale[:, None] * ws * ((q - point[:, None]) @ wq)  # (tokens, n)
    return out.reshape(*x.shape[:-1], -1)


@pytest.fixture(scope="module")
def weights() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(K, N)).astype(np.float32)


def test_weight_rows_carry_the_zero_point_term_exactly(weights: np.ndarray) -> None:
    augmented, scales = quantize_weights(weights)  # (K + E, n), (n,)
    assert augmented.shape[0] > K and augmented.dtype == np.int8
    assert np.abs(augmented).max() <= WEIGHT_LEVELS  # 7 bits: vpmaddubsw cannot saturate
    # The E rows undo each column's sum, so z times them subtracts z * sum_k Wq[k, j].
    assert not augmented.astype(np.int64).sum(axis=0).any()
    assert np.all(np.abs(augmented[:K] * scales - weights) <= scales / 2 + 1e-7)
    padded, _ = quantize_weights(weights, extra=augmented.shape[0] - K + 3)
    assert not padded[-3:].any() and np.array_equal(padded[:-3], augmented)


def test_rewrite_matches_per_token_quantisation(tmp_path: Path, weights: np.ndarray) -> None:
    _graph(tmp_path / "fp32.onnx", weights)
    quantize_int8(tmp_path / "fp32.onnx", tmp_path / "int8.onnx")
    ops = [node.op_type for node in onnx.load(str(tmp_path / "int8.onnx")).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 1 and ops.count("MatMul") == 1
    rng = np.random.default_rng(1)
    # Rows of different ranges and signs: one all positive, one with an outlier feature.
    x = rng.normal(size=(3, 5, K)).astype(np.float32)
    x[0, 0] = np.abs(x[0, 0]) + 1
    x[1, 2, 7] = 40.0
    got = _run(tmp_path / "int8.onnx", x, "h")
    np.testing.assert_allclose(got, _reference(x, weights), rtol=1e-4, atol=1e-4)
    exact = x @ weights
    error = np.linalg.norm(got - exact, axis=-1) / np.linalg.norm(exact, axis=-1)
    assert error.max() < 0.03  # 8-bit tokens, 7-bit weights


def test_a_text_quantises_the_same_in_any_pass(tmp_path: Path, weights: np.ndarray) -> None:
    """Per-token ranges: a row's output does not depend on the rows beside it, unlike one
    scale per pass."""
    _graph(tmp_path / "fp32.onnx", weights)
    quantize_int8(tmp_path / "fp32.onnx", tmp_path / "int8.onnx")
    rng = np.random.default_rng(2)
    alone = rng.normal(size=(1, 4, K)).astype(np.float32)
    loud = 30 * rng.normal(size=(2, 4, K)).astype(np.float32)
    together = np.concatenate([alone, loud])
    np.testing.assert_array_equal(
        _run(tmp_path / "int8.onnx", together)[:1], _run(tmp_path / "int8.onnx", alone)
    )


def test_products_of_one_activation_share_its_quantisation(tmp_path: Path) -> None:
    """Query, key and value read the same tokens: quantised once, with as many zero point
    columns as the most demanding weight needs (the others' extra rows are 0)."""
    rng = np.random.default_rng(3)
    first = rng.normal(size=(K, N)).astype(np.float32)
    second = np.abs(rng.normal(size=(K, N))).astype(np.float32)  # large column sums: more rows
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("MatMul", ["x", "w2"], ["g"]),
    ]
    _save(tmp_path / "a.onnx", nodes, {"h": ["b", "t", N], "g": ["b", "t", N]}, w1=first, w2=second)
    quantize_int8(tmp_path / "a.onnx", tmp_path / "b.onnx")
    ops = [node.op_type for node in onnx.load(str(tmp_path / "b.onnx")).graph.node]
    assert ops.count("QuantizeLinear") == 1 and ops.count("MatMulIntegerToFloat") == 2
    values = rng.normal(size=(2, 3, K)).astype(np.float32)
    for name, matrix in (("h", first), ("g", second)):
        got = _run(tmp_path / "b.onnx", values, name)
        np.testing.assert_allclose(got, _reference(values, matrix), rtol=1e-4, atol=1e-4)
