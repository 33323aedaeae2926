"""Packed passes: the rows' layout and mask on made-up tokens, then the real model's embeddings
packed against padded, in torch, in each OpenVINO graph and in ONNX Runtime's."""

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from core.settings import DATA_DIR, Settings
from models.anchors import read_sentences
from models.backends import (
    OPENVINO,
    Backend,
    available,
    ensure_variant,
    export_variant,
    load_runner,
    variant_cache,
)
from models.encoder import Encoder
from models.onnx_runner import OnnxRunner
from models.openvino_packing import packed_graph
from models.openvino_runner import OpenVinoRunner
from models.packing import (
    PACK_MASK,
    POSITION_IDS,
    ROW_TOKENS,
    pack,
    pack_rows,
    packable_pooling,
)
from models.tokenizing import token_arrays
from models.torch_packing import TorchPackedRunner

NAMES = ["input_ids", "token_type_ids"]


def _padded(lengths: list[int]) -> dict[str, np.ndarray]:
    """Tokenizer-like features: text i's tokens are 1000 i + 1, 1000 i + 2, ..., padded."""
    width = max(lengths)
    ids = np.zeros((len(lengths), width), np.int64)
    mask = np.zeros((len(lengths), width), np.int64)
    for text, length in enumerate(lengths):
        ids[text, :length] = 1000 * text + np.arange(1, length + 1)
        mask[text, :length] = 1
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask}


def test_rows_hold_every_text_once_within_their_capacity() -> None:
    lengths = [*np.random.default_rng(0).integers(3, 60, size=97).tolist(), 300, 128]
    rows = pack_rows(lengths, 128)
    assert sorted(text for row in rows for text in row) == list(range(len(lengths)))
    for row in rows:
        assert sum(lengths[text] for text in row) <= 128 or len(row) == 1
    assert [98] in rows  # over the capacity: a row of its own
    assert len(rows) >= -(-sum(lengths) // 128)


def test_texts_that_fit_one_row_share_it() -> None:
    assert pack_rows([10, 30, 20], 128) == [[1, 2, 0]]  # longest first


def test_rows_end_near_one_length() -> None:
    rows = pack_rows([8] * 30, 128)  # 240 tokens: two rows of 15 texts
    assert [len(row) for row in rows] == [15, 15]


def test_a_packed_pass_holds_each_text_as_the_padded_one_did() -> None:
    lengths = [5, 11, 3, 9, 7]
    features = _padded(lengths)
    packed = pack(features, NAMES, capacity=16, multiple=8, mask_dtype=np.dtype(np.float32))
    ids, mask = packed.inputs["input_ids"], packed.inputs[PACK_MASK]  # (rows, w), (rows, 1, w, w)
    assert ids.shape[1] % 8 == 0 and mask.shape == (len(ids), 1, ids.shape[1], ids.shape[1])
    assert set(packed.inputs) == {"input_ids", "token_type_ids", POSITION_IDS, PACK_MASK}
    owner = np.full(ids.shape, -1)
    for text, length in enumerate(lengths):
        row, start, end = packed.rows[text], packed.starts[text], packed.ends[text]
        assert end - start == length
        np.testing.assert_array_equal(ids[row, start:end], features["input_ids"][text, :length])
        np.testing.assert_array_equal(packed.inputs[POSITION_IDS][row, start:end], range(length))
        owner[row, start:end] = text
    assert (ids[owner < 0] == 0).all()  # padding is token 0
    blocked = np.finfo(np.float32).min
    for row in range(len(ids)):
        same = owner[row][:, None] == owner[row][None, :]  # padding (-1) attends to padding
        np.testing.assert_array_equal(mask[row, 0], np.where(same, 0, blocked))


def test_a_boolean_mask_keeps_what_attends() -> None:
    features = _padded([4, 6])
    packed = pack(features, NAMES, capacity=16, multiple=8, mask_dtype=np.dtype(np.bool_))
    mask = packed.inputs[PACK_MASK][0, 0]  # (16, 16): the 6 tokens, the 4, 6 of padding
    assert mask.dtype == np.bool_ and mask.shape == (16, 16)
    assert list(packed.starts) == [6, 0] and list(packed.ends) == [10, 6]  # longest first
    assert mask[:6, :6].all() and mask[6:10, 6:10].all() and mask[10:, 10:].all()
    assert not mask[:6, 6:].any() and not mask[6:10, :6].any() and not mask[6:10, 10:].any()


def test_rows_of_one_text_each_take_a_padded_passs_mask() -> None:
    features = _padded([5, 20])  # over a capacity of 16 together: a row each
    packed = pack(features, NAMES, capacity=16, multiple=8, mask_dtype=np.dtype(np.float32))
    mask = packed.inputs[PACK_MASK]  # (rows, 1, 1, tokens): keys only, broadcast over queries
    assert mask.shape == (2, 1, 1, 24)
    blocked = np.finfo(np.float32).min
    for text, length in enumerate([5, 20]):
        expected = np.where(np.arange(24) < length, 0, blocked)
        np.testing.assert_array_equal(mask[packed.rows[text], 0, 0], expected)


def test_each_text_is_the_mean_of_its_own_states() -> None:
    features = _padded([2, 3])
    packed = pack(features, NAMES, capacity=16, multiple=8, mask_dtype=np.dtype(np.float32))
    states = np.arange(8 * 2, dtype=np.float32).reshape(1, 8, 2)  # (rows, tokens, dim)
    # The 3-token text first (tokens 0-2), then the 2-token one (3-4).
    np.testing.assert_allclose(packed.pool(states, "mean"), [[7, 8], [2, 3]])


def test_a_graph_without_attention_is_not_packed() -> None:
    ov = pytest.importorskip("openvino")
    from openvino import opset13

    ids = opset13.parameter(ov.PartialShape([-1, -1]), ov.Type.i64, name="input_ids")
    model = ov.Model([opset13.result(opset13.convert(ids, ov.Type.f32))], [ids])
    assert packed_graph(model) is None


@pytest.mark.slow
def test_only_a_mean_pooling_pipeline_with_positions_from_zero_is_packed(
    encoder: Encoder,
) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = encoder.model[0]
    assert packable_pooling(encoder.model) == "normalized mean"
    unnormalized = SentenceTransformer(modules=[transformer, encoder.model[1]], device="cpu")
    assert packable_pooling(unnormalized) == "mean"
    cls = Pooling(encoder.dim, pooling_mode="cls")
    assert packable_pooling(SentenceTransformer(modules=[transformer, cls], device="cpu")) is None
    roberta_like = copy.deepcopy(encoder.model)  # positions from the padding index + 1
    roberta_like[0].auto_model.config.model_type = "roberta"
    assert packable_pooling(roberta_like) is None


def _texts() -> list[str]:
    """24 Wikipedia sentences and 5 texts of eight, past a row of ROW_TOKENS tokens."""
    sentences = read_sentences(DATA_DIR / "corpus" / "wiki-sentences.txt")[:40]
    return sentences[:24] + [" ".join(sentences[i : i + 8]) for i in range(0, 40, 8)]


@pytest.mark.slow
def test_torch_packed_passes_give_the_padded_embeddings(encoder: Encoder) -> None:
    assert isinstance(encoder.runner, TorchPackedRunner)
    padded = dataclasses.replace(encoder, runner=None)  # sentence-transformers' own passes
    texts = _texts()
    ours, theirs = encoder.encode(texts), padded.encode(texts)  # (texts, dim) each
    assert (ours * theirs).sum(dim=1).min() >= 0.99999


# Packed, the same products are summed in other orders and, in `openvino-int8`, its activations
# quantised in other groups: over 40 texts the least cosine read 0.99988 there, 0.999994 with
# `openvino` in bf16 and 0.9999999 with `openvino-int8-static` (AMD Zen 4). `onnx-int8` rounds
# each token's features to 8 bits, so where the two graphs' sums differ in the last float bits a
# rounding can flip: over these 29 texts the least cosine read 0.99924 (AMD Zen 3).
PACKED_COSINE_FLOOR = 0.9995
PACKED_COSINE_FLOORS = {Backend.ONNX_INT8: 0.999}


def _assert_alike(backend: Backend, ours: np.ndarray, theirs: np.ndarray) -> None:
    """Packed embeddings `ours` against padded `theirs`, (texts, dim) each, unit rows."""
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * theirs).sum(axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosines.min() >= PACKED_COSINE_FLOORS.get(backend, PACKED_COSINE_FLOOR)


def _variant(backend: Backend, encoder: Encoder, exported_variants: Path) -> Path:
    """The folder of `backend`'s variant of the test checkpoint, exported where load_encoder
    exports; skips when the backend's package is missing."""
    if not available(backend):
        pytest.skip(f"{backend}'s package is not installed")
    return ensure_variant(
        encoder.model,
        encoder.checksum,
        backend,
        prebuilt=None,
        cache=variant_cache(exported_variants, encoder.checksum),
        calibration=Settings(data_dir=DATA_DIR).anchor_corpus,
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", OPENVINO)
def test_packed_passes_give_the_padded_embeddings(
    backend: Backend, encoder: Encoder, exported_variants: Path
) -> None:
    folder = _variant(backend, encoder, exported_variants)
    packed = load_runner(backend, folder, threads=1, pooling="normalized mean")
    padded = load_runner(backend, folder, threads=1)
    assert isinstance(packed, OpenVinoRunner) and packed.packed
    assert isinstance(padded, OpenVinoRunner) and not padded.packed
    texts = _texts()
    features = token_arrays(encoder.model, texts)
    assert len(
        pack(features, packed.packed_inputs, ROW_TOKENS, 8, np.dtype(np.float32)).inputs[
            "input_ids"
        ]
    ) < len(texts)  # rows that hold several texts
    _assert_alike(backend, packed(features), padded(features))


@pytest.mark.slow
@pytest.mark.parametrize("backend", [Backend.ONNX, Backend.ONNX_INT8])
def test_onnx_packed_graph_gives_the_pipelines_embeddings(
    backend: Backend, encoder: Encoder, exported_variants: Path, tmp_path: Path
) -> None:
    folder = _variant(backend, encoder, exported_variants)
    packed = load_runner(backend, folder, threads=1, pooling="normalized mean")
    assert isinstance(packed, OnnxRunner) and packed.packed
    with pytest.raises(ValueError, match="pooling"):
        load_runner(backend, folder, threads=1)  # a packed graph's states need pooling
    # The same weights with positions the rows cannot give: the pipeline's graph, padded.
    unpackable = copy.deepcopy(encoder.model)
    unpackable[0].auto_model.config.model_type = "roberta"
    export_variant(unpackable, backend, tmp_path)
    padded = load_runner(backend, tmp_path, threads=1, pooling="normalized mean")
    assert isinstance(padded, OnnxRunner) and not padded.packed
    features = token_arrays(encoder.model, _texts())
    _assert_alike(backend, packed(features), padded(features))
