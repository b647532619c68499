r"""Seed 002's list of changes to a VLM GRPO trainer, as variants of notebook 13's run.

The seed (``QWENGRPOConfig``, measured against a CartPole GRPO reference) lists what its
vision-language GRPO trainer lacked: discounted returns, refreshing the reference every
iteration, the k3 KL estimator, multi-epoch updates, normalising over every group, an entropy
bonus and gradient clipping. Most are settings of ``MathConfig`` (``VARIANTS``); those that
change the algorithm are trainers that inherit ``LMGRPOTrainer`` and override one stage:

- ``K1GRPOTrainer``: the KL penalty estimated by k1 = log pi - log pi_ref instead of k3. As a
  loss, k1's expected gradient is 0 on-policy (``losses.expected_kl_loss_gradient``): it does
  not pull the policy towards the reference at all.
- ``EntropyBonusTrainer``: the loss minus ``entropy_coef`` times the mean token entropy (with
  its gradient), as CartPole's GRPO and PPO do.
- ``SeedBatchNormTrainer``: the seed's "normalising over every group", the batch's mean and
  std (``scale_rewards="batch"`` keeps each group's mean and divides by the batch's std).
- ``DiscountedGRPOTrainer``: discounted returns for a one-turn answer. The reward r_i arrives
  after the last token; token t of a completion of length L_i gets G_{i,t} = gamma^(L_i-1-t) r_i.
  Normalised within the group at each position, these are the plain GRPO advantages whenever a
  group's completions have equal lengths (gamma^k scales mean and std alike), so the trainer
  uses the form that can differ: A_{i,t} = gamma^(L_i-1-t) A_i, each earlier token's advantage
  shrunk by gamma per step from the end.

``bench/vlm.py --seed002`` runs each over 5 seeds beside the defaults; notebook 13 shows the table.
"""

from __future__ import annotations

import torch

from ..completions import CompletionGroups
from ..lm_grpo import LMGRPOTrainer
from ..lm_trainer import completion_logits
from ..losses import aggregate_loss, clipped_surrogate, kl_k1, kl_k3, masked_mean, policy_ratio
from ..prompt_cache import shared_prompt_logits

ENTROPY_COEF = 0.01
"""The entropy bonus's weight (CartPoleConfig's default)."""
GAMMA = 0.9
"""The discount of ``DiscountedGRPOTrainer``."""


def token_logps_entropy(trainer: LMGRPOTrainer, micro: CompletionGroups):
    """log pi of each completion token and the entropy at its position, both with gradient."""
    logits = (shared_prompt_logits if trainer.share_prompts else completion_logits)(
        trainer.model, micro
    )
    logits = logits.float() / trainer.cfg.temperature
    normaliser = torch.logsumexp(logits, dim=-1)
    logps = logits.gather(-1, micro.completion_ids.unsqueeze(-1)).squeeze(-1) - normaliser
    entropy = normaliser - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logps, entropy


class _VariantLoss(LMGRPOTrainer):
    """Equations (5)-(9) written out, with a hook for each variant: ``kl`` and ``bonus``."""

    def kl(self, logps, ref_logps):
        return kl_k3(logps, ref_logps)

    def bonus(self, entropy, mask):
        return 0.0

    def loss(self, micro, batch):
        cfg = self.cfg
        logps, entropy = token_logps_entropy(self, micro)
        old = micro.get("old_logps")
        ratio = policy_ratio(logps, logps.detach() if old is None else old)
        advantages = micro.advantages
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(-1)
        per_token = -clipped_surrogate(ratio, advantages, cfg.epsilon, cfg.epsilon_high)
        kl = torch.zeros_like(per_token)
        if cfg.beta > 0:
            kl = self.kl(logps, micro.ref_logps)
            per_token = per_token + cfg.beta * kl
        mask = micro.loss_mask.to(logps.dtype)
        loss = aggregate_loss(
            per_token, mask, cfg.loss_type, cfg.max_completion_length, batch.loss_mask.sum()
        )
        loss = loss - self.bonus(entropy, mask)
        if cfg.loss_type != "dapo":
            loss = loss / cfg.gradient_accumulation_steps
        return loss, {
            "kl": masked_mean(kl.detach(), mask).item(),
            "clip_fraction": 0.0,
            "entropy": masked_mean(entropy.detach(), mask).item(),
        }


class K1GRPOTrainer(_VariantLoss):
    """The KL penalty as k1 = log pi - log pi_ref, not k3."""

    name = "GRPO k1"

    def kl(self, logps, ref_logps):
        return kl_k1(logps, ref_logps)


class EntropyBonusTrainer(_VariantLoss):
    """The loss minus ``ENTROPY_COEF`` x the mean entropy of the completion tokens."""

    name = "GRPO + entropy"

    def bonus(self, entropy, mask):
        return ENTROPY_COEF * masked_mean(entropy, mask)


class SeedBatchNormTrainer(LMGRPOTrainer):
    """The seed's "normalise over every group": A_i = (r_i - mean(r)) / (std(r) + 1e-8) over the
    whole batch. No group baseline is left: it is REINFORCE with a batch baseline."""

    name = "GRPO, batch baseline"

    def advantages(self, rewards, rollout):
        scored = ~rewards.isnan()
        values = rewards[scored]
        advantages = torch.zeros_like(rewards)
        advantages[scored] = (values - values.mean()) / (values.std() + 1e-8)
        return advantages, rollout.completion_mask


class DiscountedGRPOTrainer(LMGRPOTrainer):
    """A_{i,t} = GAMMA^(L_i - 1 - t) A_i: the terminal reward discounted back to token t."""

    name = "GRPO discounted"

    def advantages(self, rewards, rollout):
        advantages, mask = super().advantages(rewards, rollout)
        lengths = rollout.completion_mask.sum(dim=1, keepdim=True)  # L_i
        steps_to_end = (lengths - 1 - torch.arange(mask.shape[1])).clamp(min=0)
        return advantages[:, None] * GAMMA**steps_to_end, mask


VARIANTS: dict[str, tuple[dict, type[LMGRPOTrainer] | None]] = {
    "default": ({}, None),  # a fixed reference, k3, 1 epoch, group normalisation, clip 1.0
    "ref_every_step": ({"ref_update_every": 1}, None),
    # the seed's own pairing: a reference refreshed each iteration, then several epochs on it
    "ref_every_step_epochs_4": ({"ref_update_every": 1, "num_iterations": 4}, None),
    "k1": ({}, K1GRPOTrainer),
    "epochs_4": ({"num_iterations": 4}, None),
    "steps_x4": ({"max_steps": 600}, None),  # epochs_4's optimizer steps, on fresh batches
    "no_std": ({"scale_rewards": "none"}, None),  # the seed's starting point: the group's mean only
    "batch_norm": ({"scale_rewards": "batch"}, None),  # the group's mean, the batch's std
    "seed_batch_norm": ({}, SeedBatchNormTrainer),  # the batch's mean and std
    "entropy_bonus": ({}, EntropyBonusTrainer),
    "no_clipping": ({"max_grad_norm": 0.0}, None),
    "discounted": ({}, DiscountedGRPOTrainer),
}
"""Each of seed 002's rows as (settings over notebook 13's defaults, trainer class or None for
``LMGRPOTrainer``). The defaults hold two of the seed's seven changes (k3, with its gradient, and
gradient clipping; GRPO's group normalisation is not the seed's batch normalisation), so each row
switches one change on or off. ``steps_x4`` is a control, not a row: as many optimizer steps as
``epochs_4`` takes, each on a freshly sampled batch; ``ref_every_step_epochs_4`` is the seed's own
pairing of a refreshed reference with several epochs."""
