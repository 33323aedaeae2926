"""Every loss against a plain numpy reference written from the paper's equation, loop by loop."""

import math

import numpy as np
import pytest
import torch

from models.losses.infonce import info_nce
from models.losses.listmle import listmle
from models.losses.listnet import listnet
from models.losses.mnrl import mnrl
from models.losses.rankcse import Listwise, mix_teachers, rankcse_total
from models.losses.rankcse_consistency import js_ranking_consistency
from models.losses.rankencoder import filtered_rank_mse, hinge_total

RNG = np.random.default_rng(7)


def unit(rows: int, dim: int = 5) -> np.ndarray:
    x = RNG.normal(size=(rows, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def t(x: np.ndarray) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def without(row: np.ndarray, i: int) -> np.ndarray:
    return np.delete(row, i)


def ref_info_nce(a: np.ndarray, b: np.ndarray, tau: float) -> float:
    sims = cos(a, b)
    losses = [
        -math.log(math.exp(sims[i, i] / tau) / sum(math.exp(s / tau) for s in sims[i]))
        for i in range(len(a))
    ]
    return float(np.mean(losses))


def test_info_nce_matches_eq1():
    a, b = RNG.normal(size=(4, 5)), RNG.normal(size=(4, 5))  # unnormalised on purpose
    got = info_nce(t(a), t(b), temperature=0.05)
    assert got.item() == pytest.approx(ref_info_nce(a, b, 0.05), rel=1e-9)


def test_info_nce_hand_computed_two_sentences():
    # cos matrix [[1, 0], [0, 1]] at tau = 1: each row -log(e / (e + 1)).
    a = np.eye(2)
    expected = -math.log(math.e / (math.e + 1))
    assert info_nce(t(a), t(a), temperature=1.0).item() == pytest.approx(expected)


def test_filtered_mse_keeps_only_pairs_inside_the_band():
    teacher = np.array([[1.0, 0.6, 0.2], [0.6, 1.0, 0.75], [0.2, 0.75, 1.0]])
    student = np.array([[1.0, 0.1, 0.9], [0.1, 1.0, 0.5], [0.9, 0.5, 1.0]])
    # Kept (0.5 <= u.u <= 0.8): (0,1), (1,0) with error 0.5, (1,2), (2,1) with error 0.25.
    expected = (2 * 0.5**2 + 2 * 0.25**2) / 4
    got = filtered_rank_mse(t(teacher), t(student), 0.5, 0.8)
    assert got.item() == pytest.approx(expected)


def test_filtered_mse_matches_eq6_on_random_input():
    teacher = RNG.uniform(-0.2, 1.0, size=(6, 6))
    student = RNG.uniform(-1.0, 1.0, size=(6, 6))
    kept = [(i, j) for i in range(6) for j in range(6) if 0.5 <= teacher[i, j] <= 0.8]
    expected = sum((teacher[i, j] - student[i, j]) ** 2 for i, j in kept) / len(kept)
    assert filtered_rank_mse(t(teacher), t(student)).item() == pytest.approx(expected)


def test_filtered_mse_is_zero_when_nothing_passes_and_still_differentiable():
    student = t(np.zeros((2, 2))).requires_grad_()
    loss = filtered_rank_mse(t(np.ones((2, 2))), student)
    loss.backward()
    assert loss.item() == 0.0
    assert student.grad is not None


def test_hinge_total_takes_the_larger_term():
    assert hinge_total(t(np.array(2.0)), t(np.array(0.05)), 0.05).item() == pytest.approx(0.1)
    assert hinge_total(t(np.array(2.0)), t(np.array(0.3)), 0.05).item() == pytest.approx(0.3)


def ref_js(sims: np.ndarray, tau: float) -> float:
    total = 0.0
    for i in range(len(sims)):
        p = softmax(sims[i] / tau)
        q = softmax(sims[:, i] / tau)
        m = (p + q) / 2
        total += 0.5 * (np.sum(p * np.log(p / m)) + np.sum(q * np.log(q / m)))
    return total / len(sims)


def test_js_consistency_matches_eq2():
    sims = cos(unit(5), unit(5))
    got = js_ranking_consistency(t(sims), temperature=0.05)
    assert got.item() == pytest.approx(ref_js(sims, 0.05), rel=1e-9)


def test_js_consistency_is_zero_for_symmetric_similarities():
    sims = cos(unit(4), unit(4))
    symmetric = (sims + sims.T) / 2
    assert js_ranking_consistency(t(symmetric)).item() == pytest.approx(0.0, abs=1e-12)


def ref_listnet(student: np.ndarray, teacher: np.ndarray, tau2: float, tau3: float) -> float:
    losses = []
    for i in range(len(student)):
        target = softmax(without(teacher[i], i) / tau3)
        log_probs = np.log(softmax(without(student[i], i) / tau2))
        losses.append(-np.sum(target * log_probs))
    return float(np.mean(losses))


def test_listnet_matches_eq4_without_the_positive_pair():
    student, teacher = cos(unit(5), unit(5)), cos(unit(5), unit(5))
    got = listnet(t(student), t(teacher), 0.05, 0.025)
    assert got.item() == pytest.approx(ref_listnet(student, teacher, 0.05, 0.025), rel=1e-9)


def test_listnet_ignores_the_diagonal():
    student, teacher = cos(unit(4), unit(4)), cos(unit(4), unit(4))
    changed = teacher.copy()
    np.fill_diagonal(changed, 100.0)
    assert listnet(t(student), t(changed)).item() == pytest.approx(
        listnet(t(student), t(teacher)).item()
    )


def ref_listmle(student: np.ndarray, teacher: np.ndarray, tau: float) -> float:
    losses = []
    for i in range(len(student)):
        s, s_t = without(student[i], i) / tau, without(teacher[i], i)
        order = sorted(range(len(s)), key=lambda j: -s_t[j])
        log_p = 0.0
        for k, j in enumerate(order):
            log_p += s[j] - math.log(sum(math.exp(s[m]) for m in order[k:]))
        losses.append(-log_p)
    return float(np.mean(losses))


def test_listmle_matches_eq5():
    student, teacher = cos(unit(5), unit(5)), cos(unit(5), unit(5))
    got = listmle(t(student), t(teacher), 0.05)
    assert got.item() == pytest.approx(ref_listmle(student, teacher, 0.05), rel=1e-9)


def test_listmle_hand_computed():
    # tau = 1, diagonal dropped. Row 0: student [1, 2], teacher ranks item 1 first -> scores
    # in teacher order [1, 2]; row 1: student [0.5, 0], teacher ranks item 2 first -> [0, 0.5];
    # row 2: two equal scores -> log 2 whatever the order.
    student = np.array([[0.0, 1.0, 2.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    teacher = np.array([[1.0, 0.9, 0.1], [0.1, 1.0, 0.9], [0.3, 0.2, 1.0]])
    row0 = math.log(math.e + math.e**2) - 1
    row1 = math.log(1 + math.exp(0.5))
    row2 = math.log(2)
    got = listmle(t(student), t(teacher), 1.0).item()
    assert got == pytest.approx((row0 + row1 + row2) / 3)


def test_mix_teachers_weights_the_first_by_alpha():
    s1, s2 = RNG.normal(size=(3, 3)), RNG.normal(size=(3, 3))
    got = mix_teachers(t(np.stack([s1, s2])), alpha=1 / 3)
    np.testing.assert_allclose(got.numpy(), s1 / 3 + 2 * s2 / 3)
    np.testing.assert_allclose(mix_teachers(t(s1[None]), alpha=0.9).numpy(), s1)
    with pytest.raises(ValueError):
        mix_teachers(t(np.stack([s1, s1, s1])))


@pytest.mark.parametrize("listwise", list(Listwise))
def test_rankcse_total_is_eq6(listwise):
    v1, v2, teacher = unit(6), unit(6), cos(unit(6), unit(6))
    sims = cos(v1, v2)
    rank = (
        ref_listnet(sims, teacher, 0.05, 0.025)
        if listwise is Listwise.LISTNET
        else ref_listmle(sims, teacher, 0.05)
    )
    expected = ref_info_nce(v1, v2, 0.05) + 0.5 * ref_js(sims, 0.05) + 2.0 * rank
    got = rankcse_total(t(v1), t(v2), t(teacher), listwise=listwise, beta=0.5, gamma=2.0)
    assert got.item() == pytest.approx(expected, rel=1e-9)


def ref_mnrl(a: np.ndarray, p: np.ndarray, n: np.ndarray | None, scale: float) -> float:
    candidates = p if n is None else np.concatenate([p, n])
    sims = cos(a, candidates) * scale
    return float(np.mean([-(sims[i, i] - math.log(np.exp(sims[i]).sum())) for i in range(len(a))]))


@pytest.mark.parametrize("with_negatives", [False, True])
def test_mnrl_matches_eq1_with_and_without_hard_negatives(with_negatives):
    a, p, n = unit(4), unit(4), unit(4)
    negatives = n if with_negatives else None
    got = mnrl(t(a), t(p), t(negatives) if with_negatives else None, scale=20.0)
    assert got.item() == pytest.approx(ref_mnrl(a, p, negatives, 20.0), rel=1e-9)


def test_hard_negatives_raise_the_loss():
    a = unit(3)
    p = a.copy()
    hard = a + 0.01 * RNG.normal(size=a.shape)  # almost the anchors themselves
    assert mnrl(t(a), t(p), t(hard)).item() > mnrl(t(a), t(p)).item()
