import numpy as np
import pytest
import torch
from scipy.stats import rankdata, spearmanr

from models import cpu_products, panel_kernels
from models import ordinal_ranks as ordinal_ranks_module
from models.cpu_products import anchor_cosines, pair_dots, row_dots
from models.ordinal_ranks import numpy_ranks, ordinal_ranks, ranks_into
from models.ranking import (
    anchor_ranks,
    blend,
    normalisation,
    normalise_ranks,
    rank_vectors,
    rank_vectors_chunked,
)


def unit_rows(generator: torch.Generator, rows: int, dim: int) -> torch.Tensor:
    x = torch.randn(rows, dim, generator=generator)
    return x / x.norm(dim=1, keepdim=True)


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return unit_rows(generator, 12, 16), unit_rows(generator, 300, 16)


def test_ranks_follow_cosine_order() -> None:
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    query = torch.tensor([[1.0, 0.0]])
    # cosines to the anchors: 1.0, 0.0, 0.6 -> ranks (0 = least similar): 2, 0, 1
    assert anchor_ranks(query, anchors).tolist() == [[2.0, 0.0, 1.0]]


def test_rank_similarity_equals_spearman_of_cosine_profiles(data) -> None:
    inputs, anchors = data
    z = rank_vectors(inputs, anchors)
    profiles = (inputs @ anchors.T).numpy()
    for i, j in [(0, 1), (2, 7), (5, 11), (3, 3)]:
        expected = spearmanr(profiles[i], profiles[j]).statistic
        assert float(z[i] @ z[j]) == pytest.approx(expected, abs=1e-5)


def test_normalised_rank_vectors_are_centred_unit_vectors(data) -> None:
    z = rank_vectors(*data)
    torch.testing.assert_close(z.sum(dim=1), torch.zeros(len(z)), atol=1e-4, rtol=0)
    torch.testing.assert_close(z.norm(dim=1), torch.ones(len(z)), atol=1e-5, rtol=0)


def test_normalise_matches_equation_3_with_population_std() -> None:
    ranks = torch.tensor([[3.0, 0.0, 2.0, 1.0]])
    r = ranks.numpy()[0]
    expected = (r - r.mean()) / (np.sqrt(len(r)) * r.std())  # np.std is the population std
    np.testing.assert_allclose(normalise_ranks(ranks).numpy()[0], expected, atol=1e-6)


def test_fewer_than_two_anchors_is_refused() -> None:
    with pytest.raises(ValueError, match="two anchors"):
        normalise_ranks(torch.zeros(1, 1))


def test_blend_endpoints_are_cosine_and_rank(data) -> None:
    inputs, anchors = data
    left, right = inputs[:6], inputs[6:]
    cosine = (left * right).sum(dim=1)
    rank = (rank_vectors(left, anchors) * rank_vectors(right, anchors)).sum(dim=1)
    torch.testing.assert_close(blend(cosine, rank, 0.0), cosine)
    torch.testing.assert_close(blend(cosine, rank, 1.0), rank)
    torch.testing.assert_close(blend(cosine, rank, 0.25), 0.25 * rank + 0.75 * cosine)


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_blend_rejects_lambda_outside_unit_interval(bad: float) -> None:
    with pytest.raises(ValueError, match="lambda_inf"):
        blend(torch.zeros(1), torch.zeros(1), bad)


def test_batch_and_single_inputs_agree(data) -> None:
    inputs, anchors = data
    batch = rank_vectors(inputs, anchors)
    singles = torch.cat([rank_vectors(row[None], anchors) for row in inputs])
    torch.testing.assert_close(batch, singles)


def test_chunked_equals_unchunked(data) -> None:
    inputs, anchors = data
    torch.testing.assert_close(
        rank_vectors_chunked(inputs, anchors, chunk=5), rank_vectors(inputs, anchors)
    )
    assert rank_vectors_chunked(inputs[:0], anchors).shape == (0, len(anchors))


def _cosine_rows(seed: int, rows: int, m: int, dim: int = 32) -> np.ndarray:
    generator = torch.Generator().manual_seed(seed)
    return (unit_rows(generator, rows, dim) @ unit_rows(generator, m, dim).T).numpy()


@pytest.mark.parametrize(("rows", "m"), [(1, 2), (7, 300), (3, 5000)])
def test_exact_ranks_equal_scipy_ordinal_ranks(rows: int, m: int) -> None:
    cosines = _cosine_rows(rows * m, rows, m)
    expected = rankdata(cosines, axis=1, method="ordinal") - 1  # (rows, m), 0-based
    assert np.array_equal(ordinal_ranks(cosines), expected)
    # The fallback without numba is an unstable argsort: the same ranks on tie-free rows.
    tie_free = np.array([len(np.unique(row)) == m for row in cosines])
    assert np.array_equal(numpy_ranks(cosines)[tie_free], expected[tie_free])


def test_radix_ranks_keep_ties_in_column_order_like_scipy() -> None:
    values = np.array(
        [[0.5, -0.0, 0.25, 0.0, 0.5, -0.5, -0.0], [-1.0, -1.0, 1.0, 3e-39, -3e-39, 0.0, 1.0]],
        dtype=np.float32,
    )  # ties, both zeros, subnormals, negatives
    expected = rankdata(values, axis=1, method="ordinal") - 1
    assert np.array_equal(ordinal_ranks(values), expected)


@pytest.mark.parametrize("m", [2**22, 2**22 + 1])
def test_radix_ranks_rows_too_long_for_32_bit_items(m: int) -> None:
    """Up to 2**22 columns the last pass packs the top digit and the column in 32 bits; past
    that it keeps 64-bit items. Both give the ordinal ranks, ties included."""
    values = np.random.default_rng(m).integers(-5000, 5000, (1, m)).astype(np.float32) / 4096
    expected = np.empty(values.shape, dtype=np.float32)
    expected[0, np.argsort(values[0], kind="stable")] = np.arange(m, dtype=np.float32)
    assert np.array_equal(ordinal_ranks(values), expected)


def test_radix_writes_the_affine_map_of_the_ranks() -> None:
    cosines = _cosine_rows(1, 4, 1000)
    scale, shift = normalisation(1000)
    np.testing.assert_allclose(
        ordinal_ranks(cosines, scale, shift), ordinal_ranks(cosines) * scale + shift, atol=1e-7
    )


@pytest.mark.parametrize("compiled", [True, False])
def test_ranks_may_overwrite_their_values(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not compiled:
        monkeypatch.setattr(ordinal_ranks_module, "_kernel", lambda: None)
    cosines = _cosine_rows(2, 5, 3000)
    expected = ordinal_ranks(cosines, 0.5, -1.0)
    ranks_into(cosines, cosines, 0.5, -1.0)
    assert np.array_equal(cosines, expected)


def test_anchor_ranks_and_rank_vectors_use_the_exact_ranks(data) -> None:
    inputs, anchors = data
    expected = rankdata((inputs @ anchors.T).numpy(), axis=1, method="ordinal") - 1
    assert np.array_equal(anchor_ranks(inputs, anchors).numpy(), expected)
    torch.testing.assert_close(
        rank_vectors(inputs, anchors),
        normalise_ranks(torch.from_numpy(expected.astype(np.float32))),
        atol=1e-6,
        rtol=0,
    )


def test_spearman_identity_holds_at_ten_thousand_anchors() -> None:
    generator = torch.Generator().manual_seed(3)
    inputs, anchors = unit_rows(generator, 4, 64), unit_rows(generator, 10_000, 64)
    z = rank_vectors(inputs, anchors)
    profiles = (inputs @ anchors.T).numpy()
    for i, j in [(0, 1), (2, 3), (1, 1)]:
        expected = spearmanr(profiles[i], profiles[j]).statistic
        assert float(z[i] @ z[j]) == pytest.approx(expected, abs=1e-5)


def test_without_numba_the_numpy_fallback_gives_the_same_rank_vectors(
    data, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs, anchors = data
    compiled = rank_vectors(inputs, anchors)
    monkeypatch.setattr(ordinal_ranks_module, "_kernel", lambda: None)
    assert ordinal_ranks_module.method() == "argsort (numpy)"
    torch.testing.assert_close(rank_vectors(inputs, anchors), compiled, atol=1e-7, rtol=0)


@pytest.mark.parametrize("rows", [1, 2, 4, 5, 40])
def test_the_cpu_products_are_the_products_and_the_ranks_are_of_what_they_computed(
    rows: int,
) -> None:
    generator = torch.Generator().manual_seed(rows)
    inputs, anchors = unit_rows(generator, rows, 384), unit_rows(generator, 3001, 384)
    cosines = anchor_cosines(inputs, anchors)  # (rows, m)
    torch.testing.assert_close(cosines, inputs @ anchors.T, atol=1e-6, rtol=0)
    torch.testing.assert_close(row_dots(inputs, anchors[0]), inputs @ anchors[0], atol=1e-6, rtol=0)
    expected = rankdata(cosines.numpy(), axis=1, method="ordinal") - 1
    assert np.array_equal(anchor_ranks(inputs, anchors).numpy(), expected)


def test_a_rows_products_do_not_depend_on_the_rest_of_the_batch() -> None:
    generator = torch.Generator().manual_seed(5)
    inputs, anchors = unit_rows(generator, 37, 384), unit_rows(generator, 2003, 384)
    whole, dots = anchor_cosines(inputs, anchors), row_dots(inputs, anchors[0])
    for start, stop in [(0, 1), (3, 7), (5, 21), (20, 37)]:
        assert torch.equal(anchor_cosines(inputs[start:stop], anchors), whole[start:stop])
        assert torch.equal(row_dots(inputs[start:stop], anchors[0]), dots[start:stop])


def test_without_numba_the_products_are_torchs(data, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs, anchors = data
    monkeypatch.setattr(cpu_products, "_kernels", lambda: None)
    monkeypatch.setattr(panel_kernels, "kernel", lambda: None)
    assert torch.equal(anchor_cosines(inputs, anchors), inputs @ anchors.T)
    assert torch.equal(row_dots(inputs, anchors[0]), inputs @ anchors[0])
    left, right = torch.tensor([0, 2]), torch.tensor([1, 1])
    assert torch.equal(pair_dots(inputs, left, right), (inputs[left] * inputs[right]).sum(dim=1))


@pytest.mark.parametrize("width", [16, 20000])  # 20000: large enough to split over the spare core
def test_pair_dots_are_the_gathered_products(width: int) -> None:
    generator = torch.Generator().manual_seed(width)
    matrix = unit_rows(generator, 9, width)
    left, right = torch.tensor([0, 3, 8, 8, 5]), torch.tensor([1, 3, 2, 0, 7])
    expected = (matrix[left] * matrix[right]).sum(dim=1)
    dots = pair_dots(matrix, left, right)
    torch.testing.assert_close(dots, expected, atol=1e-6, rtol=0)
    for k in range(len(left)):  # a pair's bits do not depend on the other pairs
        assert torch.equal(pair_dots(matrix, left[k : k + 1], right[k : k + 1]), dots[k : k + 1])
    assert pair_dots(matrix, left[:0], right[:0]).shape == (0,)


@pytest.mark.parametrize("width", [4, 20000])  # 20000: each half on its own core
@pytest.mark.parametrize("left", [[0, 9], [-1, 0]])
def test_pair_dots_refuse_a_row_that_is_not_there(left: list[int], width: int) -> None:
    matrix = torch.ones(9, width)
    with pytest.raises(IndexError, match="out of range"):
        pair_dots(matrix, torch.tensor(left), torch.tensor([0, 1]))


@pytest.mark.parametrize("m", [1, 3, 4, 2003])
def test_bfloat16_anchors_give_the_products_of_their_float32_values(m: int) -> None:
    generator = torch.Generator().manual_seed(m)
    inputs, anchors = unit_rows(generator, 9, 384), unit_rows(generator, m, 384)
    half = anchors.to(torch.bfloat16)
    cosines = anchor_cosines(inputs, half)  # (9, m)
    assert cosines.dtype == torch.float32
    assert torch.equal(cosines, anchor_cosines(inputs, half.float()))
    for start, stop in [(0, 1), (2, 9)]:
        assert torch.equal(anchor_cosines(inputs[start:stop], half), cosines[start:stop])


def test_without_numba_bfloat16_anchors_are_multiplied_in_float32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generator = torch.Generator().manual_seed(1)
    inputs, anchors = unit_rows(generator, 3, 384), unit_rows(generator, 50, 384)
    monkeypatch.setattr(panel_kernels, "kernel", lambda: None)
    half = anchors.to(torch.bfloat16)
    assert torch.equal(anchor_cosines(inputs, half), inputs @ half.float().T)
