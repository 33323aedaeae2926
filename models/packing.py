"""Several texts in one row of a pass, each attending only to itself.

A padded pass multiplies every text's padding through every layer. Packed, the texts of a pass
sit end to end in rows of up to `ROW_TOKENS` tokens: each restarts its positions, a
block-diagonal mask keeps its attention to itself, and its embedding is the mean of its own
token states, which is what the pipeline's mean pooling computes, so the embeddings are the same
up to the order of float sums. The OpenVINO runner (models/openvino_packing.py re-feeds its
graph), the torch one (models/torch_packing.py) and ONNX Runtime's (models/onnx_runner.py, from
a graph exported for it) all pack; a pipeline that pools otherwise, or whose positions do not
count from 0 in every text, keeps padded passes.
"""

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

# How a sentence pipeline that packed passes can serve pools its token states.
Pooling = Literal["mean", "normalized mean"]
# Texts per row up to this many tokens. Rows of 128, 192, 256 and 384 tokens, alternating with
# padded passes in one process (AMD EPYC Zen 4, load 0.8-1.1): 128 to 256 alike within the
# noise, 384 slower (attention spans the whole row, masked or not); the shortest keeps that
# waste least.
ROW_TOKENS = 128
POSITION_IDS = "position_ids"
PACK_MASK = "pack_mask"
ATTENTION_MASK = "attention_mask"
# Transformers whose position ids count 0, 1, 2, ... in each text, as packed rows give them.
# RoBERTa and MPNet count from their padding index + 1 and would read shifted positions.
PACKABLE_MODEL_TYPES = frozenset({"bert"})


def packable_pooling(model: "SentenceTransformer") -> Pooling | None:
    """How `model` pools, when its passes can be packed: the mean of its transformer's token
    states, normalised or not, with positions counted from 0 in each text; None otherwise."""
    kinds = [type(module).__name__ for module in model]
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        return None
    if model[1].get_config_dict().get("pooling_mode") != "mean":
        return None
    if getattr(model[0].auto_model.config, "model_type", None) not in PACKABLE_MODEL_TYPES:
        return None
    return "normalized mean" if kinds[2:] else "mean"


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

    def pool(self, states: np.ndarray, pooling: Pooling) -> np.ndarray:
        """Each text's embedding, (texts, dim), from the rows' token `states` (rows, tokens,
        dim): the mean of its own, then, as a Normalize module does, over its norm (at least
        1e-12) for "normalized mean"."""
        spans = zip(self.rows, self.starts, self.ends, strict=True)
        means = np.stack([states[row, start:end].mean(axis=0) for row, start, end in spans])
        if pooling == "normalized mean":
            means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
        return means


def pack(
    features: Mapping[str, np.ndarray],
    names: Sequence[str],
    capacity: int,
    multiple: int,
    mask_dtype: np.dtype,
) -> PackedPass:
    """The padded tokenizer `features` (texts, tokens; padding on the right, as
    `attention_mask` marks it) as packed rows of the token inputs `names`, with their positions
    and mask, rows padded to a multiple of `multiple` tokens."""
    lengths = features[ATTENTION_MASK].sum(axis=1).astype(np.int64)  # (texts,)
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
    real = features[ATTENTION_MASK].astype(bool)  # (texts, tokens)
    for name in names:
        tokens = np.zeros(len(layout) * width, features[name].dtype)
        tokens[places] = features[name][real]  # text by text, each in order
        inputs[name] = tokens.reshape(len(layout), width)
    if all(len(members) == 1 for members in layout):
        # A text per row: a padded pass's mask, one row of keys for every query (rows, 1, 1,
        # tokens), which the attention broadcasts instead of reading a square per row.
        attends = segment[:, None, None, :] > 0
    else:
        # Padding attends to padding, so that no row of the softmax is empty.
        attends = (segment[:, :, None] == segment[:, None, :])[:, None]  # (rows, 1, tokens, tokens)
    if mask_dtype == np.bool_:
        inputs[PACK_MASK] = attends
    else:
        blocked = np.finfo(mask_dtype).min
        inputs[PACK_MASK] = np.where(attends, 0, blocked).astype(mask_dtype)
    return PackedPass(inputs, rows, starts, ends)
