"""The runners' tokenizer arrays straight from the Rust tokenizer: the same as
sentence-transformers', or not taken at all."""

from functools import partial

import numpy as np
import pytest

from core.backend_choice import dev_parity_set
from core.settings import Settings
from models.encoder import Encoder
from models.tokenizing import PROBE, DirectTokenizer, array_tokenizer, token_arrays


def _assert_same(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert ours.keys() == theirs.keys()
    for name, values in theirs.items():
        assert ours[name].dtype == values.dtype
        np.testing.assert_array_equal(ours[name], values)


def test_the_packaged_pipeline_is_tokenised_directly_as_sentence_transformers_does(
    encoder: Encoder,
) -> None:
    assert isinstance(encoder.tokenize, DirectTokenizer)
    texts = dev_parity_set(Settings(), max_pairs=200).texts
    for start in range(0, len(texts), 64):  # batches of the dev sentences, as passes take them
        batch = texts[start : start + 64]
        _assert_same(encoder.tokenize(batch), token_arrays(encoder.model, batch))
    for text in [*texts[:50], *PROBE]:
        _assert_same(encoder.tokenize([text]), token_arrays(encoder.model, [text]))


def test_the_direct_path_truncates_at_the_models_length_as_it_changes(
    encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_text = " ".join(f"word{i}" for i in range(300))
    assert encoder.tokenize([long_text])["input_ids"].shape == (1, encoder.max_seq_length)
    monkeypatch.setattr(encoder.model, "max_seq_length", 16)  # as training sets it
    texts = [long_text, "a short one"]
    arrays = encoder.tokenize(texts)
    assert arrays["input_ids"].shape == (2, 16)
    _assert_same(arrays, token_arrays(encoder.model, texts))


def test_a_tokenizer_the_direct_path_would_not_reproduce_keeps_sentence_transformers_path(
    encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers reads the side it truncates from at every call; the Rust copy would cut the
    # probe's long text at its end.
    monkeypatch.setattr(encoder.model.tokenizer, "truncation_side", "left")
    tokenize = array_tokenizer(encoder.model)
    assert not isinstance(tokenize, DirectTokenizer)
    _assert_same(tokenize(list(PROBE)), token_arrays(encoder.model, list(PROBE)))


def test_a_pipeline_the_probe_fails_on_keeps_sentence_transformers_path(
    encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No maximum length: sentence-transformers' path raises on the probe's long text, and the
    # encoder keeps that path, with its errors, as before the direct one existed.
    monkeypatch.setattr(encoder.model, "max_seq_length", None)
    tokenize = array_tokenizer(encoder.model)
    assert isinstance(tokenize, partial) and tokenize.func is token_arrays
