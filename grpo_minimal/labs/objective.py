"""Lab 03 checks: the objective (notebook 04, equations (5)-(9), (20) and (21)).

Exercises mirror ``grpo_minimal.losses``: ``clipped_surrogate`` (with ``epsilon_high``),
``kl_k3`` and ``aggregate_loss`` (the four ``loss_type``s) with the same names and signatures;
two questions whose answers are numbers or names the package's own code gives: where the clipped
surrogate's gradient is zero, and which KL estimator, used as a loss, follows the gradient of the
reverse KL (``expected_kl_loss_gradient``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from grpo_minimal import losses as package
from grpo_minimal.labs.checking import Case, check_answer, expect_raises, run_cases


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- exercise 1: clipped_surrogate, equation (6) -------------------------------------------------

CLIP_PUBLIC = [
    Case(
        "inside the clip range: the plain ratio * advantage",
        (_t(1.1, 0.9, 1.05), _t(1.0, -1.0, 2.0), 0.2),
        hint="for 1 - epsilon <= ratio <= 1 + epsilon_high both terms of the min are ratio * A",
    ),
    Case(
        "A > 0, ratio above 1 + epsilon: capped",
        (_t(1.5), _t(2.0), 0.2),
        hint="min(1.5 * 2, clip(1.5, 0.8, 1.2) * 2) = min(3.0, 2.4) = 2.4: the clipped term is "
        "the smaller one",
    ),
    Case(
        "A > 0, ratio below 1 - epsilon: not clipped",
        (_t(0.5), _t(2.0), 0.2),
        hint="min(0.5 * 2, 0.8 * 2) = 1.0: take the MIN of the two terms, never the max",
    ),
    Case(
        "A < 0, ratio below 1 - epsilon: capped",
        (_t(0.5), _t(-2.0), 0.2),
        hint="min(0.5 * -2, clip(0.5, 0.8, 1.2) * -2) = min(-1.0, -1.6) = -1.6: clip the RATIO, "
        "then multiply by A",
    ),
    Case(
        "A < 0, ratio above 1 + epsilon: the pessimistic side",
        (_t(1.5), _t(-2.0), 0.2),
        hint="min(1.5 * -2, 1.2 * -2) = min(-3.0, -2.4) = -3.0: the min keeps the unclipped, "
        "worse value. Return the objective L_clip itself (to be maximised), not the loss -L_clip",
    ),
    Case(
        "clip-higher: epsilon_high widens only the upper bound",
        (_t(1.5, 0.5, 1.25), _t(1.0, -1.0, 1.0), 0.2, 0.28),
        hint="clip(ratio, 1 - epsilon, 1 + epsilon_high): the upper bound is 1.28, the lower one "
        "stays 0.8 (epsilon_high=None means epsilon_high = epsilon)",
    ),
    Case(
        "one advantage per output, broadcast over its tokens",
        (_t(0.5, 1.0, 1.5, 1.1, 0.9, 2.0).view(2, 3), _t(1.0, -1.0).view(2, 1), 0.2),
        hint="ratio is [batch, tokens] and the advantages [batch, 1]: elementwise torch "
        "operations broadcast them; the result has the ratio's shape",
    ),
]


def _random_ratio(seed: int, shape: tuple[int, ...], spread: float) -> torch.Tensor:
    """exp(spread * N(0, 1)): ratios around 1, many of them outside a 0.2 clip range."""
    return torch.exp(spread * torch.randn(shape, generator=_generator(seed)))


def _random_advantages(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    return 1.5 * torch.randn(shape, generator=_generator(seed))


CLIP_HIDDEN = [
    Case(
        "random ratios and per-token advantages, epsilon_high=0.28",
        (_random_ratio(10, (4, 6), 0.4), _random_advantages(11, (4, 6)), 0.2, 0.28),
        hint="per token: min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)",
    ),
    Case(
        "random ratios, one advantage per output",
        (_random_ratio(12, (5, 7), 0.3), _random_advantages(13, (5, 1)), 0.1),
        hint="the [batch, 1] advantages broadcast over the tokens; epsilon_high=None means "
        "epsilon_high = epsilon",
    ),
    Case(
        "ratios far outside the clip range",
        (
            _t(1e-3, 0.05, 5.0, 40.0, 1e3, 1e-3, 0.05, 5.0, 40.0, 1e3),
            _t(2.0, 2.0, 2.0, 2.0, 2.0, -2.0, -2.0, -2.0, -2.0, -2.0),
            0.2,
            0.28,
        ),
        hint="A > 0: the objective stops growing at (1 + epsilon_high) * A, but a tiny ratio is "
        "not clipped; A < 0: it stops at (1 - epsilon) * A, but a huge ratio is not clipped",
    ),
    Case(
        "epsilon_high smaller than epsilon",
        (_t(1.5, 0.5, 1.15, 0.75), _t(1.0, -1.0, 1.0, -1.0), 0.3, 0.1),
        hint="the lower bound is 1 - epsilon = 0.7, the upper one 1 + epsilon_high = 1.1: do not "
        "swap them",
    ),
    Case(
        "epsilon = 0: the clip sits at 1",
        (_t(0.5, 1.5, 0.5, 1.5), _t(1.0, 1.0, -1.0, -1.0), 0.0),
        hint="with epsilon 0 the clipped term is 1 * A; the min still picks the worse term",
    ),
    Case(
        "zero advantage",
        (_t(0.5, 1.0, 3.0), _t(0.0, 0.0, 0.0), 0.2),
        hint="A = 0: both terms are 0",
    ),
    Case(
        "ratios exactly on the bounds",
        (_t(0.8, 1.2, 0.8, 1.2), _t(1.0, 1.0, -1.0, -1.0), 0.2),
        hint="on a bound the two terms are equal",
    ),
    Case(
        "float64 inputs",
        (
            _random_ratio(14, (3, 4), 0.5).double(),
            _random_advantages(15, (3, 1)).double(),
            0.2,
            0.28,
        ),
        hint="use torch operations (torch.clamp, torch.min) so any dtype and shape works",
    ),
    Case(
        "epsilon_high given by keyword",
        (_random_ratio(16, (2, 5), 0.4), _random_advantages(17, (2, 1)), 0.2),
        {"epsilon_high": 0.5},
        hint="the upper bound is 1 + epsilon_high = 1.5",
    ),
]


def _ratio_gradient(fn: Callable) -> Callable:
    """d sum(fn(ratio, ...)) / d ratio, by autograd; what the function returned when it cannot."""

    def gradient(ratio, advantages, epsilon, epsilon_high=None):
        ratio = ratio.clone().requires_grad_(True)
        objective = fn(ratio, advantages, epsilon, epsilon_high)
        if not isinstance(objective, torch.Tensor):
            return objective
        if not objective.requires_grad:
            return "a tensor with no gradient (requires_grad=False)"
        (slope,) = torch.autograd.grad(objective.sum(), ratio)
        return slope

    return gradient


GRADIENT_HINT = (
    "dL_clip/dratio is A where the unclipped term ratio * A is the min and 0 where the clipped "
    "term is (the clip is flat there); compute with torch operations on `ratio` (no .item(), no "
    ".detach(), no Python floats) so autograd can follow"
)

CLIP_GRADIENT_PUBLIC = [
    Case(
        "gradient: zero exactly where the clipped term is the min",
        (_t(1.5, 0.5, 0.5, 1.5, 1.1), _t(1.0, 1.0, -1.0, -1.0, 1.0), 0.2),
        hint=GRADIENT_HINT,
        show="d/dratio of sum(clipped_surrogate(ratio, A, 0.2)) at ratio [1.5, 0.5, 0.5, 1.5, "
        "1.1], A [+1, +1, -1, -1, +1]",
    ),
]

CLIP_GRADIENT_HIDDEN = [
    Case(
        "gradient: random ratios and advantages, epsilon_high=0.28",
        (_random_ratio(20, (4, 6), 0.4), _random_advantages(21, (4, 1)), 0.2, 0.28),
        hint=GRADIENT_HINT,
        show="d/dratio of sum(clipped_surrogate(ratio, A, 0.2, 0.28)), ratio [4, 6], A [4, 1]",
    ),
]


def check_clipped_surrogate(fn: Callable, hidden: bool = False) -> None:
    """Values, then the gradient with respect to the ratio (where the clip makes it zero)."""
    run_cases(
        fn, "clipped_surrogate", CLIP_HIDDEN if hidden else CLIP_PUBLIC, package.clipped_surrogate
    )
    run_cases(
        _ratio_gradient(fn),
        "clipped_surrogate",
        CLIP_GRADIENT_HIDDEN if hidden else CLIP_GRADIENT_PUBLIC,
        _ratio_gradient(package.clipped_surrogate),
    )


# --- exercise 2: kl_k3, equation (7) -------------------------------------------------------------

LOG_HALF, LOG_QUARTER = math.log(0.5), math.log(0.25)

KL_PUBLIC = [
    Case(
        "the same log-probs: no divergence",
        (_t(-0.5, -2.0, -7.0), _t(-0.5, -2.0, -7.0)),
        hint="x = 0 gives e^0 - 0 - 1 = 0: did you forget the -1?",
    ),
    Case(
        "the policy likes the token more than the reference",
        (_t(LOG_HALF), _t(LOG_QUARTER)),
        hint="x = log pi_ref - log pi = log(0.25 / 0.5) = -log 2; k3 = e^x - x - 1 = 0.5 + 0.693 "
        "- 1 = 0.193 (k1 would be 0.693)",
    ),
    Case(
        "the reference likes the token more than the policy",
        (_t(LOG_QUARTER), _t(LOG_HALF)),
        hint="the first argument is log pi, the second log pi_ref: x = log pi_ref - log pi = "
        "+log 2 here, k3 = 2 - 0.693 - 1 = 0.307. k3 is not symmetric: do not swap them",
    ),
    Case(
        "one value per token, [batch, tokens]",
        (
            torch.log(_t(0.5, 0.1, 0.9, 0.3, 0.3, 0.6).view(2, 3)),
            torch.log(_t(0.4, 0.2, 0.9, 0.6, 0.1, 0.5).view(2, 3)),
        ),
        hint="elementwise torch operations: the result has the shape of the log-probs",
    ),
]


def _token_logps(seed: int, batch: int, tokens: int, vocab: int = 11) -> torch.Tensor:
    """Log-probs of sampled tokens under a random softmax policy: realistic values, all < 0."""
    generator = _generator(seed)
    logits = 2.0 * torch.randn(batch, tokens, vocab, generator=generator)
    ids = torch.randint(0, vocab, (batch, tokens, 1), generator=generator)
    return torch.log_softmax(logits, -1).gather(-1, ids).squeeze(-1)


KL_HIDDEN = [
    Case(
        "random token log-probs, [4, 8]",
        (_token_logps(30, 4, 8), _token_logps(31, 4, 8)),
        hint="k3 = exp(x) - x - 1 with x = ref_logps - logps, per token",
    ),
    Case(
        "far apart: x = +5 and x = -10",
        (_t(-6.0, -0.5), _t(-1.0, -10.5)),
        hint="x = ref_logps - logps: e^5 - 5 - 1 = 142.4 and e^-10 + 10 - 1 = 9.00005",
    ),
    Case(
        "very unlikely tokens: work in log space",
        (_t(-120.0, -118.0), _t(-118.0, -120.0)),
        hint="exp(-120) is 0 in float32, so pi_ref / pi computed from probabilities is 0 / 0 = "
        "NaN; exp(ref_logps - logps) is exp(2) = 7.39, fine",
    ),
    Case(
        "float64 log-probs",
        (_token_logps(32, 3, 5).double(), _token_logps(33, 3, 5).double()),
        hint="torch.exp on the difference works for any dtype",
    ),
    Case(
        "k3 is never negative",
        (_t(-3.0, -0.1, -2.0, -0.01), _t(-0.1, -3.0, -2.01, -0.02)),
        hint="e^x >= 1 + x, so k3 >= 0 for every token; a negative value is k1 or a sign error",
    ),
]


def check_kl_k3(fn: Callable, hidden: bool = False) -> None:
    run_cases(fn, "kl_k3", KL_HIDDEN if hidden else KL_PUBLIC, package.kl_k3)


# --- exercise 3: aggregate_loss, equation (9) ----------------------------------------------------

# two sequences of lengths 3 and 1; the 9s sit under the mask (as in tests/test_losses.py)
LOSS = _t(1.0, 2.0, 3.0, 0.0, 4.0, 9.0, 9.0, 9.0).view(2, 4)
MASK = _t(1, 1, 1, 0, 1, 0, 0, 0).view(2, 4)

AGGREGATE_PUBLIC = [
    Case(
        "loss_type='grpo': mean per sequence, then over sequences",
        (LOSS, MASK, "grpo"),
        hint="(1 + 2 + 3) / 3 = 2 and 4 / 1 = 4, then (2 + 4) / 2 = 3.0; the 9s are padding "
        "(mask 0) and never count",
    ),
    Case(
        "loss_type='bnpo': all tokens over the token count",
        (LOSS, MASK, "bnpo"),
        hint="(1 + 2 + 3 + 4) / 4 tokens = 2.5: sum loss * mask over the batch, divide by "
        "mask.sum()",
    ),
    Case(
        "loss_type='dr_grpo': a constant normaliser",
        (LOSS, MASK, "dr_grpo"),
        hint="sum(loss * mask) / (batch * max_completion_length) = 10 / (2 * 4) = 1.25; without "
        "max_completion_length the length is the tensor's last dimension",
    ),
    Case(
        "loss_type='dapo': tokens of this batch when num_items_in_batch is None",
        (LOSS, MASK, "dapo"),
        hint="sum(loss * mask) / number of tokens: 10 / 4 = 2.5 (a token mean, not a mean of "
        "per-sequence means)",
    ),
    Case(
        "grpo weighs each sequence equally, bnpo each token",
        (_t(1.0, 0.0, 0.0, 0.0, 0.0, 0.0).view(2, 3), _t(1, 0, 0, 1, 1, 1).view(2, 3), "grpo"),
        hint="a 1-token sequence with loss 1 and a 3-token one with loss 0: grpo gives "
        "(1 + 0) / 2 = 0.5 (bnpo would give 1 / 4)",
    ),
    Case(
        "dr_grpo with max_completion_length",
        (LOSS, MASK, "dr_grpo"),
        {"max_completion_length": 10},
        hint="divide by batch * max_completion_length = 2 * 10: 10 / 20 = 0.5",
    ),
    Case(
        "dapo with num_items_in_batch (the global batch)",
        (LOSS, MASK, "dapo"),
        {"num_items_in_batch": 8},
        hint="divide by num_items_in_batch, the tokens of the whole batch: 10 / 8 = 1.25",
    ),
]

UNKNOWN_LOSS_TYPE = Case(
    "an unknown loss_type",
    (LOSS, MASK, "mean"),
    hint="loss_type must be one of 'grpo', 'bnpo', 'dr_grpo', 'dapo': raise ValueError for "
    "anything else (a typo must not train with some other normaliser)",
)


def _random_loss(seed: int, batch: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token losses in float64 and a right-padded mask whose lengths include 0 and full."""
    generator = _generator(seed)
    loss = torch.randn(batch, tokens, generator=generator, dtype=torch.float64)
    lengths = torch.randint(1, tokens + 1, (batch,), generator=generator)
    lengths[0], lengths[-1] = 0, tokens
    mask = (torch.arange(tokens) < lengths.unsqueeze(-1)).to(torch.float64)
    return loss, mask


RANDOM_LOSS, RANDOM_MASK = _random_loss(40, 6, 9)
EMPTY_ROW_HINT = (
    "the first sequence has no tokens (mask row all 0): it contributes 0 and, for grpo, still "
    "counts as one of the B sequences. Clamp every token count to at least 1, as TRL does "
    "(.clamp(min=1.0)), so 0 / 0 never makes a NaN"
)

AGGREGATE_HIDDEN = [
    *(
        Case(
            f"random losses, 6 sequences (one empty), loss_type='{loss_type}'",
            (RANDOM_LOSS, RANDOM_MASK, loss_type),
            hint=EMPTY_ROW_HINT,
        )
        for loss_type in package.LOSS_TYPES
    ),
    Case(
        "dr_grpo: max_completion_length longer than the padded batch",
        (RANDOM_LOSS, RANDOM_MASK, "dr_grpo"),
        {"max_completion_length": 16},
        hint="the normaliser is batch * max_completion_length = 6 * 16, not the token count "
        "and not the tensor's width",
    ),
    Case(
        "dapo: a global batch larger than this one",
        (RANDOM_LOSS, RANDOM_MASK, "dapo"),
        {"num_items_in_batch": 80.0},
        hint="divide the sum over this batch's tokens by num_items_in_batch (80)",
    ),
    *(
        Case(
            f"no tokens at all, loss_type='{loss_type}'",
            (RANDOM_LOSS, torch.zeros_like(RANDOM_MASK), loss_type),
            hint="every mask entry is 0: the loss is 0, never NaN (clamp the counts to >= 1)",
        )
        for loss_type in package.LOSS_TYPES
    ),
    Case(
        "a boolean mask",
        (RANDOM_LOSS, RANDOM_MASK.bool(), "grpo"),
        hint="convert the mask to the loss's dtype first (mask.to(per_token_loss.dtype))",
    ),
    Case(
        "one sequence, float32",
        (_t(0.5, -1.0, 2.0, 7.0).view(1, 4), _t(1, 1, 1, 0).view(1, 4), "grpo"),
        hint="one sequence: grpo is its token mean, (0.5 - 1 + 2) / 3",
    ),
]


def check_aggregate_loss(fn: Callable, hidden: bool = False) -> None:
    run_cases(
        fn,
        "aggregate_loss",
        AGGREGATE_HIDDEN if hidden else AGGREGATE_PUBLIC,
        package.aggregate_loss,
    )
    if not hidden:
        expect_raises(fn, UNKNOWN_LOSS_TYPE)


# --- question 1: where is the gradient of the clipped surrogate zero? ----------------------------

EPSILON, EPSILON_HIGH = 0.2, 0.28
SCAN_TOLERANCE = 2.5e-3
"""A scan at the notebook's step of 0.001 lands within one step of the edge (1.201 or 0.799);
every wrong answer (the other edge, the symmetric edge) is at least 0.08 away."""


def check_clip_question(
    ratio_zero_grad_positive: Any, ratio_zero_grad_negative: Any, ratio_zero_grad_clip_higher: Any
) -> None:
    """The ratio at which the gradient of (6) switches off, for each case of the question."""
    check_answer(
        "A > 0, epsilon = 0.2: the gradient is zero above which ratio?",
        ratio_zero_grad_positive,
        1.0 + EPSILON,
        "for A > 0 the min picks the clipped term once the ratio passes the upper bound of the "
        "clip; scan the slope of your clipped_surrogate with the cell above",
        rtol=0.0,
        atol=SCAN_TOLERANCE,
    )
    check_answer(
        "A < 0, epsilon = 0.2: the gradient is zero below which ratio?",
        ratio_zero_grad_negative,
        1.0 - EPSILON,
        "for A < 0 the clipped term is the min once the ratio falls below the lower bound",
        rtol=0.0,
        atol=SCAN_TOLERANCE,
    )
    check_answer(
        "A > 0, epsilon = 0.2, epsilon_high = 0.28: zero above which ratio?",
        ratio_zero_grad_clip_higher,
        1.0 + EPSILON_HIGH,
        "clip-higher moves only the upper bound of the clip; scan with epsilon_high=0.28",
        rtol=0.0,
        atol=SCAN_TOLERANCE,
    )


# --- question 2: which KL estimator, used as a loss, follows the reverse KL? ---------------------

# the lesson's example (notebook 04, section 3): a policy and a reference over 5 outcomes
POLICY_LOGITS = (1.0, 0.5, 0.0, -0.5, -1.0)
REF_LOGITS = (-0.5, 0.0, 0.5, 0.0, 1.0)


def reverse_kl_gradient() -> torch.Tensor:
    """grad of the exact KL(pi || pi_ref) with respect to the policy logits (float64)."""
    logits = torch.tensor(POLICY_LOGITS, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor(REF_LOGITS, dtype=torch.float64)
    (gradient,) = torch.autograd.grad(package.categorical_kl(logits, ref), logits)
    return gradient


def expected_loss_gradients() -> dict[str, torch.Tensor]:
    """Equation (20) for k1, k2 and k3 used as losses on their own (no ratio)."""
    logits = torch.tensor(POLICY_LOGITS, dtype=torch.float64)
    ref = torch.tensor(REF_LOGITS, dtype=torch.float64)
    return {
        name: package.expected_kl_loss_gradient(logits, ref, name) for name in package.KL_ESTIMATORS
    }


def _estimator_name(answer: Any) -> Any:
    """'k2', ' K2 ' and 2 all mean k2; anything else is compared as given."""
    if isinstance(answer, str):
        return answer.strip().lower()
    if isinstance(answer, int) and not isinstance(answer, bool):
        return f"k{answer}"
    return answer


def check_kl_loss_question(reverse_kl_estimator: Any, zero_gradient_estimator: Any) -> None:
    """The answers are what ``expected_kl_loss_gradient`` gives on the lesson's example."""
    gradients = expected_loss_gradients()
    reverse = reverse_kl_gradient()
    follows_reverse = min(gradients, key=lambda name: (gradients[name] - reverse).norm().item())
    no_gradient = min(gradients, key=lambda name: gradients[name].norm().item())
    check_answer(
        "which estimator, used as a loss, has E[gradient] = grad KL(pi || pi_ref)?",
        _estimator_name(reverse_kl_estimator),
        follows_reverse,
        "answer 'k1', 'k2' or 'k3'. For each, compare expected_kl_loss_gradient(policy_logits, "
        "ref_logits, name) with `reverse`: (the norm of) the difference is ~1e-16 for one of "
        "them. Careful: the estimator whose VALUE is unbiased for the reverse KL is not "
        "necessarily the one whose gradient follows it",
    )
    check_answer(
        "which estimator, used as a loss, has E[gradient] = 0?",
        _estimator_name(zero_gradient_estimator),
        no_gradient,
        "answer 'k1', 'k2' or 'k3': the one whose expected gradient has norm ~1e-16",
    )
