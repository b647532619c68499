"""Hand-computed values and properties of equations (5)-(9), (20) and (21).

Every comparison runs in float64. The values here come from a handful of operations on numbers of
size 1-10 with condition numbers below 100, so their rounding error is below 100 * eps(float64),
about 2e-14; ``RTOL = 1e-10`` leaves four orders of margin for any CPU, thread count or SIMD path,
while every bug these tests guard against moves a value by more than 1e-3. Exact comparisons are
used only where the result is exact in IEEE arithmetic (gradients of 0 or 1, a min of two values).
"""

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
    clipped_tokens,
    grpo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
    masked_mean,
    policy_ratio,
)
from grpo_minimal.losses import expected_kl_loss_gradient

RTOL = 1e-10
EPS64 = torch.finfo(torch.float64).eps


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def test_ratio_is_exp_of_log_difference():
    assert policy_ratio(t([math.log(0.3)]), t([math.log(0.2)])).item() == pytest.approx(
        1.5, rel=RTOL
    )


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
    assert value.item() == pytest.approx(expected, rel=RTOL)


def test_epsilon_high_widens_only_the_upper_bound():
    ratio = t([1.5, 0.5])
    value = clipped_surrogate(ratio, t([1.0, -1.0]), 0.2, 0.28)
    assert torch.allclose(value, t([1.28, -0.8]), rtol=RTOL, atol=0.0)


def test_gradient_is_zero_where_clipped():
    ratio = t([1.5, 1.1]).requires_grad_()
    clipped_surrogate(ratio, t([1.0, 1.0]), 0.2).sum().backward()
    assert ratio.grad.tolist() == [0.0, 1.0]  # exact: d(ratio * 1)/d ratio, or 0 through the clamp


def test_kl_estimators_hand_computed():
    logp, ref = t([math.log(0.5)]), t([math.log(0.25)])  # x = log(ref/p) = -log 2
    x = -math.log(2)
    assert kl_k1(logp, ref).item() == pytest.approx(-x, rel=RTOL)
    assert kl_k2(logp, ref).item() == pytest.approx(0.5 * x * x, rel=RTOL)
    assert kl_k3(logp, ref).item() == pytest.approx(math.exp(x) - x - 1, rel=RTOL)


@pytest.mark.numerics
def test_exact_categorical_kl_and_entropy():
    p, q = t([0.5, 0.5]), t([0.9, 0.1])
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert categorical_kl(p.log(), q.log()).item() == pytest.approx(expected, rel=RTOL)
    assert categorical_entropy(p.log()).item() == pytest.approx(math.log(2), rel=RTOL)


LOGITS_P, LOGITS_Q = t([1.0, 0.0, -1.0]), t([0.0, 0.5, 0.0])


@pytest.mark.numerics
def test_k1_and_k3_are_unbiased_and_k2_is_not_exactly():
    # E_pi[k] as an exact sum over the three outcomes, weighted by pi
    logp, logq = torch.log_softmax(LOGITS_P, -1), torch.log_softmax(LOGITS_Q, -1)
    exact = categorical_kl(LOGITS_P, LOGITS_Q).item()
    for estimator in (kl_k1, kl_k3):
        mean = (logp.exp() * estimator(logp, logq)).sum().item()
        assert mean == pytest.approx(exact, rel=RTOL)
    k2_mean = (logp.exp() * kl_k2(logp, logq)).sum().item()
    assert abs(k2_mean - exact) > 1e-3  # k2 matches the KL only to second order


@pytest.mark.numerics
def test_k1_and_k3_monte_carlo_means_are_within_six_standard_errors():
    # tolerance from the math: 6 standard errors of the mean, with the exact per-sample std;
    # a correct estimator fails with probability ~2e-9 whatever the random stream
    logp, logq = torch.log_softmax(LOGITS_P, -1), torch.log_softmax(LOGITS_Q, -1)
    num_samples = 200_000
    samples = torch.multinomial(
        logp.exp(), num_samples, replacement=True, generator=torch.Generator().manual_seed(0)
    )
    exact = categorical_kl(LOGITS_P, LOGITS_Q).item()
    for estimator in (kl_k1, kl_k3):
        values = estimator(logp, logq)
        std = ((logp.exp() * values**2).sum() - exact**2).sqrt().item()
        mean = estimator(logp[samples], logq[samples]).mean().item()
        assert abs(mean - exact) <= 6 * std / math.sqrt(num_samples)


# per-token values for the aggregation tests: two sequences, lengths 3 and 1; the 9s sit under
# the mask, so any aggregation that lets masked tokens in moves the result by a lot
LOSS = t([[1.0, 2.0, 3.0, 0.0], [4.0, 9.0, 9.0, 9.0]])
MASK = t([[1, 1, 1, 0], [1, 0, 0, 0]])


@pytest.mark.numerics
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
    assert aggregate_loss(LOSS, MASK, loss_type).item() == pytest.approx(expected, rel=RTOL)


@pytest.mark.numerics
def test_aggregation_options():
    assert aggregate_loss(LOSS, MASK, "dr_grpo", max_completion_length=10).item() == pytest.approx(
        0.5, rel=RTOL
    )
    assert aggregate_loss(LOSS, MASK, "dapo", num_items_in_batch=8).item() == pytest.approx(
        1.25, rel=RTOL
    )
    with pytest.raises(ValueError, match="loss_type"):
        aggregate_loss(LOSS, MASK, "mean")


@pytest.mark.numerics
def test_grpo_aggregation_weights_each_sequence_equally():
    # the same per-token loss 1.0 on a 1-token and 0 on a 3-token sequence: grpo gives each
    # sequence weight 1/2 (0.5), bnpo each token weight 1/4 (0.25)
    loss, mask = t([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), t([[1, 0, 0], [1, 1, 1]])
    assert aggregate_loss(loss, mask, "grpo").item() == pytest.approx(0.5, rel=RTOL)
    assert aggregate_loss(loss, mask, "bnpo").item() == pytest.approx(0.25, rel=RTOL)


@pytest.mark.numerics
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
    assert loss.item() == pytest.approx(expected, rel=RTOL)
    assert metrics["kl"] == pytest.approx(k3 / 2, rel=RTOL)
    biased, _ = grpo_loss(
        logps,
        old,
        ref,
        t([1.0]),
        t([[1, 1]]),
        beta=0.1,
        epsilon=0.2,
        loss_type="bnpo",
        use_bias_correction_kl=True,
    )
    assert biased.item() == pytest.approx(((-1.2 + 0.1 * 1.2 * k3) + -1.0) / 2, rel=RTOL)


@pytest.mark.parametrize(
    ("bias_correction", "expected"),
    [
        (False, 1 - 0.5),  # d k3 / d log pi = 1 - r, with r = pi_ref / pi = 0.5
        (True, math.log(0.6 / 0.3)),  # d (rho k3) / d log pi = k3 + 1 - r = log pi - log pi_ref
    ],
)
def test_grpo_loss_kl_gradient_on_policy(bias_correction, expected):
    # one token, A = 0, beta = 1, on-policy (old_logps=None): the gradient is the KL term's alone
    logps = t([[math.log(0.6)]]).requires_grad_()
    loss, _ = grpo_loss(
        logps,
        None,
        t([[math.log(0.3)]]),
        t([0.0]),
        t([[1]]),
        beta=1.0,
        epsilon=0.2,
        use_bias_correction_kl=bias_correction,
    )
    loss.backward()
    assert logps.grad.item() == pytest.approx(expected, rel=RTOL)


@pytest.mark.numerics
def test_clip_fraction_counts_clipped_tokens():
    logps = torch.log(t([[0.9, 0.1, 0.5]]))
    old = torch.log(t([[0.5, 0.5, 0.5]]))  # ratios 1.8 (clipped for A>0), 0.2, 1.0
    _, m = grpo_loss(logps, old, None, t([1.0]), t([[1, 1, 1]]), beta=0.0, epsilon=0.2)
    assert m["clip_fraction_high"] == pytest.approx(1 / 3, rel=RTOL)
    assert m["clip_fraction_low"] == 0.0  # ratio 0.2 with A > 0 is not clipped


@pytest.mark.numerics
def test_loss_is_zero_at_step_one_but_the_gradient_is_not():
    # on-policy (old = current): ratio exp(0) = 1 exactly, so loss = -mean(A) = 0 for centred
    # advantages; every term is exactly representable, so the sum is 0 in any order
    logits = torch.randn(
        4, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    ).requires_grad_()
    actions = torch.tensor([[0, 1, 2]] * 4)
    logps = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    advantages = t([1.0, -1.0, 0.5, -0.5])
    loss, _ = grpo_loss(
        logps, None, None, advantages, torch.ones(4, 3, dtype=torch.float64), beta=0.0, epsilon=0.2
    )
    loss.backward()
    assert loss.item() == 0.0
    assert logits.grad.abs().sum().item() > 0.1


def test_beta_without_reference_is_refused():
    with pytest.raises(ValueError, match="ref_logps"):
        grpo_loss(t([[0.0]]), None, None, t([1.0]), t([[1]]), beta=0.1, epsilon=0.2)


@settings(max_examples=200, deadline=None)
@given(st.floats(-3, 3), st.floats(-3, 3))
def test_k2_and_k3_are_nonnegative(logp, ref):
    # k3 = e^x - x - 1 >= 0 exactly; in floats each of its 3 operations rounds by at most
    # eps/2 of a term of size <= e^x + |x| + 1, which bounds how far below 0 it may land
    x = ref - logp
    assert kl_k3(t([logp]), t([ref])).item() >= -2 * EPS64 * (math.exp(x) + abs(x) + 1)
    assert kl_k2(t([logp]), t([ref])).item() >= 0.0


@settings(max_examples=200, deadline=None)
@given(st.floats(0.01, 5.0), st.floats(-5, 5), st.floats(0.01, 0.9), st.floats(0.01, 0.9))
def test_surrogate_never_exceeds_the_unclipped_objective(ratio, advantage, eps, eps_high):
    # exact: min returns one of its two arguments, and ratio * advantage is the same
    # correctly rounded float64 product here as in torch
    value = clipped_surrogate(t([ratio]), t([advantage]), eps, eps_high).item()
    assert value <= ratio * advantage


# ---- (20)-(21): KL estimators used as losses, exact expected gradients ----------------------

POLICY_LOGITS = t([1.0, 0.5, 0.0, -0.5, -1.0])
REF_LOGITS = t([-0.5, 0.0, 0.5, 0.0, 1.0])


def closed_form_gradients(logits, ref_logits):
    """Autograd of the exact reverse KL(pi || pi_ref) and forward KL(pi_ref || pi)."""
    leaf = logits.clone().requires_grad_()
    (reverse,) = torch.autograd.grad(categorical_kl(leaf, ref_logits).sum(), leaf)
    leaf = logits.clone().requires_grad_()
    (forward,) = torch.autograd.grad(categorical_kl(ref_logits, leaf).sum(), leaf)
    return reverse, forward


def assert_close(got, want, scale):
    # float64 gradients of O(scale): rounding error ~ 10 * eps * scale; RTOL leaves a wide margin
    assert torch.allclose(got, want, rtol=0.0, atol=RTOL * max(scale, 1.0)), (got, want)


def expected_gradients(logits, ref_logits):
    return {
        "k1": expected_kl_loss_gradient(logits, ref_logits, "k1"),
        "k2": expected_kl_loss_gradient(logits, ref_logits, "k2"),
        "k3": expected_kl_loss_gradient(logits, ref_logits, "k3"),
        "rho*k3": expected_kl_loss_gradient(logits, ref_logits, "k3", use_bias_correction_kl=True),
    }


@pytest.mark.numerics
def test_the_four_kl_loss_identities():
    reverse, forward = closed_form_gradients(POLICY_LOGITS, REF_LOGITS)
    # the example separates the candidates, so matching the wrong one cannot pass by accident
    assert (reverse - forward).norm() > 0.1 and reverse.norm() > 0.1 and forward.norm() > 0.1
    got = expected_gradients(POLICY_LOGITS, REF_LOGITS)
    assert_close(got["k1"], torch.zeros(5, dtype=torch.float64), 1.0)  # E[grad log pi] = 0
    assert_close(got["k2"], reverse, reverse.abs().max().item())  # reverse KL
    assert_close(got["k3"], forward, forward.abs().max().item())  # forward KL
    assert_close(got["rho*k3"], reverse, reverse.abs().max().item())  # reverse KL again


@pytest.mark.numerics
@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(-3, 3), min_size=5, max_size=5),
    st.lists(st.floats(-3, 3), min_size=5, max_size=5),
)
def test_the_four_kl_loss_identities_hold_for_any_pair(logits, ref_logits):
    logits, ref_logits = t(logits), t(ref_logits)
    reverse, forward = closed_form_gradients(logits, ref_logits)
    got = expected_gradients(logits, ref_logits)
    # the terms summed are pi * log-ratios, |log-ratio| <= 12 for logits in [-3, 3]
    assert_close(got["k1"], torch.zeros(5, dtype=torch.float64), 12.0)
    assert_close(got["k2"], reverse, 12.0)
    assert_close(got["k3"], forward, 12.0)
    assert_close(got["rho*k3"], reverse, 12.0)


@pytest.mark.numerics
def test_k3_as_a_loss_is_not_the_reverse_kl_gradient():
    # the point of (21): k3 estimates the reverse KL's value but, without the ratio, descends
    # the forward KL; if both matched, the example above would not separate them
    reverse, _ = closed_form_gradients(POLICY_LOGITS, REF_LOGITS)
    got = expected_kl_loss_gradient(POLICY_LOGITS, REF_LOGITS, "k3")
    assert (got - reverse).norm() > 0.1


@pytest.mark.numerics
def test_expected_kl_loss_gradient_handles_batches_and_leaves_inputs_alone():
    logits = torch.stack([POLICY_LOGITS, REF_LOGITS])
    refs = torch.stack([REF_LOGITS, POLICY_LOGITS])
    batched = expected_kl_loss_gradient(logits, refs, "k2")
    for row in range(2):
        single = expected_kl_loss_gradient(logits[row], refs[row], "k2")
        assert_close(batched[row], single, 1.0)
    assert not logits.requires_grad and logits.grad is None
    with torch.no_grad():  # works inside no_grad too (it builds its own graph)
        assert_close(expected_kl_loss_gradient(logits, refs, "k2"), batched, 1.0)


def test_expected_kl_loss_gradient_refuses_unknown_estimators():
    with pytest.raises(ValueError, match="estimator"):
        expected_kl_loss_gradient(POLICY_LOGITS, REF_LOGITS, "k4")


def test_clipped_tokens_hand_computed():
    """The clip of (6) acts below 1 - eps on negative advantages, above 1 + eps_high on positive
    ones; nowhere else (both trainers' clip fraction counts these tokens)."""
    ratio = torch.tensor([0.7, 0.7, 1.3, 1.3, 1.0, 1.3])
    advantages = torch.tensor([-1.0, 1.0, 1.0, -1.0, 1.0, 0.0])
    low, high = clipped_tokens(ratio, advantages, 0.2)
    assert low.tolist() == [True, False, False, False, False, False]
    assert high.tolist() == [False, False, True, False, False, False]
    _, high = clipped_tokens(ratio, advantages, 0.2, epsilon_high=0.4)  # clip-higher
    assert not high.any()


def test_masked_mean_hand_computed():
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_mean(values, mask).item() == 2.0  # (1 + 2 + 3) / 3
    assert masked_mean(values, torch.zeros(2, 3)).item() == 0.0  # empty mask: 0, not NaN
