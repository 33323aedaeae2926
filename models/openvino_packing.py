"""Several texts in one row of an OpenVINO pass, each attending only to itself.

A padded pass multiplies every text's padding through every layer. Packed, the texts of a pass
sit end to end in rows of about `ROW_TOKENS` tokens: each restarts its positions, a block-diagonal
mask keeps its attention to itself, and its embedding is the mean of its own token states,
which is what the pipeline's mean pooling computes, so the embeddings are the same up to the
order of float sums. The graph is the exported one, re-fed at three places (`packed_graph`);
where it lacks one of them, or pools otherwise than by the mean, passes stay padded.
"""

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    import openvino as ov
    from sentence_transformers import SentenceTransformer

# Rows of 256 tokens: to be measured.
ROW_TOKENS = 256
# How a sentence pipeline that packed passes can serve pools its token states.
Pooling = Literal["mean", "normalized mean"]
# Texts per row up to this many tokens. Rows of 128, 192, 256 and 384 tokens, alternating with
# padded passes in one process (AMD EPYC Zen 4, load 0.8-1.1): 128 to 256 alike within the
# noise, 384 slower (attention spans the whole row, masked or not); the shortest keeps that
# waste least.
ROW_TOKENS = 128
POSITION_IDS = "position_ids"
PACK_MASK = "pack_mask"
_ATTENTION_MASK = "attention_mask"


def mean_pooling(model: "SentenceTransformer") -> Pooling | None:
    """How `model` pools, when packed passes can compute it outside the graph: the mean of its
    transformer's token states, normalised or not; None for any other pipeline."""
    kinds = [type(module).__name__ for module in model]
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        return None
    if model[1].get_config_dict().get("pooling_mode") != "mean":
        return None
    return "normalized mean" if kinds[2:] else "mean"


def _attention_mask_source(model: "ov.Model") -> "ov.Output | None":
    """The one output that every attention node takes as its additive mask, if it is one."""
    masks = [
        node.input_value(3)
        for node in model.get_ordered_ops()
        if node.get_type_name() == "ScaledDotProductAttention" and node.get_input_size() >= 4
    ]
    places = {(mask.get_node().get_friendly_name(), mask.get_index()) for mask in masks}
    return masks[0] if len(places) == 1 else None


def _position_lookup(model: "ov.Model") -> "ov.Node | None":
    """The lookup of the position-embedding table, whose indices the graph makes itself."""
    for node in model.get_ordered_ops():
        if (
            node.get_type_name() == "Gather"
            and "position_embeddings" in node.get_friendly_name()
            and node.input_value(1).get_node().get_type_name() != "Parameter"
        ):
            return node
    return None


def _pooled_states(model: "ov.Model") -> "ov.Output | None":
    """The token states that mean pooling multiplies by the attention mask (texts, tokens, dim):
    the other factor of the product that the mask reaches through Unsqueeze and Convert."""
    frontier = [p for p in model.get_parameters() if p.get_friendly_name() == _ATTENTION_MASK]
    for _ in range(3):
        reached = []
        for node in frontier:
            for target in node.output(0).get_target_inputs():
                consumer = target.get_node()
                kind = consumer.get_type_name()
                if kind == "Multiply":
                    other = consumer.input_value(1 - target.get_index())
                    rank = other.get_partial_shape().rank
                    if rank.is_static and rank.get_length() == 3:
                        return other
                elif kind in ("Unsqueeze", "Convert"):
                    reached.append(consumer)
        frontier = reached
    return None


def packed_graph(model: "ov.Model") -> "ov.Model | None":
    """`model`, a sentence pipeline that pools by the mean, re-fed for packed rows: inputs
    `position_ids` (rows, tokens) and `pack_mask` (rows, 1, tokens, tokens), additive, in place
    of the positions and the mask the graph derives from `attention_mask`; output the token
    states before pooling (rows, tokens, dim). None where a place is missing. Changes `model`."""
    import openvino as ov
    from openvino import opset13

    mask_source, lookup, states = (
        _attention_mask_source(model),
        _position_lookup(model),
        _pooled_states(model),
    )
    if mask_source is None or lookup is None or states is None:
        return None
    positions = opset13.parameter(ov.PartialShape([-1, -1]), ov.Type.i64, name=POSITION_IDS)
    positions.output(0).get_tensor().set_names({POSITION_IDS})
    lookup.input(1).replace_source_output(positions.output(0))
    shape = ov.PartialShape([-1, 1, -1, -1])
    mask = opset13.parameter(shape, mask_source.get_element_type(), name=PACK_MASK)
    mask.output(0).get_tensor().set_names({PACK_MASK})
    for target in list(mask_source.get_target_inputs()):
        target.replace_source_output(mask.output(0))
    kept = [p for p in model.get_parameters() if p.get_friendly_name() != _ATTENTION_MASK]
    try:
        packed = ov.Model([opset13.result(states)], [*kept, positions, mask], "packed")
        packed.validate_nodes_and_infer_types()
    except RuntimeError:  # attention_mask still needed elsewhere: not a graph this knows
        return None
    return packed


def pack_rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """The texts (indices into `lengths`) of each row: as few rows of `capacity` tokens as the
    total needs, longest texts first, each into the emptiest row, so that rows end near one
    length; a new row only for a text that fits in none. A text over `capacity` has a row of
    its own."""
    count = max(1, math.ceil(sum(lengths) / capacity))
    rows: list[list[int]] = [[] for _ in range(count)]
    fills = [(0, row) for row in range(count)]  # a heap of (tokens, row)
    for text in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        fill, row = heapq.heappop(fills)
        if fill and fill + lengths[text] > capacity:
            heapq.heappush(fills, (fill, row))
            row, fill = len(rows), 0
            rows.append([])
        rows[row].append(text)
        heapq.heappush(fills, (fill + lengths[text], row))
    return [row for row in rows if row]


@dataclass(frozen=True)
class PackedPass:
    inputs: dict[str, np.ndarray]  # the graph's inputs, rows × tokens
    rows: np.ndarray  # (texts,) the row of each text
    starts: np.ndarray  # (texts,) its first token in the row
    ends: np.ndarray  # (texts,) one past its last

    def mean_states(self, states: np.ndarray) -> np.ndarray:
        """Each text's mean token state: (texts, dim) from `states` (rows, tokens, dim)."""
        spans = zip(self.rows, self.starts, self.ends, strict=True)
        return np.stack([states[row, start:end].mean(axis=0) for row, start, end in spans])


def pack(
    features: Mapping[str, np.ndarray],
    names: Sequence[str],
    capacity: int,
    multiple: int,
    mask_dtype: np.dtype,
) -> PackedPass:
    """The padded tokenizer `features` (texts, tokens; padding on the right, as
    `attention_mask` marks it) as packed rows of the inputs `names`, rows padded to a multiple
    of `multiple` tokens."""
    lengths = features[_ATTENTION_MASK].sum(axis=1).astype(np.int64)  # (texts,)
    layout = pack_rows(lengths.tolist(), capacity)
    width = max(int(lengths[row].sum()) for row in layout)
    width += -width % multiple
    texts = len(lengths)
    rows, starts = np.empty(texts, np.int64), np.empty(texts, np.int64)
    segment = np.zeros((len(layout), width), np.int64)  # 0: padding, else the text's index + 1
    positions = np.zeros((len(layout), width), np.int64)
    for r, members in enumerate(layout):
        at = 0
        for text in members:
            rows[text], starts[text] = r, at
            end = at + lengths[text]
            segment[r, at:end] = text + 1
            positions[r, at:end] = np.arange(lengths[text])
            at = end
    ends = starts + lengths
    inputs = {POSITION_IDS: positions}
    places = np.nonzero(segment.ravel())[0]  # the real tokens' places in the rows, row by row
    places = places[np.argsort(segment.ravel()[places], kind="stable")]  # now text by text
    real = features[_ATTENTION_MASK].astype(bool)  # (texts, tokens)
    for name in names:
        if name in (POSITION_IDS, PACK_MASK):
            continue
        tokens = np.zeros(len(layout) * width, features[name].dtype)
        tokens[places] = features[name][real]  # text by text, each in order
        inputs[name] = tokens.reshape(len(layout), width)
    # Padding attends to padding, so that no row of the softmax is empty.
    same = segment[:, :, None] == segment[:, None, :]  # (rows, tokens, tokens)
    if mask_dtype == np.bool_:
        inputs[PACK_MASK] = same[:, None]
    else:
        blocked = np.finfo(mask_dtype).min
        inputs[PACK_MASK] = np.where(same, 0, blocked).astype(mask_dtype)[:, None]
    return PackedPass(inputs, rows, starts, ends)
