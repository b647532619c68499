r"""GRPO for causal language models: the step that teaches a model math from a reward.

``LMGRPOTrainer.step`` runs six stages; the engineering around them (micro-batches, autocast,
timing, the optimizer) is the skeleton's, ``lm_trainer.LMTrainer``, shared with PPO
(``lm_ppo.py``). Symbols and equation numbers follow the notebooks (``docs/equations.md``).

1. **Sample a group per prompt** (``completions.sample_completions``): G = ``num_generations``
   completions of each of ``prompts_per_step`` prompts, in consecutive blocks of G (TRL's order);
   everything after a completion's first EOS is masked, equation (15).
2. **Score** (``rewards.score_completions``): the weighted sum of the reward functions, called
   as TRL calls them; NaN where every function said ``None`` (cannot score).
3. **Frozen log-probs** (``lm_trainer.completion_logps``), equation (16): log pi_old (only when
   ``num_iterations > 1``; otherwise pi_old is the current policy, detached) and log pi_ref
   (only when ``beta > 0``).
4. **Group advantages** (``advantages.group_advantages``): A_i = (r_i - mean) / (std + 1e-4),
   equation (2), shared by every token of completion i; an unscored completion gets 0.
5. **Update**, ``num_iterations`` times: ``losses.grpo_loss``, equations (5)-(9), backward,
   gradient-norm clipping, one AdamW step, the learning-rate schedule.
6. **Reference refresh**: with ``ref_update_every > 0`` the reference becomes a copy of the
   policy every that many steps.

The training loop, evaluation and checkpoints are in ``lm_train.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .advantages import group_advantages
from .completions import CompletionGroups
from .lm_trainer import LMTrainer, completion_logps
from .losses import grpo_loss, masked_mean


class LMGRPOTrainer(LMTrainer):
    """GRPO on a causal LM: ``step(rows)`` is one GRPO step."""

    name = "GRPO"

    def step(self, rows: Sequence[dict]) -> tuple[dict, CompletionGroups]:
        """One GRPO step on ``prompts_per_step`` dataset rows. Returns (record, rollout)."""
        cfg = self.cfg
        rollout = self.sample(rows)  # 1. G completions of each prompt
        rewards, reward_means = self.score(rollout)  # 2. one reward per completion
        # 3. log-probs fixed during the update: pi_old and pi_ref (None: not needed)
        rollout.add(old_logps=self.old_logps(rollout), ref_logps=self.reference_logps(rollout))
        advantages, loss_mask = self.advantages(torch.tensor(rewards), rollout)  # 4
        rollout.add(advantages=advantages.to(self.device), loss_mask=loss_mask)
        updates = []
        for _ in range(cfg.num_iterations):  # 5. clipped updates on the same completions
            updates += self.backward(rollout)
            grad_norm = self.optimizer_step()
        self.refresh_reference()  # 6
        return self.record(rollout, rewards, reward_means, updates, grad_norm), rollout

    def old_logps(self, rollout: CompletionGroups) -> torch.Tensor | None:
        """Stage 3: log pi_old, or None with one update per batch: pi_old is then the policy
        itself, detached in the loss (ratio 1, gradient intact)."""
        return self.frozen_logps(rollout) if self.cfg.num_iterations > 1 else None

    def advantages(
        self, rewards: torch.Tensor, rollout: CompletionGroups
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stage 4: one advantage per completion (equation (1) or (2), ``scale_rewards``) and the
        mask of the tokens the loss counts. ``course.rft.RFTTrainer`` overrides it."""
        advantages = group_advantages(rewards, self.cfg.num_generations, self.cfg.scale_rewards)
        return advantages, rollout.completion_mask

    def loss(self, micro: CompletionGroups, batch: CompletionGroups) -> tuple[torch.Tensor, dict]:
        """Equations (5)-(9) on one micro-batch: its share of the batch's loss, and its metrics."""
        cfg = self.cfg
        logps, entropy = completion_logps(
            self.model, micro, cfg.temperature, with_entropy=True, share_prompts=self.share_prompts
        )
        loss, metrics = grpo_loss(
            logps,
            micro.get("old_logps"),
            micro.get("ref_logps"),
            micro.advantages,
            micro.loss_mask,
            beta=cfg.beta,
            epsilon=cfg.epsilon,
            epsilon_high=cfg.epsilon_high,
            loss_type=cfg.loss_type,
            max_completion_length=cfg.max_completion_length,
            num_items_in_batch=batch.loss_mask.sum(),  # dapo: tokens in the whole batch
            use_bias_correction_kl=cfg.use_bias_correction_kl,
        )
        if cfg.loss_type != "dapo":  # dapo already divides by the whole batch's tokens
            loss = loss / cfg.gradient_accumulation_steps
        return loss, {
            "kl": metrics["kl"],
            "clip_fraction": metrics["clip_fraction"],
            "entropy": masked_mean(entropy, micro.loss_mask).item(),
        }
