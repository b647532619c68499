"""Advantages without a critic: group baselines, RLOO, and discounted returns.

Symbols follow the notebooks. For one prompt (or one CartPole start state) we draw a group of
G outputs with scalar rewards r_1..r_G.

    (1) mean-centred        A_i = r_i - mean(r)
    (2) GRPO (group scale)  A_i = (r_i - mean(r)) / (std(r) + eps)
    (3) RLOO                A_i = r_i - 1/(G-1) * sum_{j != i} r_j  =  G/(G-1) * (r_i - mean(r))
    (4) discounted return   R_t = r_t + gamma * R_{t+1}

Sources. (2) is GRPO's outcome-reward advantage: DeepSeekMath (Shao et al. 2024,
arXiv:2402.03300, section 4.1.2) and DeepSeek-R1 (Guo et al. 2025, arXiv:2501.12948v1, eq. 3); both
divide by the group std and write no eps. (1), without the std, is Dr. GRPO's choice (Liu et al.
2025, arXiv:2503.20783, section 3.1). (3) is RLOO (Kool et al. 2019; Ahmadian et al. 2024,
arXiv:2402.14740).

`std` is the sample (Bessel-corrected, G-1) standard deviation and eps = 1e-4, as in TRL 1.16
(``GRPOTrainer._generate_and_score_completions``; its ``trl.trainer.utils.nanstd`` applies
Bessel's correction count / (count - 1)). Dividing by G-1 makes the variance unbiased;
its square root is not an unbiased estimator of sigma (it is biased low), so "sample std", not
"unbiased std". The papers do not say which std they use.
"""

from __future__ import annotations

import torch

SCALE_REWARDS = ("group", "batch", "none")


def _grouped(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """View flat rewards [B] as [B / G, G]: consecutive blocks of G are one group (TRL order)."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be a flat 1-D tensor, got shape {tuple(rewards.shape)}")
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2, got {num_generations}")
    if rewards.numel() % num_generations:
        raise ValueError(
            f"len(rewards)={rewards.numel()} is not a multiple of num_generations={num_generations}"
        )
    if torch.isinf(rewards).any():
        raise ValueError("rewards contain inf; fix the reward function first")
    return rewards.view(-1, num_generations)


def group_advantages(
    rewards: torch.Tensor,
    num_generations: int,
    scale_rewards: str = "group",
    eps: float = 1e-4,
) -> torch.Tensor:
    """Group-relative advantages, equations (1) and (2), with TRL's semantics.

    The baseline is always the mean of the group. The scale is chosen by ``scale_rewards``:
    ``"group"`` divides by each group's sample (Bessel-corrected) std (GRPO, as in DeepSeekMath
    and in the DeepSeek-R1 paper's eq. 3), ``"batch"`` by the std of the whole batch, ``"none"``
    does not divide (mean-centring only, equation (1), as in Dr. GRPO). A group whose rewards
    are all equal gets advantages 0 (0 / (0 + eps)), never NaN.

    A NaN reward means "could not be scored" (every reward function returned None for that
    output): it is left out of its group's mean and std (and of the batch std) and gets
    advantage 0, as TRL does (its ``nanmean`` / ``nanstd``). Infinite rewards are an error.
    """
    grouped = _grouped(rewards.float(), num_generations)
    scored = ~torch.isnan(grouped)
    return centre_and_scale(grouped.nan_to_num(0.0), scored, 1, scale_rewards, eps)[0].reshape(-1)


def centre_and_scale(
    values: torch.Tensor,
    mask: torch.Tensor,
    dim: int | tuple[int, ...],
    scale_rewards: str = "group",
    eps: float = 1e-4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equations (1) / (2) along ``dim`` over the entries where ``mask`` is 1: (advantages, count).

    (values - mean) over the compared entries, divided by their sample std + eps (``"group"``),
    by the std of every masked entry in ``values`` (``"batch"``) or by nothing (``"none"``);
    masked-out entries get 0. ``count`` (kept dims) is how many entries each mean compared.
    ``group_advantages`` compares a group's G rewards; CartPole's ``step_advantages`` compares
    the returns of a group's episodes at one step, or over all its steps.
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    mean, std, count = masked_mean_std(values, mask, dim)
    advantages = (values - mean) * mask
    if scale_rewards == "group":
        advantages = advantages / (std + eps)
    elif scale_rewards == "batch":
        advantages = advantages / (masked_mean_std(values, mask)[1] + eps)
    return advantages, count


def rloo_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """REINFORCE leave-one-out advantages, equation (3): each reward minus the mean of the others."""
    grouped = _grouped(rewards.float(), num_generations)
    others_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (num_generations - 1)
    return (grouped - others_mean).reshape(-1)


def population_std_advantages(rewards: torch.Tensor, num_generations: int, eps: float = 1e-4):
    """Equation (2) with the population std (divide by G, not G-1): for comparison only.

    Some write-ups use it (the course's seed review of GRPO works "15 + 27" with it: std 0.43,
    advantages +0.58 / -1.74); TRL and this course use the sample (Bessel-corrected) std. Up to
    eps the two differ by a factor sqrt(G / (G-1)): sqrt(4/3) = 1.155 for G=4.
    """
    grouped = _grouped(rewards.float(), num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, unbiased=False, keepdim=True) + eps)).reshape(-1)


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Returns-to-go R_t = r_t + gamma * R_{t+1}, equation (4), for padded episodes.

    ``rewards`` and ``mask`` are [episodes, T]; ``mask`` is 1 on real steps and 0 on padding
    after an episode ended. Padding contributes nothing and gets return 0. An episode that was
    truncated (time limit) is cut there: without a critic there is no value to bootstrap from.
    """
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    if rewards.shape != mask.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)} and mask {tuple(mask.shape)} differ")
    rewards = rewards * mask
    returns = torch.zeros_like(rewards, dtype=torch.float32)
    running = torch.zeros(rewards.shape[0], dtype=torch.float32)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running * mask[:, t]
        returns[:, t] = running
    return returns


def masked_mean_std(
    values: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, sample std and count of ``values`` where ``mask`` is 1, along ``dim`` (kept).

    The std is the sample (Bessel-corrected) one: squared deviations summed over count - 1.
    ``dim=None`` pools every entry. With fewer than two valid entries the std is 0.
    """
    mask = mask.to(values.dtype)
    dims = tuple(range(values.dim())) if dim is None else dim
    count = mask.sum(dim=dims, keepdim=True)
    mean = (values * mask).sum(dim=dims, keepdim=True) / count.clamp(min=1)
    var = (((values - mean) * mask) ** 2).sum(dim=dims, keepdim=True) / (count - 1).clamp(min=1)
    return mean, var.sqrt(), count
