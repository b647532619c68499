"""The GRPO objective, token by token, and the ways to average it.

Symbols follow the notebooks. For token t of output i: log-probs under the policy being trained
(log pi), the policy that sampled the data (log pi_old) and the reference (log pi_ref);
advantage A_i (the same for every token of output i unless given per token).

    (5) ratio               rho = exp(log pi - log pi_old)
    (6) clipped surrogate   L_clip = min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)
    (7) KL estimators, with x = log pi_ref - log pi on samples from pi:
            k1 = -x      k2 = x^2 / 2      k3 = exp(x) - x - 1
    (8) per-token loss      l = -L_clip + beta * k3      (optionally beta * rho * k3, TRL's default)
    (9) aggregation over tokens: grpo, bnpo, dr_grpo, dapo (see ``aggregate_loss``)
   (20) a KL estimator k used as a loss, its exact expected gradient on samples x ~ pi
            E_{x~pi}[grad k(x)] = sum_x sg(pi(x)) * grad k(x)      (sg = stop-gradient)
   (21) what (20) equals, with rho = pi / sg(pi) (value 1, gradient grad log pi):
            k1 -> 0;   k2 -> grad KL(pi || pi_ref);   k3 -> grad KL(pi_ref || pi);
            rho * k3 -> grad KL(pi || pi_ref)       (see ``expected_kl_loss_gradient``)

As values (Schulman, "Approximating KL divergence", 2020): k1 is unbiased but can be negative;
k3 is unbiased, always >= 0 and has lower variance when the two policies are close. As losses
(20)-(21), k2 and rho * k3 follow the gradient of the reverse KL(pi || pi_ref), plain k3 that of
the forward KL(pi_ref || pi), and k1 none at all.
"""

from __future__ import annotations

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
KL_ESTIMATORS = ("k1", "k2", "k3")


def policy_ratio(logps: torch.Tensor, old_logps: torch.Tensor) -> torch.Tensor:
    """Importance ratio rho = pi / pi_old computed in log space, equation (5)."""
    return torch.exp(logps - old_logps)


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float,
    epsilon_high: float | None = None,
) -> torch.Tensor:
    """The clipped surrogate objective L_clip of equation (6), per token (to be maximised).

    ``epsilon_high`` (DAPO's "clip-higher") widens only the upper bound; None means symmetric.
    When the clipped term is the smaller one, its gradient with respect to the ratio is zero.
    """
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + high)
    return torch.min(ratio * advantages, clipped * advantages)


def kl_k1(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log pi_ref, equation (7): unbiased, high variance, can be negative."""
    return logps - ref_logps


def kl_k2(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """k2 = (log pi - log pi_ref)^2 / 2, equation (7): biased, low variance, always >= 0."""
    return 0.5 * (logps - ref_logps) ** 2


def kl_k3(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """k3 = exp(x) - x - 1 with x = log pi_ref - log pi, equation (7): unbiased and >= 0.

    This is the estimator GRPO (DeepSeekMath) and TRL use for the value of KL(pi || pi_ref).
    Used as a loss without the ratio, its expected gradient is that of the forward
    KL(pi_ref || pi) instead, equation (21); see ``expected_kl_loss_gradient``.
    """
    x = ref_logps - logps
    return torch.exp(x) - x - 1.0


def categorical_kl(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """Exact KL(p || q) = sum_a p(a) (log p(a) - log q(a)) between categorical distributions.

    Computed over the last dimension from logits; the value the estimators (7) approximate.
    """
    log_p = torch.log_softmax(logits_p, dim=-1)
    log_q = torch.log_softmax(logits_q, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def expected_kl_loss_gradient(
    logits: torch.Tensor,
    ref_logits: torch.Tensor,
    estimator: str,
    *,
    use_bias_correction_kl: bool = False,
) -> torch.Tensor:
    """Exact expected gradient of a KL estimator (7) used as a loss, equation (20).

    pi = softmax(logits) and pi_ref = softmax(ref_logits) are categorical distributions over the
    last dimension. For every outcome x, ``loss(x)`` is the estimator ``estimator`` ("k1", "k2"
    or "k3") evaluated on log pi(x) and log pi_ref(x) with the sample x held fixed; with
    ``use_bias_correction_kl=True`` it is multiplied by the ratio rho = pi(x) / sg(pi(x)) (value 1,
    gradient grad log pi(x)), as ``grpo_loss(..., use_bias_correction_kl=True)`` and TRL 1.16 (by
    default) do. Returns the gradient, with respect to ``logits``, of

        E_{x~pi}[loss(x)] = sum_x sg(pi(x)) * loss(x)          (20)

    (the weight pi(x) is detached: it is the sampling distribution, not part of the loss): the
    expectation of the minibatch gradient of ``loss`` on samples from pi. Per sample, with
    r = pi_ref(x) / pi(x): grad k1 = grad log pi, grad k2 = (log pi - log pi_ref) grad log pi,
    grad k3 = (1 - r) grad log pi, and grad(rho * k3) = (log pi - log pi_ref) grad log pi on-policy.
    So, equation (21): k1 -> 0, k2 -> grad KL(pi || pi_ref), k3 -> grad KL(pi_ref || pi) (the
    forward KL), rho * k3 -> grad KL(pi || pi_ref).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    kl_estimate = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}[estimator]
    with torch.enable_grad():
        logits = logits.detach().clone().requires_grad_(True)
        log_pi = torch.log_softmax(logits, dim=-1)
        ref_log_pi = torch.log_softmax(ref_logits.detach(), dim=-1)
        loss = kl_estimate(log_pi, ref_log_pi)  # loss(x) for every outcome x at once
        if use_bias_correction_kl:
            loss = policy_ratio(log_pi, log_pi.detach()) * loss
        weights = log_pi.detach().exp()  # pi(x), detached
        (gradient,) = torch.autograd.grad((weights * loss).sum(), logits)
    return gradient


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy H(p) = -sum_a p(a) log p(a) over the last dimension, from logits."""
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def aggregate_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
) -> torch.Tensor:
    """Average a [batch, tokens] loss into a scalar, equation (9), as TRL defines ``loss_type``.

    - ``grpo``: mean over each sequence's own tokens, then mean over sequences (long outputs
      get a smaller weight per token: a length bias).
    - ``bnpo``: sum over all tokens / number of tokens in this batch.
    - ``dr_grpo``: sum over all tokens / (batch * max_completion_length), a constant normaliser.
    - ``dapo``: sum over all tokens / number of tokens in the whole (global) batch,
      ``num_items_in_batch``; equal to ``bnpo`` when the batch is not split.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    mask = mask.to(per_token_loss.dtype)
    total = (per_token_loss * mask).sum()
    if loss_type == "grpo":
        per_sequence = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_sequence.mean()
    if loss_type == "bnpo":
        return total / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        length = (
            per_token_loss.shape[-1] if max_completion_length is None else max_completion_length
        )
        return total / (per_token_loss.shape[0] * length)
    tokens = mask.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch)
    return total / tokens.clamp(min=1.0)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the entries where ``mask`` is 1 (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def clipped_tokens(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float,
    epsilon_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the clip of equation (6) is active: ``(low, high)`` boolean masks.

    Low: the ratio fell below 1 - epsilon on a negative advantage; high: it rose above
    1 + epsilon_high on a positive one. There the clipped term is the minimum and the token
    gives no gradient. The fraction of such tokens is the "clip fraction" both trainers log.
    """
    high = epsilon if epsilon_high is None else epsilon_high
    return (ratio < 1 - epsilon) & (advantages < 0), (ratio > 1 + high) & (advantages > 0)


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor | None,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    beta: float,
    epsilon: float,
    epsilon_high: float | None = None,
    loss_type: str = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
    use_bias_correction_kl: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss, equations (5)-(9). Returns ``(loss, metrics)``.

    ``logps``, ``old_logps``, ``ref_logps`` and ``completion_mask`` are [batch, tokens];
    ``advantages`` is [batch] (one per output) or [batch, tokens]. ``old_logps=None`` means the
    data was sampled by the current policy (one update per batch): pi_old = pi.detach(), so the
    ratio is 1 but its gradient is not zero. ``ref_logps`` may be None only when ``beta == 0``.
    ``use_bias_correction_kl=True`` multiplies the KL term by the ratio, as TRL 1.16 does by
    default; the classic GRPO objective (False) does not. On-policy the first follows the
    gradient of the reverse KL(pi || pi_ref), the second that of the forward KL(pi_ref || pi),
    equation (21).
    """
    if beta > 0 and ref_logps is None:
        raise ValueError("ref_logps is required when beta > 0")
    if old_logps is None:
        old_logps = logps.detach()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    mask = completion_mask.to(logps.dtype)

    ratio = policy_ratio(logps, old_logps)
    per_token_loss = -clipped_surrogate(ratio, advantages, epsilon, epsilon_high)
    kl = None
    if beta > 0:
        kl = kl_k3(logps, ref_logps)
        per_token_loss = per_token_loss + beta * (kl * ratio if use_bias_correction_kl else kl)
    loss = aggregate_loss(
        per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch
    )

    with torch.no_grad():
        low, high = clipped_tokens(ratio, advantages, epsilon, epsilon_high)
        low, high = low.to(mask.dtype), high.to(mask.dtype)
        metrics = {
            "loss": loss.item(),
            "clip_fraction": masked_mean(low + high, mask).item(),
            "clip_fraction_low": masked_mean(low, mask).item(),
            "clip_fraction_high": masked_mean(high, mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
            "kl": masked_mean(kl, mask).item() if kl is not None else 0.0,
        }
    return loss, metrics
