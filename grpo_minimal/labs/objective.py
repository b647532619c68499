"""Lab 03 checks: the objective (notebook 04, equations (5)-(9), (20) and (21)).

Exercises mirror ``grpo_minimal.losses``: ``clipped_surrogate`` (with ``epsilon_high``),
``kl_k3`` and ``aggregate_loss`` (the four ``loss_type``s) with the same names and signatures;
two questions whose answers are numbers or names the package's own code gives: where the clipped
surrogate's gradient is zero, and which KL estimator, used as a loss, follows the gradient of the
reverse KL (``expected_kl_loss_gradient``).

``lab check`` runs the hand-written cases and each exercise's ``*_twins(PUBLIC_SEED)``; grading
runs ``*_twins(seed)`` with the grader's seed: the same kinds of case (dtypes, edges such as an
empty completion or log-probs near -120, the refusal of an unknown ``loss_type``), other values.
Every case is run; a failure details the first failing case and names the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from grpo_minimal import losses as package
from grpo_minimal.labs.checking import (
    Case,
    Mistake,
    beside,
    cases_for,
    check_answer,
    draw_int,
    expect_raises,
    generator,
    run_all,
    run_cases,
)


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _uniform(g: torch.Generator, low: float, high: float, *shape: int) -> torch.Tensor:
    """Uniform draws in [low, high), float32."""
    return low + (high - low) * torch.rand(shape or (1,), generator=g)


def _pick(g: torch.Generator, options: Sequence) -> Any:
    return options[int(torch.randint(len(options), (1,), generator=g))]


def _run_all(
    name: str,
    fn: Callable,
    runs: Sequence[tuple[Callable, Case, Any]],
    mistakes: Sequence[Mistake] = (),
) -> None:
    """Run every ``(call, case, reference)``; a reference ``ValueError`` means "must refuse".
    ``mistakes`` name what went wrong where ``call`` is the learner's function itself."""

    def check(call: Callable, case: Case, reference: Any) -> Callable[[], None]:
        if reference is ValueError:
            return lambda: expect_raises(call, case)
        known = mistakes if call is fn else ()
        return lambda: run_cases(call, name, [case], reference, mistakes=known)

    run_all(name, fn, [(case.name, check(call, case, reference)) for call, case, reference in runs])


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


def _ratios_across_the_clip(
    g: torch.Generator, rows: int, epsilon: float, epsilon_high: float
) -> torch.Tensor:
    """Ratios [rows, 6]; every row has one below 1 - epsilon, one inside, one between the two
    upper bounds (when they differ), one above both, and two drawn around 1 (exp(0.4 N(0, 1)))."""
    low, high = 1.0 - epsilon, 1.0 + max(epsilon, epsilon_high)
    between = (1.0 + min(epsilon, epsilon_high), high)
    columns = [
        _uniform(g, 0.3, low - 0.02, rows),
        _uniform(g, low + 0.02, 1.0 + min(epsilon, epsilon_high) - 0.02, rows),
        _uniform(g, between[0] + 0.01, between[1] - 0.01, rows)
        if between[1] - between[0] > 0.03
        else _uniform(g, high + 0.02, 2.5, rows),
        _uniform(g, high + 0.02, 2.5, rows),
        torch.exp(0.4 * torch.randn(rows, generator=g)),
        torch.exp(0.4 * torch.randn(rows, generator=g)),
    ]
    return torch.stack(columns, dim=1)


def _signed(g: torch.Generator, rows: int, columns: int = 1) -> torch.Tensor:
    """Advantages [rows, columns] of size 0.2 to 2.5; the sign alternates row by row (+, -, ...)."""
    sign = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(rows)]).unsqueeze(1)
    return sign * _uniform(g, 0.2, 2.5, rows, columns)


def clip_twins(seed: int) -> list[Case]:
    """One case of every kind ``clipped_surrogate`` is graded on, values drawn from ``seed``."""
    g = generator(seed)
    eps = _pick(g, [0.1, 0.15, 0.2, 0.25])
    eps_high = round(eps + _pick(g, [0.05, 0.08, 0.1]), 2)
    wide, narrow = _pick(g, [0.25, 0.3, 0.35]), _pick(g, [0.05, 0.1, 0.15])
    keyword_high = _pick(g, [0.3, 0.4, 0.5])
    # A > 0: tiny ratios (not clipped) and large ones (clipped: up to 50, so that a clip
    # written as ratio + (clamp - ratio) keeps its float32 value); A < 0: huge ones (not clipped)
    tiny = torch.exp(_uniform(g, math.log(1e-4), math.log(1e-2), 4))
    large = torch.exp(_uniform(g, math.log(10.0), math.log(50.0), 2))
    huge = torch.exp(_uniform(g, math.log(100.0), math.log(1e4), 2))
    middle = _uniform(g, 3.0, 8.0, 2)
    far = torch.cat([tiny[:2], middle[:1], large, tiny[2:], middle[1:], huge])
    a = _uniform(g, 0.5, 3.0, 1).item()
    below, above = _uniform(g, 0.3, 0.9, 2), _uniform(g, 1.1, 2.0, 2)
    bounds = _t(1 - eps, 1 + eps, 1 - eps, 1 + eps)
    return [
        Case(
            f"ratios across the clip, per-token advantages, epsilon={eps}, epsilon_high={eps_high}",
            (_ratios_across_the_clip(g, 4, eps, eps_high), _signed(g, 4, 6), eps, eps_high),
            hint="per token: min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)",
        ),
        Case(
            f"ratios across the clip, one advantage per output, epsilon={eps}",
            (_ratios_across_the_clip(g, 5, eps, eps), _signed(g, 5), eps),
            hint="the [batch, 1] advantages broadcast over the tokens; epsilon_high=None means "
            "epsilon_high = epsilon",
        ),
        Case(
            "ratios far outside the clip range",
            (far, torch.cat([torch.full((5,), a), torch.full((5,), -a)]), 0.2, 0.28),
            hint="A > 0: the objective stops growing at (1 + epsilon_high) * A, but a tiny ratio is "
            "not clipped; A < 0: it stops at (1 - epsilon) * A, but a huge ratio is not clipped",
        ),
        Case(
            f"epsilon_high ({narrow}) smaller than epsilon ({wide})",
            (
                torch.cat(
                    [
                        _uniform(g, 1 + wide + 0.05, 2.0, 1),
                        _uniform(g, 0.2, 1 - wide - 0.05, 1),
                        _uniform(g, 1 + narrow + 0.02, 1 + wide - 0.02, 1),
                        _uniform(g, 1 - wide + 0.02, 1 - narrow - 0.02, 1),
                    ]
                ),
                _t(1.0, -1.0, 1.0, -1.0) * a,
                wide,
                narrow,
            ),
            hint=f"the lower bound is 1 - epsilon = {1 - wide:g}, the upper one 1 + epsilon_high "
            f"= {1 + narrow:g}: do not swap them",
        ),
        Case(
            "epsilon = 0: the clip sits at 1",
            (torch.cat([below, above]), _t(1.0, -1.0, 1.0, -1.0) * a, 0.0),
            hint="with epsilon 0 the clipped term is 1 * A; the min still picks the worse term",
        ),
        Case(
            "zero advantage",
            (torch.cat([below, above]), torch.zeros(4), eps),
            hint="A = 0: both terms are 0",
        ),
        Case(
            f"ratios exactly on the bounds, epsilon={eps}",
            (bounds, _t(1.0, 1.0, -1.0, -1.0) * a, eps),
            hint="on a bound the two terms are equal",
        ),
        Case(
            "float64 inputs",
            (
                _ratios_across_the_clip(g, 3, eps, eps_high).double(),
                _signed(g, 3).double(),
                eps,
                eps_high,
            ),
            hint="use torch operations (torch.clamp, torch.min) so any dtype and shape works",
        ),
        Case(
            f"epsilon_high={keyword_high} given by keyword",
            (_ratios_across_the_clip(g, 2, 0.2, keyword_high), _signed(g, 2), 0.2),
            {"epsilon_high": keyword_high},
            hint=f"the upper bound is 1 + epsilon_high = {1 + keyword_high:g}",
        ),
    ]


def ratio_gradient(fn: Callable, ratio, advantages, epsilon, epsilon_high=None):
    """d sum(fn(ratio, ...)) / d ratio, by autograd; what the function returned when it cannot."""
    ratio = ratio.clone().requires_grad_(True)
    objective = fn(ratio, advantages, epsilon, epsilon_high)
    if not isinstance(objective, torch.Tensor):
        return objective
    if not objective.requires_grad:
        return "a tensor with no gradient (requires_grad=False)"
    (slope,) = torch.autograd.grad(objective.sum(), ratio)
    return slope


def _ratio_gradient(fn: Callable) -> Callable:
    """``ratio_gradient`` of ``fn``, computed where ``fn`` lives (the measurer, when judged)."""
    return lambda *args: beside(fn, ratio_gradient, *args)


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


def clip_gradient_twins(seed: int) -> list[Case]:
    """The gradient through the clip on ratios across the clip, values drawn from ``seed``."""
    g = generator(seed + 1)  # not the values of clip_twins(seed)
    eps = _pick(g, [0.1, 0.15, 0.2, 0.25])
    eps_high = round(eps + _pick(g, [0.05, 0.08, 0.1]), 2)
    return [
        Case(
            f"gradient: ratios across the clip, epsilon={eps}, epsilon_high={eps_high}",
            (_ratios_across_the_clip(g, 4, eps, eps_high), _signed(g, 4), eps, eps_high),
            hint=GRADIENT_HINT,
            show=f"d/dratio of sum(clipped_surrogate(ratio, A, {eps}, {eps_high})), ratio [4, 6] "
            "(in every row: below, inside, between and above the bounds), A [4, 1] (+, -, +, -)",
        ),
    ]


def _min_of_ratios(ratio, advantages, epsilon, epsilon_high=None):
    """A mistake: min(ratio, clip(ratio)) * A, the min taken before multiplying by A."""
    high = epsilon if epsilon_high is None else epsilon_high
    return torch.min(ratio, ratio.clamp(1 - epsilon, 1 + high)) * advantages


def _clipped_term_only(ratio, advantages, epsilon, epsilon_high=None):
    """A mistake: clip(ratio) * A alone, without the unclipped term."""
    high = epsilon if epsilon_high is None else epsilon_high
    return ratio.clamp(1 - epsilon, 1 + high) * advantages


def _high_defaults_to_dapo(ratio, advantages, epsilon, epsilon_high=None):
    """A mistake: epsilon_high=None taken as DAPO's 0.28 instead of epsilon."""
    high = 0.28 if epsilon_high is None else epsilon_high
    return package.clipped_surrogate(ratio, advantages, epsilon, high)


CLIP_MISTAKES = [
    Mistake(
        _min_of_ratios,
        "take the min of the two PRODUCTS, min(ratio * A, clip(ratio) * A): for A < 0, "
        "min(ratio, clip(ratio)) * A is the max of the products, not the min",
    ),
    Mistake(
        _clipped_term_only,
        "the unclipped term is missing: the objective is min(ratio * A, clip(ratio) * A), "
        "and clip(ratio) * A alone is too generous where the ratio moved the wrong way",
    ),
    Mistake(
        _high_defaults_to_dapo,
        "epsilon_high=None means epsilon_high = epsilon, a symmetric clip; 0.28 is DAPO's "
        "clip-higher value, which only a caller who passes epsilon_high=0.28 asks for",
    ),
    Mistake(
        lambda *args, **kwargs: package.clipped_surrogate(*args, **kwargs).mean(),
        "one value per token, the shape of ratio: no mean or sum here (aggregate_loss, "
        "exercise 3, reduces the tokens)",
    ),
]


def check_clipped_surrogate(fn: Callable, seed: int | None = None) -> None:
    """Values, then the gradient with respect to the ratio (where the clip makes it zero)."""
    gradient, reference = _ratio_gradient(fn), _ratio_gradient(package.clipped_surrogate)
    _run_all(
        "clipped_surrogate",
        fn,
        [
            *(
                (fn, case, package.clipped_surrogate)
                for case in cases_for(CLIP_PUBLIC, clip_twins, seed)
            ),
            *(
                (gradient, case, reference)
                for case in cases_for(CLIP_GRADIENT_PUBLIC, clip_gradient_twins, seed)
            ),
        ],
        CLIP_MISTAKES,
    )


# --- exercise 2: kl_k3, equation (7) -------------------------------------------------------------

LOG_HALF, LOG_QUARTER = math.log(0.5), math.log(0.25)

LOG_SPACE_HINT = (
    "exp(-120) is 0 in float32, so probabilities cannot hold these tokens: a ratio "
    "exp(ref_logps) / exp(logps) is 0 / 0 = NaN (or 0, whose log is -inf), and log(exp(x)) is "
    "-inf for x below -104. Stay in log space: x = ref_logps - logps, then exp(x) - x - 1 with "
    "that x"
)

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
    Case(
        "very unlikely tokens under both: work in log space",
        (_t(-120.0, -118.0), _t(-118.0, -120.0)),
        hint="x = ref_logps - logps = +2 and -2: k3 = e^2 - 3 = 4.39 and e^-2 + 1 = 1.14. "
        + LOG_SPACE_HINT,
    ),
    Case(
        "the reference finds the token very unlikely: x = -119.5",
        (_t(-0.5), _t(-120.0)),
        hint="k3 = e^-119.5 + 119.5 - 1 = 118.5 (the e^x term is 0 in float32, the -x term is "
        "not). " + LOG_SPACE_HINT,
    ),
]


def _token_logps(g: torch.Generator, batch: int, tokens: int, vocab: int = 11) -> torch.Tensor:
    """Log-probs of sampled tokens under a random softmax policy: realistic values, all < 0."""
    logits = 2.0 * torch.randn(batch, tokens, vocab, generator=g)
    ids = torch.randint(0, vocab, (batch, tokens, 1), generator=g)
    return torch.log_softmax(logits, -1).gather(-1, ids).squeeze(-1)


def kl_twins(seed: int) -> list[Case]:
    """One case of every kind ``kl_k3`` is graded on, with values drawn from ``seed``."""
    g = generator(seed)
    batch, tokens = draw_int(g, 3, 5), draw_int(g, 5, 9)
    up, down = _uniform(g, 3.0, 8.0, 1).item(), _uniform(g, 6.0, 15.0, 1).item()
    base = _uniform(g, 0.2, 2.0, 2)
    unlikely = -_uniform(g, 110.0, 140.0, 3)
    shift = _uniform(g, -3.0, 3.0, 3)
    policy = -_uniform(g, 0.05, 2.0, 2)
    ref_unlikely = -_uniform(g, 110.0, 140.0, 2)
    small = _uniform(g, 0.01, 3.0, 4)
    near = -_uniform(g, 0.05, 3.0, 4)
    return [
        Case(
            f"random token log-probs, [{batch}, {tokens}]",
            (_token_logps(g, batch, tokens), _token_logps(g, batch, tokens)),
            hint="k3 = exp(x) - x - 1 with x = ref_logps - logps, per token",
        ),
        Case(
            f"far apart: x = +{up:.2f} and x = -{down:.2f}",
            (
                torch.stack([-base[0] - up, -base[1]]),
                torch.stack([-base[0], -base[1] - down]),
            ),
            hint="x = ref_logps - logps, k3 = e^x - x - 1: about e^x for a large positive x, "
            "about -x - 1 for a large negative one",
        ),
        Case(
            "very unlikely tokens under both (log-probs below -110): work in log space",
            (unlikely, unlikely + shift),
            hint=LOG_SPACE_HINT,
        ),
        Case(
            "the reference finds the tokens very unlikely (x below -100)",
            (policy, ref_unlikely),
            hint="k3 = e^x - x - 1 is about -x - 1 here (e^x is 0 in float32). " + LOG_SPACE_HINT,
        ),
        Case(
            f"float64 log-probs, [{batch}, {tokens}]",
            (_token_logps(g, batch, tokens).double(), _token_logps(g, batch, tokens).double()),
            hint="torch.exp on the difference works for any dtype",
        ),
        Case(
            "k3 is never negative",
            (near, near + small * _t(1.0, -1.0, 1.0, -1.0)),
            hint="e^x >= 1 + x, so k3 >= 0 for every token; a negative value is k1 or a sign error",
        ),
    ]


KL_MISTAKES = [
    Mistake(
        lambda logps, ref_logps: package.kl_k3(logps, ref_logps).mean(),
        "one k3 per token, the shape of logps: no mean or sum here (the loss reduces the "
        "tokens later)",
    ),
    Mistake(
        lambda logps, ref_logps: package.kl_k3(logps, ref_logps).sum(-1),
        "one k3 per token, the shape of logps: no mean or sum here (the loss reduces the "
        "tokens later)",
    ),
    Mistake(
        lambda logps, ref_logps: (
            torch.exp((ref_logps - logps).clamp(-20, 20)) - (ref_logps - logps).clamp(-20, 20) - 1
        ),
        "do not clamp x = ref_logps - logps: e^x underflows harmlessly to 0 for a very "
        "negative x, and the clamp cuts the -x term (k3 = e^x - x - 1 grows like -x there)",
    ),
]


def check_kl_k3(fn: Callable, seed: int | None = None) -> None:
    _run_all(
        "kl_k3",
        fn,
        [(fn, case, package.kl_k3) for case in cases_for(KL_PUBLIC, kl_twins, seed)],
        KL_MISTAKES,
    )


# --- exercise 3: aggregate_loss, equation (9) ----------------------------------------------------

# two sequences of lengths 3 and 1; the 9s sit under the mask (as in tests/test_losses.py)
LOSS = _t(1.0, 2.0, 3.0, 0.0, 4.0, 9.0, 9.0, 9.0).view(2, 4)
MASK = _t(1, 1, 1, 0, 1, 0, 0, 0).view(2, 4)

EMPTY_ROW_HINT = (
    "the first sequence has no tokens (mask row all 0): it contributes 0 and, for grpo, still "
    "counts as one of the B sequences. Clamp every token count to at least 1, as TRL does "
    "(.clamp(min=1.0)), so 0 / 0 never makes a NaN"
)
LOSS_TYPE_HINTS = {
    "grpo": "grpo: each sequence's mean over its own tokens (mask), then the mean over the B "
    "sequences; " + EMPTY_ROW_HINT,
    "bnpo": "bnpo: sum(loss * mask) over the whole batch / mask.sum(), every token weighing the "
    "same (the empty sequence adds nothing)",
    "dr_grpo": "dr_grpo: sum(loss * mask) / (batch * max_completion_length), the length the "
    "tensor's last dimension when max_completion_length is None",
    "dapo": "dapo: sum(loss * mask) / the token count, this batch's when num_items_in_batch is "
    "None",
}
"""The hint of each ``loss_type``'s drawn twin: the rule, not only the empty sequence in it."""

NO_TOKENS_HINT = (
    "every mask entry is 0: the loss is 0, never NaN. Clamp every token count to at least 1 "
    "(.clamp(min=1.0)), so 0 / 0 never happens"
)

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
    Case(
        "grpo with an empty completion (no tokens)",
        (
            _t(1.0, 2.0, 3.0, 0.0, 9.0, 9.0, 9.0, 9.0).view(2, 4),
            _t(1, 1, 1, 0, 0, 0, 0, 0).view(2, 4),
            "grpo",
        ),
        hint="the second sequence has no tokens: it contributes 0 and still counts as one of the "
        "B = 2 sequences, (2 + 0) / 2 = 1.0. Clamp each token count to at least 1 "
        "(.clamp(min=1.0), as TRL does), so its 0 / 0 never makes a NaN",
    ),
]

UNKNOWN_LOSS_TYPE = Case(
    "an unknown loss_type",
    (LOSS, MASK, "mean"),
    hint="loss_type must be one of 'grpo', 'bnpo', 'dr_grpo', 'dapo': raise ValueError for "
    "anything else (a typo must not train with some other normaliser)",
)


def _random_loss(g: torch.Generator, batch: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token losses in float64 and a right-padded mask: the first sequence is empty, the
    last one full, the others 1 to tokens - 1 tokens long."""
    loss = torch.randn(batch, tokens, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, tokens, (batch,), generator=g)
    lengths[0], lengths[-1] = 0, tokens
    mask = (torch.arange(tokens) < lengths.unsqueeze(-1)).to(torch.float64)
    return loss, mask


def aggregate_twins(seed: int) -> list[Case]:
    """One case of every kind ``aggregate_loss`` is graded on, with values drawn from ``seed``."""
    g = generator(seed)
    batch, tokens = draw_int(g, 4, 7), draw_int(g, 6, 10)
    loss, mask = _random_loss(g, batch, tokens)
    longer = tokens + draw_int(g, 3, 10)
    global_tokens = float(int(mask.sum()) + draw_int(g, 10, 60))
    one_loss = torch.randn(1, tokens, generator=g)
    one_mask = (torch.arange(tokens) < draw_int(g, 2, tokens - 1)).float().unsqueeze(0)
    unknown = _pick(g, ["mean", "sum", "token_mean", "sequence_mean", "ppo"])
    return [
        *(
            Case(
                f"random losses, {batch} sequences (the first empty), loss_type='{loss_type}'",
                (loss, mask, loss_type),
                hint=LOSS_TYPE_HINTS[loss_type],
            )
            for loss_type in package.LOSS_TYPES
        ),
        Case(
            "dr_grpo: max_completion_length longer than the padded batch",
            (loss, mask, "dr_grpo"),
            {"max_completion_length": longer},
            hint=f"the normaliser is batch * max_completion_length = {batch} * {longer}, not "
            "the token count and not the tensor's width",
        ),
        Case(
            "dapo: a global batch larger than this one",
            (loss, mask, "dapo"),
            {"num_items_in_batch": global_tokens},
            hint=f"divide the sum over this batch's tokens by num_items_in_batch "
            f"({global_tokens:g})",
        ),
        *(
            Case(
                f"no tokens at all, loss_type='{loss_type}'",
                (loss, torch.zeros_like(mask), loss_type),
                hint=NO_TOKENS_HINT,
            )
            for loss_type in package.LOSS_TYPES
        ),
        Case(
            "a boolean mask",
            (loss, mask.bool(), "grpo"),
            hint="convert the mask to the loss's dtype first (mask.to(per_token_loss.dtype)); as "
            "above, the first sequence is empty",
        ),
        Case(
            "one sequence, float32",
            (one_loss, one_mask, "grpo"),
            hint="one sequence: grpo is the mean over its tokens",
        ),
        Case(
            "another unknown loss_type",
            (loss, mask, unknown),
            hint=UNKNOWN_LOSS_TYPE.hint,
        ),
    ]


def _loss_as_a_float(*args: Any, **kwargs: Any) -> float:
    """A mistake: the right value, returned as a Python float (``.item()``)."""
    return package.aggregate_loss(*args, **kwargs).item()


AGGREGATE_MISTAKES = [
    Mistake(
        _loss_as_a_float,
        "return the loss as a tensor (no .item(), no float()): the gradient reaches the "
        "policy through it, and a float has none",
    ),
]


def check_aggregate_loss(fn: Callable, seed: int | None = None) -> None:
    """Values for each ``loss_type``, and a ``ValueError`` for an unknown one."""
    runs = []
    for case in cases_for([*AGGREGATE_PUBLIC, UNKNOWN_LOSS_TYPE], aggregate_twins, seed):
        refuse = case.args[2] not in package.LOSS_TYPES
        runs.append((fn, case, ValueError if refuse else package.aggregate_loss))
    _run_all("aggregate_loss", fn, runs, AGGREGATE_MISTAKES)


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
