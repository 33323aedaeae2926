"""Encoder backends on the real weights: parity with torch fp32 on dev pairs, the exported
variants' life cycle (export once, reuse, prebuilt first), and caches keyed by backend."""

from pathlib import Path

import numpy as np
import pytest
import torch

from core.backend_choice import dev_parity_set
from core.settings import DATA_DIR, Settings
from models.anchors import build_anchor_set
from models.backends import (
    EXPORTED,
    OPENVINO,
    OPENVINO_GRAPHS,
    VARIANT_JSON,
    Backend,
    available,
    build_variant,
)
from models.cpu_info import cpu_has_vnni
from models.encoder import Encoder, load_encoder
from models.openvino_runner import OpenVinoRunner, runs_in_bf16, take_word_embeddings
from models.openvino_static import ON_DEMAND_AFTER, StaticGraphs
from models.parity import COSINE_FLOOR, SPEARMAN_TOLERANCE, ParitySet, check_parity, embed
from models.tokenizing import token_arrays

PAIRS_PER_TASK = 150  # 300 dev pairs: a Spearman gap of 0.2 is still well resolved
CALIBRATION = Settings(data_dir=DATA_DIR).anchor_corpus  # what the service calibrates on

pytestmark = pytest.mark.slow


def _needs(backend: Backend) -> None:
    if not available(backend):
        pytest.skip(f"{backend}'s package is not installed")


@pytest.fixture(scope="module")
def dev() -> ParitySet:
    return dev_parity_set(Settings(data_dir=DATA_DIR), PAIRS_PER_TASK)


@pytest.fixture(scope="module")
def reference(encoder: Encoder, dev: ParitySet) -> np.ndarray:
    return embed(encoder, dev)


def _load(
    backend: Backend,
    cache: Path,
    single_lengths: tuple[int, ...] = (),
    on_demand_lengths: tuple[int, ...] = (),
) -> Encoder:
    _needs(backend)
    return load_encoder(
        device="cpu",
        backend=backend,
        export_cache=cache,
        threads=1,
        calibration=CALIBRATION,
        single_lengths=single_lengths,
        on_demand_lengths=on_demand_lengths,
    )


# On these 150 pairs per task the OpenVINO int8 backends' gaps have read wider than on the full
# dev sets that `auto` checks: openvino-int8-static 0.22 against 0.055 (bench.encoder); since
# attention is exported eagerly, 0.058 here on a Zen 4; openvino-int8 in bf16 on an AMX Xeon
# 0.228 here against 0.081 there. They are held to a wider bound here. onnx-int8, which scaled
# activations per pass and read 0.29 here, quantises each token on its own now: 0.087 (AMD Zen 3).
SUBSET_TOLERANCE = {
    Backend.OPENVINO_INT8: 0.35,
    Backend.OPENVINO_INT8_STATIC: 0.35,
}
# Without VNNI, OpenVINO's static int8 falls under the parity floor (models/openvino_export.py):
# 0.9938 here on an AMD Zen 3, so `auto` leaves it out there. Still this close to fp32.
NO_VNNI_COSINE_FLOOR = 0.99


@pytest.mark.parametrize("backend", [b for b in Backend if b != Backend.TORCH])
def test_backend_passes_parity_on_dev_pairs(
    backend: Backend, exported_variants: Path, dev: ParitySet, reference: np.ndarray
) -> None:
    parity = check_parity(
        backend.value, embed(_load(backend, exported_variants), dev), reference, dev
    )
    floor = COSINE_FLOOR
    if backend == Backend.OPENVINO_INT8_STATIC and not cpu_has_vnni():
        floor = NO_VNNI_COSINE_FLOOR
    assert parity.pairs == 2 * PAIRS_PER_TASK
    assert parity.mean_cosine >= floor, parity
    assert parity.max_spearman_gap <= SUBSET_TOLERANCE.get(backend, SPEARMAN_TOLERANCE), parity
    assert parity.passed or backend in SUBSET_TOLERANCE


def test_torch_is_its_own_reference(dev: ParitySet, reference: np.ndarray) -> None:
    parity = check_parity("torch", reference, reference, dev)
    assert parity.max_spearman_gap == 0.0
    assert parity.mean_cosine == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("backend", EXPORTED)
def test_exported_encoder_keeps_order_norms_and_empty_input(
    backend: Backend, exported_variants: Path
) -> None:
    encoder = _load(backend, exported_variants)
    texts = ["short", "a considerably longer sentence about rivers and mountains", "mid length"]
    batch = encoder.encode(texts, batch_size=2)
    singles = torch.cat([encoder.encode([t]) for t in texts])
    torch.testing.assert_close(batch, singles, atol=2e-3, rtol=0)
    assert batch.dtype == torch.float32 and batch.shape == (3, 384)
    torch.testing.assert_close(batch.norm(dim=1), torch.ones(3), atol=1e-5, rtol=0)
    assert encoder.encode([]).shape == (0, 384)


def test_static_int8_is_not_exported_without_calibration_sentences(
    encoder: Encoder, tmp_path: Path
) -> None:
    backend = Backend.OPENVINO_INT8_STATIC
    _needs(backend)
    with pytest.raises(ValueError, match="calibration sentences"):
        build_variant(encoder.model, encoder.checksum, backend, tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="calibration sentences"):
        build_variant(encoder.model, encoder.checksum, backend, tmp_path, empty)
    assert not (tmp_path / backend.value).exists()  # nothing half-built is left


def test_attention_is_exported_as_plain_products(exported_variants: Path) -> None:
    # torch's SDPA traces a NaN guard (IsNaN, Where) after each softmax, which keeps OpenVINO
    # from fusing the layer's attention into one kernel (models/backends.py).
    import onnx

    _load(Backend.ONNX, exported_variants)
    (graph_file,) = exported_variants.rglob("onnx/model*.onnx")  # MiniLM's: a packed graph
    ops = [node.op_type for node in onnx.load(str(graph_file)).graph.node]
    assert "IsNaN" not in ops
    assert ops.count("Softmax") == 6  # one per layer of MiniLM-L6


def test_variant_is_exported_once_then_reused(exported_variants: Path) -> None:
    first = _load(Backend.ONNX, exported_variants)
    folder = exported_variants / first.checksum[:16] / Backend.ONNX.value
    stamp = (folder / VARIANT_JSON).stat().st_mtime_ns
    second = _load(Backend.ONNX, exported_variants)
    assert (folder / VARIANT_JSON).stat().st_mtime_ns == stamp
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporaries
    torch.testing.assert_close(first.encode(["same text"]), second.encode(["same text"]))


def test_prebuilt_variant_comes_first_and_a_foreign_one_is_ignored(
    encoder: Encoder, tmp_path: Path
) -> None:
    _needs(Backend.ONNX)
    prebuilt = tmp_path / "bundle-variants"
    build_variant(encoder.model, encoder.checksum, Backend.ONNX, prebuilt)
    cache = tmp_path / "cache"
    load_encoder(device="cpu", backend=Backend.ONNX, variants=prebuilt, export_cache=cache)
    assert not cache.exists()  # nothing exported: the prebuilt variant was used
    # Exported from other weights: the checksum in variant.json disagrees, so it is not used.
    stale = tmp_path / "stale"
    build_variant(encoder.model, "0" * 64, Backend.ONNX, stale)
    load_encoder(device="cpu", backend=Backend.ONNX, variants=stale, export_cache=cache)
    assert (cache / encoder.checksum[:16] / Backend.ONNX.value / VARIANT_JSON).is_file()


def test_exported_backends_refuse_a_gpu() -> None:
    _needs(Backend.ONNX)
    with pytest.raises(ValueError, match="runs on the CPU"):
        load_encoder(device="cuda", backend=Backend.ONNX)


def test_caches_are_keyed_by_backend(
    encoder: Encoder, exported_variants: Path, tmp_path: Path
) -> None:
    other = _load(Backend.ONNX, exported_variants)
    assert encoder.cache_key == encoder.checksum  # fp32 caches written before backends stay
    assert other.checksum == encoder.checksum and other.cache_key != encoder.cache_key
    texts = ["one anchor", "another anchor", "a third"]
    build_anchor_set(encoder, texts, tmp_path)
    build_anchor_set(other, texts, tmp_path)
    files = sorted(p.name for p in (tmp_path / "anchors").iterdir())
    assert len(files) == 2 and files[0][:16] != files[1][:16]


@pytest.mark.parametrize("backend", OPENVINO)
def test_openvino_padding_leaves_embeddings_alone(
    backend: Backend, encoder: Encoder, exported_variants: Path
) -> None:
    runner = _load(backend, exported_variants).runner
    assert runner is not None
    features = token_arrays(encoder.model, ["a cat", "a longer sentence"])
    assert features["input_ids"].shape[1] % 8 != 0
    outputs = []
    for multiple in (1, 8, 16):
        runner.length_multiple = multiple  # type: ignore[attr-defined]
        outputs.append(runner(features))  # (2, dim)
    for padded in outputs[1:]:
        np.testing.assert_allclose(padded, outputs[0], atol=2e-3)


def _dynamic(runner: OpenVinoRunner, features: dict[str, np.ndarray]) -> np.ndarray:
    """`runner`'s dynamic graph's output for `features`, its static graphs set aside."""
    none = StaticGraphs(lambda length: pytest.fail(f"compiled {length}"), (), ())
    static, runner.static = runner.static, none
    try:
        return runner(features)
    finally:
        runner.static = static


def _check_static_pass(
    runner: OpenVinoRunner, features: dict[str, np.ndarray], length: int, out: np.ndarray
) -> None:
    """`out`, the runner's output for one text, is its static graph's for `length` tokens, and
    near its dynamic graph's."""
    padded = {k: np.pad(v, ((0, 0), (0, length - v.shape[1]))) for k, v in features.items()}
    if runner.word_embeddings is not None:
        padded["word_embeddings"] = runner.word_embeddings[padded["input_ids"]]
    found = runner.static.request(1, length)
    assert found is not None and found[0] == length
    np.testing.assert_array_equal(out, found[1].infer(padded)[0])
    # The static graphs may pick other kernels, which round int8 products otherwise: within
    # 4e-4 of the dynamic graph's cosine on 128 Wikipedia sentences (AMD Zen 4).
    dynamic = _dynamic(runner, features)
    cosine = (out * dynamic).sum() / np.linalg.norm(out) / np.linalg.norm(dynamic)
    assert cosine > 0.999


@pytest.mark.parametrize("backend", OPENVINO)
def test_openvino_runs_single_texts_in_graphs_of_their_own_shape(
    backend: Backend, exported_variants: Path
) -> None:
    encoder = _load(backend, exported_variants, single_lengths=(32, 16))
    runner = encoder.runner
    assert isinstance(runner, OpenVinoRunner) and runner.static.compiled() == [16, 32]
    texts = [
        "a cat",  # padded to 16
        "a somewhat longer sentence about the rivers and the mountains beyond them, written "
        "to run past sixteen tokens",  # 17-32
        " ".join(["the river runs past the mountains"] * 8),  # over 32: the dynamic graph
    ]
    counts = encoder.token_counts(texts)
    assert counts[0] <= 16 < counts[1] <= 32 < counts[2]
    for text, length in zip(texts, (16, 32, None), strict=True):
        features = token_arrays(encoder.model, [text])
        out = runner(features)  # (1, dim)
        if length is None:
            np.testing.assert_array_equal(out, _dynamic(runner, features))
        else:
            _check_static_pass(runner, features, length, out)


def test_a_length_on_demand_is_compiled_once_single_texts_keep_needing_it(
    exported_variants: Path,
) -> None:
    encoder = _load(Backend.OPENVINO_INT8_STATIC, exported_variants, (16,), (64, 128))
    runner = encoder.runner
    assert isinstance(runner, OpenVinoRunner) and runner.static.compiled() == [16]
    text = " ".join(["the river runs past the mountains"] * 6)
    assert 32 < encoder.token_counts([text])[0] <= 64
    features = token_arrays(encoder.model, [text])
    dynamic = _dynamic(runner, features)
    for _ in range(ON_DEMAND_AFTER - 1):
        np.testing.assert_array_equal(runner(features), dynamic)
    runner.static.settle()
    assert runner.static.compiled() == [16]
    runner(features)  # the last that runs in the dynamic graph; 64's is compiled meanwhile
    runner.static.settle()
    assert runner.static.compiled() == [16, 64]
    _check_static_pass(runner, features, 64, runner(features))


def test_word_embeddings_looked_up_outside_the_graphs_change_nothing(
    encoder: Encoder, exported_variants: Path
) -> None:
    backend = Backend.OPENVINO_INT8_STATIC
    outside = _load(backend, exported_variants, single_lengths=(16,)).runner
    assert isinstance(outside, OpenVinoRunner) and outside.word_embeddings is not None
    assert outside.word_embeddings.shape == (encoder.model.tokenizer.vocab_size, encoder.dim)
    path = next(exported_variants.rglob("model-int8-static.xml"))  # the variant just loaded
    bf16 = runs_in_bf16(OPENVINO_GRAPHS[backend])  # as _load ran it
    inside = OpenVinoRunner(path, threads=1, single_lengths=(16,), bf16=bf16)
    assert inside.word_embeddings is None
    texts = [["a cat"], ["a cat", "a longer sentence about the rivers beyond the mountains"]]
    for batch in texts:  # one text: the static graph; two: the dynamic one
        features = token_arrays(encoder.model, batch)
        np.testing.assert_allclose(outside(features), inside(features), atol=1e-5)


def test_a_graph_without_a_word_embedding_lookup_is_left_alone() -> None:
    ov = pytest.importorskip("openvino")
    from openvino import opset13

    ids = opset13.parameter(ov.PartialShape([-1, -1]), ov.Type.i64, name="input_ids")
    ids.output(0).get_tensor().set_names({"input_ids"})
    model = ov.Model([opset13.result(opset13.convert(ids, ov.Type.f32))], [ids])
    assert take_word_embeddings(model) is None
    assert [p.get_any_name() for p in model.inputs] == ["input_ids"]


@pytest.mark.parametrize("backend", OPENVINO)
def test_openvino_runs_in_the_precision_that_pays_on_this_cpu(
    backend: Backend, exported_variants: Path
) -> None:
    import openvino as ov

    runner = _load(backend, exported_variants).runner
    bf16 = runs_in_bf16(OPENVINO_GRAPHS[backend])
    expected = ov.Type.bf16 if bf16 else ov.Type.f32
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT") == expected  # type: ignore[attr-defined]
    assert runner.length_multiple == (16 if bf16 else 8)  # type: ignore[attr-defined]
