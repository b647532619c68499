"""Lab 03: the reference passes, a delegate to the package passes, known mistakes fail.

Also checks that the lab's questions and hints say what the package's code does: the ratios
where the clipped surrogate's gradient vanishes, which KL estimator's loss follows the reverse KL
(``expected_kl_loss_gradient``), and the hand-computed values quoted in the hints.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from lab_helpers import (
    GRADER_SEEDS,
    assert_caught_publicly,
    assert_fails,
    assert_passes,
    assert_same_verdict,
    assert_told,
)

from grpo_minimal import losses as package
from grpo_minimal.labs import objective as checks
from grpo_minimal.labs.checking import CheckFailed

# --- exercise 1: clipped_surrogate ---------------------------------------------------------------


def reference_clip(ratio, advantages, epsilon, epsilon_high=None):
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + high)
    return torch.min(ratio * advantages, clipped * advantages)


def clip_uses_max(ratio, advantages, epsilon, epsilon_high=None):
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + high)
    return torch.max(ratio * advantages, clipped * advantages)


def clip_applied_to_advantage(ratio, advantages, epsilon, epsilon_high=None):
    high = epsilon if epsilon_high is None else epsilon_high
    return torch.min(ratio * advantages, ratio * torch.clamp(advantages, 1.0 - epsilon, 1.0 + high))


def clip_ignores_epsilon_high(ratio, advantages, epsilon, epsilon_high=None):
    return reference_clip(ratio, advantages, epsilon)


def clip_swaps_epsilons(ratio, advantages, epsilon, epsilon_high=None):
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, 1.0 - high, 1.0 + epsilon)
    return torch.min(ratio * advantages, clipped * advantages)


def clip_returns_the_loss(ratio, advantages, epsilon, epsilon_high=None):
    """-L_clip: the sign grpo_loss adds, applied one step too early."""
    return -reference_clip(ratio, advantages, epsilon, epsilon_high)


def clip_in_log_space(ratio, advantages, epsilon, epsilon_high=None):
    """The ratio handled as a log-ratio log pi - log pi_old (no exp): clipped around 0."""
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, -epsilon, high)
    return torch.min(ratio * advantages, clipped * advantages)


def clip_exponentiates_the_ratio(ratio, advantages, epsilon, epsilon_high=None):
    """The ratio taken for log pi - log pi_old and exponentiated once more."""
    return reference_clip(torch.exp(ratio), advantages, epsilon, epsilon_high)


def clip_straight_through(ratio, advantages, epsilon, epsilon_high=None):
    """Right values, wrong gradient: the clip lets the gradient through where it should stop it."""
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = ratio + (torch.clamp(ratio, 1.0 - epsilon, 1.0 + high) - ratio).detach()
    return torch.min(ratio * advantages, clipped * advantages)


def clip_detached(ratio, advantages, epsilon, epsilon_high=None):
    """Right values, no gradient at all."""
    return reference_clip(ratio, advantages, epsilon, epsilon_high).detach()


CLIP_WRONG = [
    clip_uses_max,
    clip_applied_to_advantage,
    clip_ignores_epsilon_high,
    clip_swaps_epsilons,
    clip_returns_the_loss,
    clip_in_log_space,
    clip_exponentiates_the_ratio,
    clip_straight_through,
    clip_detached,
]


@pytest.mark.parametrize("fn", [reference_clip, package.clipped_surrogate])
def test_clip_reference_and_package_pass(fn):
    assert_passes(checks.check_clipped_surrogate, fn)


@pytest.mark.parametrize("fn", CLIP_WRONG, ids=lambda f: f.__name__)
def test_clip_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_clipped_surrogate, fn)


@pytest.mark.parametrize("fn", [*CLIP_WRONG, reference_clip], ids=lambda f: f.__name__)
def test_clip_public_verdict_is_the_graded_one(fn):
    assert_same_verdict(checks.check_clipped_surrogate, fn)


@pytest.mark.parametrize(
    ("fn", "case", "shown"),
    [
        (clip_uses_max, "A > 0, ratio above 1 + epsilon: capped", "2.4"),
        (clip_ignores_epsilon_high, "clip-higher", "1.28"),
        (clip_returns_the_loss, "inside the clip range", "-1.1"),
        (
            clip_straight_through,
            "gradient: zero exactly where",
            "tensor([0.0, 1.0, 0.0, -1.0, 1.0]",
        ),
        (clip_detached, "gradient: zero exactly where", "no gradient"),
    ],
)
def test_clip_feedback_names_the_case(fn, case, shown):
    message = assert_fails(checks.check_clipped_surrogate, fn).split("also failing")[0]
    assert case in message and shown in message, message


# --- exercise 2: kl_k3 ---------------------------------------------------------------------------


def reference_k3(logps, ref_logps):
    x = ref_logps - logps
    return torch.exp(x) - x - 1.0


def k3_swapped(logps, ref_logps):
    x = logps - ref_logps
    return torch.exp(x) - x - 1.0


def k3_sign_in_exponent(logps, ref_logps):
    return torch.exp(logps - ref_logps) - (ref_logps - logps) - 1.0


def k3_without_minus_one(logps, ref_logps):
    x = ref_logps - logps
    return torch.exp(x) - x


def k3_returns_k1(logps, ref_logps):
    return logps - ref_logps


def k3_returns_k2(logps, ref_logps):
    return 0.5 * (logps - ref_logps) ** 2


def k3_from_probabilities(logps, ref_logps):
    """The issue's variant: pi_ref / pi from the probabilities; 0 / 0 for very unlikely tokens."""
    r = torch.exp(ref_logps) / torch.exp(logps)
    return r - torch.log(r) - 1.0


def k3_log_of_exp(logps, ref_logps):
    """The ratio in log space, but log(r) instead of x: log(exp(-119.5)) = log(0) = -inf."""
    r = torch.exp(ref_logps - logps)
    return r - torch.log(r) - 1.0


def k3_inverse_ratio(logps, ref_logps):
    """pi / pi_ref in log space, then inverted: exp(+119.5) overflows float32 to inf."""
    ratio = torch.exp(logps - ref_logps)
    return 1.0 / ratio + torch.log(ratio) - 1.0


def k3_probabilities_in_float64(logps, ref_logps):
    """Probability space, but in float64 (exp(-120) = 7.7e-53 is fine there): must pass."""
    r = torch.exp(ref_logps.double()) / torch.exp(logps.double())
    return (r - torch.log(r) - 1.0).to(logps.dtype)


KL_WRONG = [
    k3_swapped,
    k3_sign_in_exponent,
    k3_without_minus_one,
    k3_returns_k1,
    k3_returns_k2,
    k3_from_probabilities,
    k3_log_of_exp,
    k3_inverse_ratio,
]


@pytest.mark.parametrize("fn", [reference_k3, package.kl_k3])
def test_kl_reference_and_package_pass(fn):
    assert_passes(checks.check_kl_k3, fn)


@pytest.mark.parametrize("fn", KL_WRONG, ids=lambda f: f.__name__)
def test_kl_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_kl_k3, fn)


@pytest.mark.parametrize(
    "fn", [*KL_WRONG, reference_k3, k3_probabilities_in_float64], ids=lambda f: f.__name__
)
def test_kl_public_verdict_is_the_graded_one(fn):
    assert_same_verdict(checks.check_kl_k3, fn)


@pytest.mark.parametrize(
    ("fn", "case", "got"),
    [
        (k3_from_probabilities, "very unlikely tokens under both", "nan"),
        (k3_log_of_exp, "the reference finds the token very unlikely", "inf"),
        (k3_inverse_ratio, "the reference finds the token very unlikely", "inf"),
    ],
)
def test_probability_space_k3_is_caught_publicly_with_the_log_space_hint(fn, case, got):
    """The issue's "k3 in probability space": ``lab check`` names it, and says why."""
    message = assert_fails(checks.check_kl_k3, fn)
    first = message.split("also failing")[0]
    assert case in first and got in first, message
    assert "Stay in log space" in first and "exp(-120) is 0 in float32" in first


def test_swapped_k3_feedback_names_the_asymmetric_case():
    message = assert_fails(checks.check_kl_k3, k3_swapped)
    assert "the policy likes the token more than the reference" in message
    assert "0.193147" in message  # e^{-log 2} + log 2 - 1, the package's value


# --- exercise 3: aggregate_loss ------------------------------------------------------------------


def reference_aggregate(
    per_token_loss, mask, loss_type="grpo", max_completion_length=None, num_items_in_batch=None
):
    if loss_type not in ("grpo", "bnpo", "dr_grpo", "dapo"):
        raise ValueError(loss_type)
    mask = mask.to(per_token_loss.dtype)
    total = (per_token_loss * mask).sum()
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return total / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        length = max_completion_length or per_token_loss.shape[-1]
        return total / (per_token_loss.shape[0] * length)
    if num_items_in_batch is None:
        return total / mask.sum().clamp(min=1.0)
    return total / max(float(num_items_in_batch), 1.0)


def _with(loss_type_map=None, **overrides):
    """The reference with some loss_types replaced (name -> function of the same arguments)."""

    def aggregate(
        per_token_loss, mask, loss_type="grpo", max_completion_length=None, num_items_in_batch=None
    ):
        args = (per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch)
        if loss_type in overrides:
            return overrides[loss_type](*args)
        return reference_aggregate(*args)

    return aggregate


def _token_mean(per_token_loss, mask, *_):
    mask = mask.to(per_token_loss.dtype)
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)


def _sequence_mean(per_token_loss, mask, *_):
    mask = mask.to(per_token_loss.dtype)
    return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def aggregate_ignores_mask(
    per_token_loss, mask, loss_type="grpo", max_completion_length=None, num_items_in_batch=None
):
    ones = torch.ones_like(per_token_loss)
    return reference_aggregate(
        per_token_loss, ones, loss_type, max_completion_length, num_items_in_batch
    )


def aggregate_counts_padding(
    per_token_loss, mask, loss_type="grpo", max_completion_length=None, num_items_in_batch=None
):
    """Masked sum, but every denominator counts the padded tokens too."""
    total = (per_token_loss * mask).sum()
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / per_token_loss.shape[-1]).mean()
    if loss_type == "dr_grpo":
        return reference_aggregate(per_token_loss, mask, loss_type, max_completion_length)
    return total / per_token_loss.numel()


def _grpo_without_clamp(per_token_loss, mask, *_):
    mask = mask.to(per_token_loss.dtype)
    return ((per_token_loss * mask).sum(-1) / mask.sum(-1)).mean()


def _grpo_skips_empty(per_token_loss, mask, *_):
    mask = mask.to(per_token_loss.dtype)
    lengths = mask.sum(-1)
    means = (per_token_loss * mask).sum(-1) / lengths.clamp(min=1.0)
    return means[lengths > 0].mean() if (lengths > 0).any() else means.sum()


def _dr_grpo_ignores_max_length(per_token_loss, mask, *_):
    return (per_token_loss * mask).sum() / per_token_loss.numel()


def aggregate_without_value_error(
    per_token_loss, mask, loss_type="grpo", max_completion_length=None, num_items_in_batch=None
):
    """Anything that is not grpo/bnpo/dr_grpo falls through to the dapo branch."""
    if loss_type not in ("grpo", "bnpo", "dr_grpo"):
        loss_type = "dapo"
    return reference_aggregate(
        per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch
    )


aggregate_grpo_bnpo_swapped = _with(grpo=_token_mean, bnpo=_sequence_mean)
aggregate_dr_grpo_token_count = _with(dr_grpo=_token_mean)
aggregate_dapo_as_grpo = _with(dapo=_sequence_mean)
aggregate_dapo_ignores_num_items = _with(dapo=_token_mean)
aggregate_dr_grpo_ignores_max_length = _with(dr_grpo=_dr_grpo_ignores_max_length)


def _bnpo_without_clamp(per_token_loss, mask, *_):
    mask = mask.to(per_token_loss.dtype)
    return (per_token_loss * mask).sum() / mask.sum()


def _dapo_without_clamp(per_token_loss, mask, loss_type, max_completion_length, num_items):
    mask = mask.to(per_token_loss.dtype)
    tokens = mask.sum() if num_items is None else num_items
    return (per_token_loss * mask).sum() / tokens


aggregate_grpo_without_clamp = _with(grpo=_grpo_without_clamp)
aggregate_grpo_skips_empty = _with(grpo=_grpo_skips_empty)
aggregate_bnpo_without_clamp = _with(bnpo=_bnpo_without_clamp)
aggregate_dapo_without_clamp = _with(dapo=_dapo_without_clamp)

AGGREGATE_WRONG = {
    "mask_ignored": aggregate_ignores_mask,
    "denominators_count_padding": aggregate_counts_padding,
    "grpo_bnpo_swapped": aggregate_grpo_bnpo_swapped,
    "dr_grpo_divides_by_token_count": aggregate_dr_grpo_token_count,
    "dapo_treated_as_grpo": aggregate_dapo_as_grpo,
    "dapo_ignores_num_items_in_batch": aggregate_dapo_ignores_num_items,
    "dr_grpo_ignores_max_completion_length": aggregate_dr_grpo_ignores_max_length,
    "no_value_error": aggregate_without_value_error,
    "grpo_without_clamp": aggregate_grpo_without_clamp,
    "grpo_skips_empty_sequences": aggregate_grpo_skips_empty,
    "bnpo_without_clamp": aggregate_bnpo_without_clamp,
    "dapo_without_clamp": aggregate_dapo_without_clamp,
}


@pytest.mark.parametrize("fn", [reference_aggregate, package.aggregate_loss])
def test_aggregate_reference_and_package_pass(fn):
    assert_passes(checks.check_aggregate_loss, fn)


@pytest.mark.parametrize("fn", AGGREGATE_WRONG.values(), ids=list(AGGREGATE_WRONG))
def test_aggregate_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_aggregate_loss, fn)


@pytest.mark.parametrize(
    "fn",
    [*AGGREGATE_WRONG.values(), reference_aggregate],
    ids=[*AGGREGATE_WRONG, "reference"],
)
def test_aggregate_public_verdict_is_the_graded_one(fn):
    assert_same_verdict(checks.check_aggregate_loss, fn)


@pytest.mark.parametrize(
    ("fn", "case", "shown"),
    [
        (aggregate_grpo_without_clamp, "grpo with an empty completion", ".clamp(min=1.0)"),
        (aggregate_grpo_skips_empty, "grpo with an empty completion", "still counts"),
        (aggregate_bnpo_without_clamp, "no tokens at all, loss_type='bnpo'", ".clamp(min=1.0)"),
        (aggregate_dapo_without_clamp, "no tokens at all, loss_type='dapo'", ".clamp(min=1.0)"),
    ],
)
def test_empty_mask_mistakes_are_named_by_lab_check(fn, case, shown):
    """The issue's "empty mask" and "no clamp": ``lab check`` names the case and the fix."""
    message = assert_fails(checks.check_aggregate_loss, fn).split("also failing")[0]
    assert case in message and shown in message, message


@pytest.mark.parametrize(
    ("fn", "case"),
    [
        (aggregate_ignores_mask, "loss_type='grpo'"),
        (aggregate_grpo_bnpo_swapped, "loss_type='grpo'"),
        (aggregate_dr_grpo_token_count, "loss_type='dr_grpo'"),
        (aggregate_dapo_as_grpo, "loss_type='dapo'"),
        (aggregate_without_value_error, "an unknown loss_type"),
    ],
)
def test_aggregate_feedback_names_the_case(fn, case):
    assert case in assert_fails(checks.check_aggregate_loss, fn).split("also failing")[0]


@pytest.mark.parametrize(
    ("loss_type", "kwargs", "expected"),
    [  # the numbers the public hints quote, from the package
        ("grpo", {}, 3.0),
        ("bnpo", {}, 2.5),
        ("dr_grpo", {}, 1.25),
        ("dapo", {}, 2.5),
        ("dr_grpo", {"max_completion_length": 10}, 0.5),
        ("dapo", {"num_items_in_batch": 8}, 1.25),
    ],
)
def test_public_hints_quote_the_package(loss_type, kwargs, expected):
    value = package.aggregate_loss(checks.LOSS, checks.MASK, loss_type, **kwargs)
    assert value.item() == pytest.approx(expected, rel=1e-6)


def _kind(case):
    """A case's kind: its name up to the drawn numbers, and the dtypes of its tensors."""
    return re.sub(r"-?[0-9.]+", "#", case.name), [
        a.dtype for a in case.args if isinstance(a, torch.Tensor)
    ]


TWINS = [checks.clip_twins, checks.clip_gradient_twins, checks.kl_twins, checks.aggregate_twins]


@pytest.mark.parametrize("twins", TWINS, ids=lambda f: f.__name__)
def test_hidden_twins_are_fresh_values_of_the_public_kinds(twins):
    """Same kinds (names up to the drawn numbers, dtypes) and other values for another seed."""
    public, hidden = twins(0), twins(98_765)
    assert [_kind(c) for c in public] == [_kind(c) for c in hidden]
    assert any(
        p.args[0].shape != h.args[0].shape or not torch.equal(p.args[0], h.args[0])
        for p, h in zip(public, hidden, strict=True)
    )
    again = twins(0)  # the same seed draws the same values
    assert all(torch.equal(p.args[0], q.args[0]) for p, q in zip(public, again, strict=True))


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 12_345, 98_765])
def test_twins_keep_their_edges_for_every_seed(seed):
    """The edges the text promises are in every draw, so no seed adds or drops one."""
    clip = checks.clip_twins(seed)
    ratios = torch.cat([c.args[0].flatten().double() for c in clip])
    assert ratios.min() < 0.01 and ratios.max() > 100  # far outside the clip range
    assert all((c.args[1] < 0).any() for c in clip if "zero advantage" not in c.name)
    assert any(len(c.args) > 3 and c.args[3] < c.args[2] for c in clip)  # eps_high < eps
    for case in [*clip, *checks.clip_gradient_twins(seed)]:
        ratio, advantages, eps = case.args[:3]
        high = case.args[3] if len(case.args) > 3 else case.kwargs.get("epsilon_high", eps)
        outside = (ratio < 1 - eps) | (ratio > 1 + high)
        if "across the clip" in case.name:  # every row: below, inside and above the clip
            assert outside.any(dim=-1).all() and (~outside).any(dim=-1).all(), case.name
    kl = {_kind(c)[0]: c for c in checks.kl_twins(seed)}
    both = kl["very unlikely tokens under both (log-probs below #): work in log space"]
    assert (both.args[0] < -104).all() and (both.args[1] < -104).all()  # exp() is 0 in float32
    ref = kl["the reference finds the tokens very unlikely (x below #)"]
    assert ((ref.args[1] - ref.args[0]) < -100).all()
    aggregate = checks.aggregate_twins(seed)
    _, mask, _ = aggregate[0].args
    assert mask[0].sum() == 0 and mask[-1].sum() == mask.shape[-1]  # an empty and a full row
    assert any(c.args[1].dtype == torch.bool for c in aggregate)
    assert any(not c.args[1].any() for c in aggregate)  # a batch with no tokens at all
    assert any(c.args[2] not in package.LOSS_TYPES for c in aggregate)  # the refusal


# --- question 1: where the gradient of the clipped surrogate is zero -----------------------------


def _package_slope(ratio: float, advantage: float, epsilon: float, epsilon_high=None) -> float:
    rho = torch.tensor([ratio], dtype=torch.float64, requires_grad=True)
    objective = package.clipped_surrogate(
        rho, torch.tensor([advantage], dtype=torch.float64), epsilon, epsilon_high
    )
    (slope,) = torch.autograd.grad(objective.sum(), rho)
    return slope.item()


@pytest.mark.parametrize(
    ("advantage", "epsilon_high", "edge", "side"),
    [(1.0, None, 1.2, +1), (-1.0, None, 0.8, -1), (1.0, 0.28, 1.28, +1), (-1.0, 0.28, 0.8, -1)],
)
def test_the_package_has_zero_gradient_past_the_edges(advantage, epsilon_high, edge, side):
    # exact: the slope is d(rho * A)/d rho = A, or 0 through the clamp
    assert _package_slope(edge + side * 1e-3, advantage, 0.2, epsilon_high) == 0.0
    assert _package_slope(edge - side * 1e-3, advantage, 0.2, epsilon_high) == advantage


def test_clip_question():
    checks.check_clip_question(1.2, 0.8, 1.28)
    checks.check_clip_question(1.201, 0.799, 1.281)  # what the notebook's scan returns
    checks.check_clip_question(torch.tensor(1.2), 0.8, 1.28)
    wrong = [
        (0.8, 1.2, 1.28),  # the sides swapped
        (1.2, 0.8, 1.2),  # epsilon_high ignored
        (1.2, 0.72, 1.28),  # epsilon_high moved the lower edge too
        (1.2, 1.2, 1.28),
        (..., 0.8, 1.28),
        (1.2, 0.8, ...),
    ]
    for answers in wrong:
        with pytest.raises(CheckFailed, match="case:"):
            checks.check_clip_question(*answers)


# --- question 2: which estimator's loss follows the reverse KL -----------------------------------


def test_the_package_shows_k2_follows_the_reverse_kl_and_k1_has_no_gradient():
    reverse = checks.reverse_kl_gradient()
    gradients = checks.expected_loss_gradients()
    scale = reverse.abs().max().item()
    assert scale > 0.1
    # float64, a few operations on numbers of size ~1: rounding ~1e-15; every other candidate
    # is more than 0.2 away, so the answer cannot be an accident of the example
    assert (gradients["k2"] - reverse).norm().item() < 1e-12
    assert gradients["k1"].norm().item() < 1e-12
    assert (gradients["k3"] - reverse).norm().item() > 0.2
    assert (gradients["k1"] - reverse).norm().item() > 0.2
    assert gradients["k2"].norm().item() > 0.2 and gradients["k3"].norm().item() > 0.2


def test_kl_loss_question():
    for right in [("k2", "k1"), (" K2", "k1 "), (2, 1)]:
        checks.check_kl_loss_question(*right)
    wrong = [
        ("k3", "k1"),  # k3 estimates the reverse KL's value without bias, not its gradient
        ("k1", "k2"),
        ("k2", "k3"),
        ("rho*k3", "k1"),
        (..., "k1"),
        ("k2", ...),
        (True, "k1"),
    ]
    for answers in wrong:
        with pytest.raises(CheckFailed, match="case:"):
            checks.check_kl_loss_question(*answers)


def test_kl_question_failure_hides_the_answer():
    with pytest.raises(CheckFailed) as failed:
        checks.check_kl_loss_question("k3", "k1")
    assert "expected: (not shown: this is the question)" in str(failed.value)


# --- stubs ---------------------------------------------------------------------------------------


def test_stubs_get_clear_feedback():
    def clipped_surrogate(ratio, advantages, epsilon, epsilon_high=None): ...

    def kl_k3(logps, ref_logps): ...

    def aggregate_loss(
        per_token_loss, mask, loss_type="grpo", max_completion_length=None, num_items_in_batch=None
    ): ...

    for check, stub in [
        (checks.check_clipped_surrogate, clipped_surrogate),
        (checks.check_kl_k3, kl_k3),
        (checks.check_aggregate_loss, aggregate_loss),
    ]:
        assert "stub" in assert_fails(check, stub)
    assert "define `kl_k3`" in assert_fails(checks.check_kl_k3, None)


def test_k3_hint_values_are_the_package_values():
    half, quarter = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert package.kl_k3(half, quarter).item() == pytest.approx(0.5 + math.log(2) - 1, rel=1e-6)
    assert package.kl_k3(quarter, half).item() == pytest.approx(2 - math.log(2) - 1, rel=1e-6)


def test_new_public_hints_quote_the_package():
    """The values quoted by the public cases for the empty completion and extreme log-ratios."""
    empty = next(c for c in checks.AGGREGATE_PUBLIC if "empty completion" in c.name)
    assert package.aggregate_loss(*empty.args).item() == pytest.approx(1.0)
    both = next(c for c in checks.KL_PUBLIC if "under both" in c.name)
    assert package.kl_k3(*both.args).tolist() == pytest.approx([4.389056, 1.135335], rel=1e-5)
    reference = next(c for c in checks.KL_PUBLIC if "x = -119.5" in c.name)
    assert package.kl_k3(*reference.args).item() == pytest.approx(118.5)


# --- mistakes learners write, each told the hint that names it (public cases and graded twins) ---


def min_before_advantage(ratio, advantages, epsilon, epsilon_high=None):
    high = epsilon if epsilon_high is None else epsilon_high
    return torch.min(ratio, torch.clamp(ratio, 1 - epsilon, 1 + high)) * advantages


def clipped_only(ratio, advantages, epsilon, epsilon_high=None):
    high = epsilon if epsilon_high is None else epsilon_high
    return torch.clamp(ratio, 1 - epsilon, 1 + high) * advantages


def surrogate_averaged(ratio, advantages, epsilon, epsilon_high=None):
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + high)
    return torch.min(ratio * advantages, clipped * advantages).mean()


def k3_averaged(logps, ref_logps):
    x = ref_logps - logps
    return (torch.exp(x) - x - 1).mean()


def k3_clamped(logps, ref_logps):
    x = (ref_logps - logps).clamp(-20, 20)  # as some libraries do, "for stability"
    return torch.exp(x) - x - 1


def clip_higher_by_default(ratio, advantages, epsilon, epsilon_high=0.28):
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)  # DAPO's value as the default
    return torch.min(ratio * advantages, clipped * advantages)


def aggregate_item(
    per_token_loss, mask, loss_type="grpo", max_completion_length=None, num_items_in_batch=None
):
    mask = mask.to(per_token_loss.dtype)
    if loss_type == "grpo":
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        width = max_completion_length or per_token_loss.shape[-1]
        loss = (per_token_loss * mask).sum() / (per_token_loss.shape[0] * width)
    elif loss_type == "dapo":
        count = num_items_in_batch if num_items_in_batch is not None else mask.sum().clamp(min=1.0)
        loss = (per_token_loss * mask).sum() / count
    else:
        raise ValueError(f"unknown loss_type {loss_type!r}")
    return loss.item()  # a number to log: the gradient is gone


def aggregate_over_the_width(
    per_token_loss, mask, loss_type="grpo", max_completion_length=None, num_items_in_batch=None
):
    """grpo right only when every sequence fills the width: the padding counted in the mean."""
    if loss_type == "grpo":
        return (per_token_loss * mask).mean(-1).mean()
    return package.aggregate_loss(
        per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch
    )


NAMED_MISTAKES = [
    (checks.check_clipped_surrogate, clip_higher_by_default, "epsilon_high = epsilon"),
    (checks.check_aggregate_loss, aggregate_item, "no .item()"),
    (checks.check_clipped_surrogate, min_before_advantage, "min of the two PRODUCTS"),
    (checks.check_clipped_surrogate, clipped_only, "the unclipped term is missing"),
    (checks.check_clipped_surrogate, surrogate_averaged, "one value per token"),
    (checks.check_kl_k3, k3_averaged, "one k3 per token"),
    (checks.check_kl_k3, k3_clamped, "do not clamp x"),
]


@pytest.mark.parametrize(
    "check, fn, hint", NAMED_MISTAKES, ids=lambda v: getattr(v, "__name__", "")
)
@pytest.mark.parametrize("seed", [None, GRADER_SEEDS[0]])
def test_a_mistake_is_told_the_hint_that_names_it(check, fn, hint, seed):
    assert_told(check, fn, hint, seed)


def test_a_loss_type_twin_tells_its_rule_not_only_the_empty_sequence():
    """The padding counted in grpo's mean: the public case works the example, the graded twin
    names grpo's rule (it once said only that the first sequence was empty)."""
    assert_told(checks.check_aggregate_loss, aggregate_over_the_width, "never count")
    assert_told(
        checks.check_aggregate_loss,
        aggregate_over_the_width,
        "each sequence's mean over its own tokens",
        GRADER_SEEDS[0],
    )
