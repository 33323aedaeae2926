"""Similarity distillation against a plain numpy reference, loop by loop over rows and columns."""

import math

import numpy as np
import pytest
import torch

from models.losses.similarity_distillation import (
    SimilarityDistillationLoss,
    list_kl,
    mix_teachers,
    neighbour_mse,
    self_mask,
    similarity_distillation,
)
from tests.models.losses.reference import ref_cos, t, unit_rows

RNG = np.random.default_rng(11)


def unit(rows: int, dim: int = 6) -> np.ndarray:
    return unit_rows(RNG, rows, dim)


def ref_kl(student: np.ndarray, target: np.ndarray, own: list[int], tau: float) -> float:
    rows = []
    for i in range(len(student)):
        cols = [j for j in range(student.shape[1]) if j != own[i]]
        zp = sum(math.exp(target[i, j] / tau) for j in cols)
        zq = sum(math.exp(student[i, j] / tau) for j in cols)
        kl = 0.0
        for j in cols:
            p = math.exp(target[i, j] / tau) / zp
            q = math.exp(student[i, j] / tau) / zq
            kl += p * math.log(p / q)
        rows.append(kl)
    return float(np.mean(rows))


def ref_mse(
    student: np.ndarray, target: np.ndarray, own: list[int], k: int, extra: set[tuple[int, int]]
) -> float:
    errors = []
    for i in range(len(student)):
        cols = [j for j in range(student.shape[1]) if j != own[i]]
        top = sorted(cols, key=lambda j: -target[i, j])[:k]
        for j in cols:
            if j in top or (i, j) in extra:
                errors.append((student[i, j] - target[i, j]) ** 2)
    return float(np.mean(errors))


def test_mix_teachers_is_rankcse_alpha_mixing():
    a, b = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 4))
    got = mix_teachers(t(a), t(b), alpha=0.25).numpy()
    for i in range(3):
        for j in range(4):
            assert got[i, j] == pytest.approx(0.25 * a[i, j] + 0.75 * b[i, j])


def test_mix_teachers_refuses_mismatched_shapes():
    with pytest.raises(ValueError):
        mix_teachers(t(np.zeros((2, 3))), t(np.zeros((3, 2))))


def test_self_mask_marks_own_column_and_skips_minus_one():
    mask = self_mask(t(np.zeros((3, 5))), torch.tensor([4, -1, 0])).numpy()
    expected = np.zeros((3, 5), dtype=bool)
    expected[0, 4] = expected[2, 0] = True
    assert (mask == expected).all()


def test_list_kl_matches_reference_without_own_column():
    student, target = RNG.uniform(-1, 1, (4, 9)), RNG.uniform(-1, 1, (4, 9))
    own = [2, 0, 8, 5]
    excluded = self_mask(t(target), torch.tensor(own))
    got = list_kl(t(student), t(target), excluded, tau=0.1)
    assert got.item() == pytest.approx(ref_kl(student, target, own, 0.1), rel=1e-9)


def test_list_kl_is_zero_when_lists_agree_off_the_own_column():
    target = RNG.uniform(-1, 1, (3, 6))
    student = target.copy()
    student[[0, 1, 2], [1, 3, 5]] = 5.0  # own columns differ: ignored
    excluded = self_mask(t(target), torch.tensor([1, 3, 5]))
    assert list_kl(t(student), t(target), excluded).item() == pytest.approx(0.0, abs=1e-12)


def test_neighbour_mse_matches_reference_top_k_and_extra_columns():
    student, target = RNG.uniform(-1, 1, (3, 10)), RNG.uniform(-1, 1, (3, 10))
    own = [0, 4, 9]
    extra = {(0, 0), (0, 7), (1, 1), (2, 3)}  # (0, 0) is row 0's own column: never counted
    extra_mask = np.zeros((3, 10), dtype=bool)
    for i, j in extra:
        extra_mask[i, j] = True
    excluded = self_mask(t(target), torch.tensor(own))
    got = neighbour_mse(
        t(student), t(target), excluded, top_k=3, extra_columns=torch.tensor(extra_mask)
    )
    assert got.item() == pytest.approx(ref_mse(student, target, own, 3, extra), rel=1e-9)


def test_neighbour_mse_with_nothing_selected_is_zero_and_differentiable():
    student = t(RNG.uniform(-1, 1, (2, 3))).requires_grad_()
    excluded = torch.zeros((2, 3), dtype=torch.bool)
    loss = neighbour_mse(student, t(np.zeros((2, 3))), excluded, top_k=0)
    loss.backward()
    assert loss.item() == 0.0
    assert student.grad is not None


def test_similarity_distillation_total_matches_reference():
    batch, reference = RNG.normal(size=(4, 6)), RNG.normal(size=(11, 6))  # unnormalised
    target = mix_teachers(t(ref_cos(unit(4), unit(11))), t(ref_cos(unit(4), unit(11))), 0.67)
    own = [3, 7, -1, 10]
    got = similarity_distillation(
        t(batch),
        t(reference),
        target,
        self_columns=torch.tensor(own),
        tau=0.05,
        kl_weight=0.5,
        mse_weight=10.0,
        top_k=4,
    )
    student, tgt = ref_cos(batch, reference), target.numpy()
    expected = 0.5 * ref_kl(student, tgt, own, 0.05) + 10.0 * ref_mse(student, tgt, own, 4, set())
    assert got.item() == pytest.approx(expected, rel=1e-9)


def test_similarity_distillation_gradient_reaches_both_sides():
    batch = t(RNG.normal(size=(3, 5))).requires_grad_()
    reference = t(RNG.normal(size=(7, 5))).requires_grad_()
    target = t(ref_cos(unit(3, 5), unit(7, 5)))
    similarity_distillation(batch, reference, target, top_k=2).backward()
    assert batch.grad is not None and reference.grad is not None
    assert float(batch.grad.abs().sum()) > 0


def test_similarity_distillation_refuses_mismatched_target():
    with pytest.raises(ValueError):
        similarity_distillation(t(unit(2)), t(unit(3)), t(np.zeros((2, 4))))


def test_the_loss_module_lists_against_every_sentence_and_refreshes_its_table(encoder):
    texts = ["a cat sits .", "a dog runs .", "stocks fell .", "rain is coming .", "he sings ."]
    generator = torch.Generator().manual_seed(0)
    # Parent rows unlike the encoder's own embeddings, so a refreshed row is recognisable.
    parent = torch.nn.functional.normalize(torch.randn(5, 384, generator=generator), dim=-1)
    teacher = torch.nn.functional.normalize(torch.randn(5, 16, generator=generator), dim=-1)
    loss_fn = SimilarityDistillationLoss(encoder.model, teacher, parent, random_columns=2)
    torch.testing.assert_close(loss_fn.table, parent)
    rows = torch.tensor([1, 3])
    loss = loss_fn([texts[1], texts[3]], rows)
    loss.backward()
    grads = [p.grad for p in encoder.model.parameters() if p.grad is not None]
    encoder.model.zero_grad(set_to_none=True)
    assert loss.item() > 0 and any(g.abs().sum() > 0 for g in grads)
    # The batch's rows now hold the student's own embeddings of those texts, detached; the
    # other rows keep the parent's.
    fresh = encoder.encode([texts[1], texts[3]]).cpu()
    torch.testing.assert_close(loss_fn.table[rows], fresh, atol=1e-5, rtol=0)
    torch.testing.assert_close(loss_fn.table[[0, 2, 4]], parent[[0, 2, 4]])
    assert not loss_fn.table.requires_grad
