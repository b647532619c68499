"""Hand-computed values and properties of equations (5)-(9)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_minimal import (
    aggregate_loss,
    categorical_entropy,
    categorical_kl,
    clipped_surrogate,
    grpo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
    policy_ratio,
)


def t(values):
    return torch.tensor(values, dtype=torch.float32)


def test_ratio_is_exp_of_log_difference():
    assert policy_ratio(t([math.log(0.3)]), t([math.log(0.2)])).item() == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("ratio", "advantage", "expected"),
    [
        (1.5, 2.0, 2.4),  # A > 0, ratio above 1 + eps: clipped to 1.2 * 2
        (0.5, 2.0, 1.0),  # A > 0, ratio below 1 - eps: the unclipped term is smaller
        (0.5, -2.0, -1.6),  # A < 0, ratio below 1 - eps: clipped to 0.8 * -2
        (1.5, -2.0, -3.0),  # A < 0, ratio above 1 + eps: unclipped (pessimistic) term
        (1.1, 1.0, 1.1),  # inside the trust region
    ],
)
def test_clipped_surrogate_hand_computed(ratio, advantage, expected):
    value = clipped_surrogate(t([ratio]), t([advantage]), epsilon=0.2)
    assert value.item() == pytest.approx(expected)


def test_epsilon_high_widens_only_the_upper_bound():
    ratio = t([1.5, 0.5])
    assert torch.allclose(clipped_surrogate(ratio, t([1.0, -1.0]), 0.2, 0.28), t([1.28, -0.8]))


def test_gradient_is_zero_where_clipped():
    ratio = t([1.5, 1.1]).requires_grad_()
    clipped_surrogate(ratio, t([1.0, 1.0]), 0.2).sum().backward()
    assert ratio.grad.tolist() == [0.0, 1.0]


def test_kl_estimators_hand_computed():
    logp, ref = t([math.log(0.5)]), t([math.log(0.25)])  # x = log(ref/p) = -log 2
    x = -math.log(2)
    assert kl_k1(logp, ref).item() == pytest.approx(-x)
    assert kl_k2(logp, ref).item() == pytest.approx(0.5 * x * x)
    assert kl_k3(logp, ref).item() == pytest.approx(math.exp(x) - x - 1)


def test_exact_categorical_kl_and_entropy():
    p, q = t([0.5, 0.5]), t([0.9, 0.1])
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert categorical_kl(p.log(), q.log()).item() == pytest.approx(expected, rel=1e-5)
    assert categorical_entropy(p.log()).item() == pytest.approx(math.log(2))


def test_k1_and_k3_are_unbiased_estimates_of_the_exact_kl():
    logits_p, logits_q = t([1.0, 0.0, -1.0]), t([0.0, 0.5, 0.0])
    logp, logq = torch.log_softmax(logits_p, -1), torch.log_softmax(logits_q, -1)
    samples = torch.multinomial(
        logp.exp(), 200_000, replacement=True, generator=torch.Generator().manual_seed(0)
    )
    exact = categorical_kl(logits_p, logits_q).item()
    for estimator in (kl_k1, kl_k3):
        assert estimator(logp[samples], logq[samples]).mean().item() == pytest.approx(
            exact, rel=0.03
        )


# per-token values for the aggregation tests: two sequences, lengths 3 and 1
LOSS = t([[1.0, 2.0, 3.0, 0.0], [4.0, 9.0, 9.0, 9.0]])
MASK = t([[1, 1, 1, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [
        ("grpo", (6 / 3 + 4 / 1) / 2),  # per-sequence means, then their mean: 3.0
        ("bnpo", 10 / 4),  # all tokens / token count
        ("dr_grpo", 10 / (2 * 4)),  # all tokens / (batch * max length)
        ("dapo", 10 / 4),  # all tokens / tokens in the global batch (here, this batch)
    ],
)
def test_aggregation_hand_computed(loss_type, expected):
    assert aggregate_loss(LOSS, MASK, loss_type).item() == pytest.approx(expected)


def test_aggregation_options():
    assert aggregate_loss(LOSS, MASK, "dr_grpo", max_completion_length=10).item() == pytest.approx(
        0.5
    )
    assert aggregate_loss(LOSS, MASK, "dapo", num_items_in_batch=8).item() == pytest.approx(1.25)
    with pytest.raises(ValueError, match="loss_type"):
        aggregate_loss(LOSS, MASK, "mean")


def test_grpo_loss_hand_computed_with_kl():
    logps = t([[math.log(0.6), math.log(0.5)]])
    old = t([[math.log(0.5), math.log(0.5)]])  # ratios 1.2 and 1.0
    ref = t([[math.log(0.3), math.log(0.5)]])
    loss, metrics = grpo_loss(
        logps, old, ref, t([1.0]), t([[1, 1]]), beta=0.1, epsilon=0.2, loss_type="bnpo"
    )
    x = math.log(0.3 / 0.6)
    k3 = math.exp(x) - x - 1
    expected = ((-1.2 + 0.1 * k3) + (-1.0 + 0.0)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert metrics["kl"] == pytest.approx(k3 / 2, rel=1e-5)
    biased, _ = grpo_loss(
        logps, old, ref, t([1.0]), t([[1, 1]]), beta=0.1, epsilon=0.2, loss_type="bnpo",
        use_bias_correction_kl=True,
    )  # fmt: skip
    assert biased.item() == pytest.approx(((-1.2 + 0.1 * 1.2 * k3) + -1.0) / 2, rel=1e-5)


def test_clip_fraction_counts_clipped_tokens():
    logps = torch.log(t([[0.9, 0.1, 0.5]]))
    old = torch.log(t([[0.5, 0.5, 0.5]]))  # ratios 1.8 (clipped for A>0), 0.2, 1.0
    _, m = grpo_loss(logps, old, None, t([1.0]), t([[1, 1, 1]]), beta=0.0, epsilon=0.2)
    assert m["clip_fraction_high"] == pytest.approx(1 / 3)
    assert m["clip_fraction_low"] == 0.0  # ratio 0.2 with A > 0 is not clipped


def test_loss_is_zero_at_step_one_but_the_gradient_is_not():
    # on-policy (old = current): ratio 1, so loss = -mean(A) = 0 for centred advantages
    logits = torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
    actions = torch.tensor([[0, 1, 2]] * 4)
    logps = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    advantages = t([1.0, -1.0, 0.5, -0.5])
    loss, _ = grpo_loss(logps, None, None, advantages, torch.ones(4, 3), beta=0.0, epsilon=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(0.0, abs=1e-7)
    assert logits.grad.abs().sum().item() > 0.1


def test_beta_without_reference_is_refused():
    with pytest.raises(ValueError, match="ref_logps"):
        grpo_loss(t([[0.0]]), None, None, t([1.0]), t([[1]]), beta=0.1, epsilon=0.2)


@settings(max_examples=200, deadline=None)
@given(st.floats(-3, 3), st.floats(-3, 3))
def test_k2_and_k3_are_nonnegative(logp, ref):
    assert kl_k3(t([logp]), t([ref])).item() >= -1e-6
    assert kl_k2(t([logp]), t([ref])).item() >= 0.0


@settings(max_examples=200, deadline=None)
@given(st.floats(0.01, 5.0), st.floats(-5, 5), st.floats(0.01, 0.9), st.floats(0.01, 0.9))
def test_surrogate_never_exceeds_the_unclipped_objective(ratio, advantage, eps, eps_high):
    value = clipped_surrogate(t([ratio]), t([advantage]), eps, eps_high).item()
    assert value <= ratio * advantage + 1e-5
