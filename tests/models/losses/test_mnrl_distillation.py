"""MNRL distillation against a plain numpy reference, written loop by loop."""

import math

import numpy as np
import pytest
import torch

from models.losses.mnrl_distillation import MNRLDistillationLoss, mnrl_distillation
from tests.models.losses.reference import ref_cos, t, unit_rows

RNG = np.random.default_rng(23)


def unit(rows: int, dim: int = 6) -> np.ndarray:
    return unit_rows(RNG, rows, dim)


def ref_softmax(row: np.ndarray, tau: float) -> list[float]:
    z = sum(math.exp(v / tau) for v in row)
    return [math.exp(v / tau) / z for v in row]


def ref_loss(
    anchors: np.ndarray,
    candidates: np.ndarray,
    target: np.ndarray,
    scale: float,
    tau: float,
    kl_weight: float,
    mse_weight: float,
) -> float:
    s = ref_cos(anchors, candidates)
    ce, kl, squares = [], [], []
    for i in range(len(anchors)):
        # MNRL: -log softmax(scale * s_i)[i], the positive being column i.
        ce.append(-math.log(ref_softmax(s[i], 1 / scale)[i]))
        p, q = ref_softmax(target[i], tau), ref_softmax(s[i], tau)
        kl.append(sum(p[j] * math.log(p[j] / q[j]) for j in range(len(p))))
        squares += [(s[i, j] - target[i, j]) ** 2 for j in range(s.shape[1])]
    return float(np.mean(ce) + kl_weight * np.mean(kl) + mse_weight * np.mean(squares))


@pytest.mark.parametrize("negatives", [False, True])
def test_loss_matches_reference(negatives):
    batch = 4
    anchors = RNG.normal(size=(batch, 6))  # unnormalised on purpose
    candidates = RNG.normal(size=(2 * batch if negatives else batch, 6))
    target = 0.67 * ref_cos(unit(batch), unit(len(candidates))) + 0.33 * ref_cos(
        unit(batch), unit(len(candidates))
    )
    got = mnrl_distillation(
        t(anchors), t(candidates), t(target), scale=20.0, tau=0.05, kl_weight=0.7, mse_weight=3.0
    )
    expected = ref_loss(anchors, candidates, target, 20.0, 0.05, 0.7, 3.0)
    assert got.item() == pytest.approx(expected, rel=1e-9)


def test_with_zero_weights_it_is_mnrl_and_the_teacher_terms_vanish_at_the_target():
    anchors, candidates = unit(3), unit(6)
    target = ref_cos(anchors, candidates)
    plain = mnrl_distillation(t(anchors), t(candidates), t(target), kl_weight=0, mse_weight=0)
    full = mnrl_distillation(t(anchors), t(candidates), t(target), kl_weight=1, mse_weight=10)
    # The student's own matrix as target: KL and MSE are zero, only MNRL is left.
    assert full.item() == pytest.approx(plain.item(), rel=1e-9)
    assert plain.item() == pytest.approx(ref_loss(anchors, candidates, target, 20, 1, 0, 0))


def test_refuses_a_target_of_another_shape():
    with pytest.raises(ValueError):
        mnrl_distillation(t(unit(2)), t(unit(4)), t(np.zeros((2, 3))))


def test_the_module_looks_targets_up_by_text_and_trains_the_encoder(encoder):
    texts = ["a man plays .", "a man plays music .", "nobody plays .", "a dog runs .",
             "an animal runs .", "the dog sleeps ."]  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    teacher = torch.nn.functional.normalize(torch.randn(6, 16, generator=generator), dim=-1)
    parent = torch.nn.functional.normalize(torch.randn(6, 384, generator=generator), dim=-1)
    loss_fn = MNRLDistillationLoss(encoder.model, texts, teacher, parent, alpha=0.25)

    anchors, positives, negatives = [texts[0], texts[3]], [texts[1], texts[4]], [texts[2], texts[5]]
    target = loss_fn.target(anchors, positives + negatives)
    expected = 0.25 * teacher[[0, 3]] @ teacher[[1, 4, 2, 5]].T + 0.75 * (
        parent[[0, 3]] @ parent[[1, 4, 2, 5]].T
    )
    torch.testing.assert_close(target, expected)

    loss = loss_fn(anchors, positives, negatives)
    loss.backward()
    grads = [p.grad for p in encoder.model.parameters() if p.grad is not None]
    encoder.model.zero_grad(set_to_none=True)
    assert loss.item() > 0 and any(g.abs().sum() > 0 for g in grads)


def test_the_module_refuses_embeddings_of_other_texts(encoder):
    with pytest.raises(ValueError):
        MNRLDistillationLoss(encoder.model, ["a", "b"], torch.zeros(3, 4), torch.zeros(3, 4))
