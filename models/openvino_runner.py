"""The OpenVINO runner of an exported sentence pipeline (models/backends.py), and the precision
it runs in on this CPU."""

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from models.cpu_info import CPUINFO, cpu_has_amx, cpu_has_bf16, cpu_vendor
from models.openvino_packing import packed_graph
from models.openvino_static import StaticGraphs
from models.packing import PACK_MASK, POSITION_IDS, ROW_TOKENS, Pooling, pack

if TYPE_CHECKING:
    import openvino as ov


# What an exported OpenVINO graph multiplies in: float32 weights, int8 weights (activations
# quantised as each pass runs), or int8 weights and activations calibrated at export.
Graph = Literal["fp32", "int8-weights", "int8-static"]


def runs_in_bf16(graph: Graph, *, cpuinfo: Path = CPUINFO) -> bool:
    """Whether OpenVINO's CPU plugin should run a graph's float products in bf16 here. The
    plugin would pick bf16 wherever the CPU has AVX512-BF16; what pays, and what stays right,
    was measured, each time alternating both precisions in one process (docs/benchmarks.md):
    - The int8-static graph: f32 everywhere. On an AMX Xeon, bf16 with the attention fused
      into one kernel (exported eagerly, models/onnx_export.py) moved embeddings far off fp32's:
      mean cosine 0.9711, min 0.49 on the full dev sets, against 0.9968 in f32, which ran
      0.84-1.11x as fast as the bf16 graph exported before the fusion (thirty-fourth session).
    - AMX tiles: bf16 for the others.
    - An Intel Xeon with AVX512-BF16 and no AMX: f32 encoded 1.16-1.45x as many texts.
    - AMD Zen 4 and Zen 5 (AVX512-BF16): bf16 made the fp32 graph 1.2-1.9x and 1.5-1.6x as
      fast. For the int8 graphs, whose heavy products are int8 either way, bf16 moved the
      rest by 0.79-1.18x on the Zen 4 and within the noise on the Zen 5: they stay in f32.
    """
    if graph == "int8-static":
        return False
    if cpu_has_amx(cpuinfo):
        return True
    return graph == "fp32" and cpu_has_bf16(cpuinfo) and cpu_vendor(cpuinfo) == "AuthenticAMD"


_WORD_EMBEDDINGS = "word_embeddings"  # the input that replaces the word-embedding lookup


def take_word_embeddings(model: "ov.Model") -> np.ndarray | None:
    """Turn `model`'s lookup of `input_ids` in its word-embedding table into an input of the
    looked-up rows (batch, tokens, dim), and return the table (vocabulary, dim) as the graph
    computed it, float32; None (the model unchanged) if it has no such lookup."""
    import openvino as ov
    from openvino import opset13

    for node in model.get_ordered_ops():
        if node.get_type_name() != "Gather":
            continue
        indices, table = node.input_value(1), node.input_value(0)
        if "input_ids" not in indices.get_names() or table.get_partial_shape().rank != 2:
            continue
        # The table as the compiled graph held it: its constant and its decompression (int8
        # values, scale), evaluated once in float32.
        evaluate = ov.Model([opset13.result(table)], [], "word-embedding table")
        config = {"INFERENCE_PRECISION_HINT": ov.Type.f32}
        rows = ov.Core().compile_model(evaluate, "CPU", config).create_infer_request().infer({})
        dim = table.get_partial_shape()[1]
        looked_up = opset13.parameter(ov.PartialShape([-1, -1, dim]), ov.Type.f32)
        node.output(0).replace(looked_up.output(0))
        looked_up.output(0).get_tensor().set_names({_WORD_EMBEDDINGS})
        model.add_parameters([looked_up])
        model.validate_nodes_and_infer_types()
        return np.array(rows[0], dtype=np.float32, copy=True)
    return None


def _padded(values: np.ndarray, length: int) -> np.ndarray:
    """`values` (texts, tokens) followed by zeros up to `length` tokens. np.pad took 0.13 ms
    for a short text's three inputs, against 2-3 ms for its pass in a static graph (Intel Xeon
    with AMX), mostly in Python."""
    out = np.zeros((len(values), length), dtype=values.dtype)
    out[:, : values.shape[1]] = values
    return out


def _token_inputs(model: "ov.Model") -> list[str]:
    """The inputs of `model` that the runner builds from the tokenizer's features."""
    return [name for port in model.inputs if (name := port.get_any_name()) != _WORD_EMBEDDINGS]


class OpenVinoRunner:
    # Each pass is padded to a multiple of these many tokens (masked out, so the embeddings do
    # not move), so that it takes few shapes. The CPU plugin compiles every new input shape (a
    # first pass took 2-3x a warm one) and caches what it compiled, up to 5,000 entries
    # (CPU_RUNTIME_CACHE_CAPACITY): swept twice, the 3,720 shapes a pass can take unpadded ran
    # at 1.8x a warm pass's time the second time too, and grew the process by 5.6 GB; the 443
    # padded ones at 0.8-1.3x, for 1.5 GB. In streams of varied requests of real sentences the
    # int8-static encoder ran 1.34x as many texts per second on a Zen 4 and 1.5x on a Zen 5
    # (bench.encoder_shapes).
    LENGTH_MULTIPLE = 8
    # In bf16 the CPU plugin multiplies tiles of 16 rows (AMX): on an AMX Xeon, texts padded to
    # a multiple of 16 tokens ran 7-12 % faster one at a time and in batches of long texts, and
    # alike in batches of short ones (alternating in one process). On a Zen 4's AVX512-BF16,
    # without tiles, 16 and 8 ran alike, and 16 compiles fewer shapes.
    BF16_LENGTH_MULTIPLE = 16

    def __init__(
        self,
        path: Path,
        threads: int | None,
        *,
        int8_weights: bool = False,
        bf16: bool = False,
        single_lengths: Sequence[int] = (),
        on_demand_lengths: Sequence[int] = (),
        word_embeddings_outside: bool = False,
        pooling: Pooling | None = None,
    ) -> None:
        import openvino as ov

        core = ov.Core()
        config: dict[str, object] = {"PERFORMANCE_HINT": "LATENCY"}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        if int8_weights:
            # With int8 weights the plugin can quantise each pass's activations too, in groups
            # of 32 along a token's features, and multiply in int8 (VNNI): short batches of 16
            # ran 290.9 against 250.1 texts/s without it, single texts and long batches alike
            # (Intel Xeon without AMX, alternating in one process, load 1.2-1.3).
            config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 32
        config["INFERENCE_PRECISION_HINT"] = ov.Type.bf16 if bf16 else ov.Type.f32
        model = core.read_model(str(path))
        # `word_embeddings_outside`: the rows are looked up here, in one table for all graphs.
        # A graph calibrated for int8 activations decompresses its int8 table into a float32
        # one of its own (47 MB for MiniLM's 30,522 x 384) at compile time, whatever the export
        # (twenty-sixth session). With the lookup outside, openvino-int8-static's two static
        # graphs took 62 MB instead of 150, the embeddings the same to the bit, and passes ran
        # 0.99-1.00x as fast (bench.single_texts and a script alternating both, AMD Zen 4).
        self.word_embeddings = take_word_embeddings(model) if word_embeddings_outside else None
        # With the pipeline's `pooling` known, passes of several texts are packed
        # (models/packing.py), and the graph that pads them is not compiled.
        packed = packed_graph(model.clone()) if pooling is not None else None
        self.pooling = pooling  # what packed passes pool by
        self.compiled = core.compile_model(model if packed is None else packed, "CPU", config)
        self.packed = packed is not None
        self.inputs = _token_inputs(model)  # the padded graphs'
        self.packed_inputs = [  # those that packing lays out from the tokenizer's
            name
            for name in (_token_inputs(packed) if packed is not None else [])
            if name not in (POSITION_IDS, PACK_MASK)
        ]
        self.mask_dtype = (
            packed.input(PACK_MASK).get_element_type().to_dtype() if packed is not None else None
        )
        self.length_multiple = self.BF16_LENGTH_MULTIPLE if bf16 else self.LENGTH_MULTIPLE

        # A single text of at most one of `single_lengths` tokens runs, padded to the nearest,
        # in a graph compiled for that one shape (models/openvino_static.py); those of
        # `on_demand_lengths` are compiled once such texts keep coming.
        def compile_for(length: int) -> ov.InferRequest:
            static = model.clone()
            shapes = {name: ov.PartialShape([1, length]) for name in self.inputs}
            if self.word_embeddings is not None:
                dim = self.word_embeddings.shape[1]
                shapes[_WORD_EMBEDDINGS] = ov.PartialShape([1, length, dim])
            static.reshape(shapes)
            return core.compile_model(static, "CPU", config).create_infer_request()

        self.static = StaticGraphs(compile_for, single_lengths, on_demand_lengths)
        # compiled_model(...) reuses one infer request, which is not safe across threads; one
        # lock for all keeps passes from sharing the cores' threads as well.
        self._lock = threading.Lock()
        self._rows = np.empty((0, 0), dtype=np.float32)  # _look_up's buffer

    def __call__(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        texts, tokens = features["input_ids"].shape
        static = self.static.request(texts, tokens)
        if static is None and self.packed:
            return self._packed_pass(features)
        if static is None:
            length, request = tokens + -tokens % self.length_multiple, None
        else:
            length, request = static
        inputs = {name: _padded(features[name], length) for name in self.inputs}
        with self._lock:
            if self.word_embeddings is not None:
                inputs[_WORD_EMBEDDINGS] = self._look_up(inputs["input_ids"])
            if request is not None:
                result = request.infer(inputs, share_inputs=True)
            else:
                result = self.compiled(inputs)
            return np.array(result[0], copy=True)

    def _packed_pass(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        """The texts of `features` in packed rows: their embeddings (texts, dim)."""
        assert self.mask_dtype is not None and self.pooling is not None
        packed = pack(
            features, self.packed_inputs, ROW_TOKENS, self.length_multiple, self.mask_dtype
        )
        with self._lock:
            inputs = dict(packed.inputs)
            if self.word_embeddings is not None:
                inputs[_WORD_EMBEDDINGS] = self._look_up(inputs["input_ids"])
            states = self.compiled(inputs)[0]  # (rows, tokens, dim), reused by the next pass
            return packed.pool(states, self.pooling)

    def _look_up(self, ids: np.ndarray) -> np.ndarray:
        """The word-embedding rows of `ids` (texts, tokens), in a buffer reused from pass to pass
        (under the lock): a fresh array of a batch's rows faults in new pages every pass, which
        made a batch of 64 long texts' lookup 27.6 ms against 3.6 ms into a reused buffer."""
        assert self.word_embeddings is not None
        size, dim = ids.size, self.word_embeddings.shape[1]
        if len(self._rows) < size:
            self._rows = np.empty((size, dim), dtype=np.float32)
        rows = self._rows[:size].reshape(*ids.shape, dim)  # (texts, tokens, dim)
        return np.take(self.word_embeddings, ids, axis=0, out=rows)
