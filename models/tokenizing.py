"""The tokenizer's arrays that runners (models/backends.py) take, and a faster way to make them.

`token_arrays` asks sentence-transformers, whose `preprocess` parses each input's modality,
merges its processing options and has transformers convert every encoding. `DirectTokenizer`
calls the Rust tokenizer underneath and lays out the arrays itself: on an AMD Zen 4 (load 0.8)
0.044 against 0.123 ms of CPU for one short text, 0.65 against 1.10 ms for 16 and 2.48 against
4.37 ms for 64, 2-3 % of a batch of 16's encoding with openvino-int8-static
(docs/benchmarks.md). It serves only pipelines whose arrays it reproduces to the bit, checked
when it is made on texts that tell tokenizers apart (`PROBE`); others keep `token_arrays`.
"""

from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from tokenizers import Encoding, Tokenizer

ArrayTokenizer = Callable[[list[str]], dict[str, np.ndarray]]  # texts -> (texts, tokens) each

# Texts on which the direct path must give sentence-transformers' arrays before it serves: none
# at all, spaces at the ends, cases and scripts a normaliser changes, control characters, and
# one past any model's length, which shows the side truncation cuts from.
PROBE = (
    "a",
    "",
    "  two  spaces  ",
    "MiXeD CaSe ÜñÎçødé 日本語 😀",
    "tab\tand\nnewline",
    " ".join(f"word{i}" for i in range(600)),
)
# Where each array of transformers' output lies in a Rust `Encoding`.
_ATTRIBUTES = {"input_ids": "ids", "token_type_ids": "type_ids", "attention_mask": "attention_mask"}


def token_arrays(model: SentenceTransformer, texts: list[str]) -> dict[str, np.ndarray]:
    """The tokenizer's arrays for `texts` (padded to the longest, truncated to the model's
    maximum length), as sentence-transformers itself prepares them. Asked for in numpy, what
    runners take: through torch tensors, a single short text's preparation took 0.22 against
    0.19 ms (Intel Xeon with AMX, alternating in one process)."""
    preprocess = getattr(model, "preprocess", None)
    if preprocess is None:  # sentence-transformers before its multimodal `preprocess`
        return {k: v.numpy() for k, v in model.tokenize(texts).items() if torch.is_tensor(v)}
    prepared = preprocess(texts, processing_kwargs={"common": {"return_tensors": "np"}})
    return {k: v for k, v in prepared.items() if isinstance(v, np.ndarray)}


class DirectTokenizer:
    """`token_arrays` for one pipeline, from its own copy of the Rust tokenizer, truncating to
    the model's current maximum length (training sets it on the model)."""

    def __init__(self, model: SentenceTransformer, names: list[str]) -> None:
        hf = model.tokenizer
        # A copy: transformers sets padding and truncation on its tokenizer at every call.
        self._tokenizer = Tokenizer.from_str(hf.backend_tokenizer.to_str())
        self._tokenizer.no_padding()
        self._model = model
        self._length = 0  # what truncation is set to
        self._pads = {
            "input_ids": hf.pad_token_id,
            "token_type_ids": hf.pad_token_type_id,
            "attention_mask": 0,
        }
        self._names = names

    def __call__(self, texts: list[str]) -> dict[str, np.ndarray]:
        length = self._model.max_seq_length
        if length != self._length:
            self._tokenizer.enable_truncation(length)
            self._length = length
        # Without character offsets, which nothing here reads.
        encodings: list[Encoding] = self._tokenizer.encode_batch_fast(texts)
        width = max(len(encoding.ids) for encoding in encodings)
        arrays = {
            name: np.full((len(texts), width), self._pads[name], np.int64) for name in self._names
        }
        for row, encoding in enumerate(encodings):
            tokens = len(encoding.ids)
            for name in self._names:
                arrays[name][row, :tokens] = getattr(encoding, _ATTRIBUTES[name])
        return arrays


def _same(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> bool:
    return ours.keys() == theirs.keys() and all(
        ours[name].dtype == theirs[name].dtype and np.array_equal(ours[name], theirs[name])
        for name in theirs
    )


def array_tokenizer(model: SentenceTransformer) -> ArrayTokenizer:
    """A `DirectTokenizer` for `model` where it gives `token_arrays`' arrays for `PROBE`, each
    text alone and all together; `token_arrays` itself otherwise."""
    reference = partial(token_arrays, model)
    tokenizer = model.tokenizer
    if not getattr(tokenizer, "is_fast", False) or tokenizer.pad_token_id is None:
        return reference
    batches = [list(PROBE), *([text] for text in PROBE)]
    try:
        names = list(reference(batches[0]))
        if not set(names) <= _ATTRIBUTES.keys():
            return reference
        direct = DirectTokenizer(model, names)
        same = all(_same(direct(batch), reference(batch)) for batch in batches)
    except Exception:
        # Any failure on the probe (a length the Rust side cannot take, a text one of them
        # refuses) means the direct path does not serve this model.
        return reference
    return direct if same else reference
