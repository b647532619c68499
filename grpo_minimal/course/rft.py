"""Online rejection-sampling fine-tuning (DeepSeekMath's Online RFT, Shao et al. 2024,
arXiv:2402.03300, section 5.2.1): supervised fine-tuning on the current model's own correct
samples, as one more step for ``train_math`` (``trainer_cls=RFTTrainer``).

Each step samples ``num_generations`` completions per prompt exactly as GRPO does, keeps those
the verifier accepts (reward >= ``threshold``), and takes one gradient step on their mean
negative log-likelihood per token:

    L_RFT = - (1 / |T_correct|) * sum over tokens t of correct completions of log pi(o_t | q, o_<t)

It is neither Yuan et al. 2023's offline RFT (arXiv:2308.01825: sample many reasoning paths
once from the supervised model, keep the distinct correct ones, fine-tune on them afterwards)
nor STaR (Zelikman et al. 2022, arXiv:2203.14465: each outer round refits the original
pre-trained model on the correct rationales collected so far, and adds rationalisation, a
rationale written with the right answer as a hint). Online RFT samples from the current policy
at every step, one batch at a time, so that it can be set beside GRPO at an equal budget of
sampled completions (notebook 08); DeepSeekMath reports that GRPO beats it on GSM8K and MATH.
DeepSeekMath writes it as a policy gradient with "gradient coefficient" 1 for a correct output
and 0 for a wrong one. Written as GRPO's step, it is the policy gradient with advantage 1 for a
correct completion, no baseline and no signal at all from the wrong ones: ``advantages`` returns
A_i = 1 and masks out the tokens of wrong completions, and the ``dapo`` aggregation (sum over
counted tokens / their number) gives the surrogate -A * ratio (ratio 1 with the gradient of
log pi, ``num_iterations == 1``) the gradient of L_RFT. Its logged value is -1, not L_RFT's:
only the gradient is the same.
"""

from __future__ import annotations

import torch

from ..completions import CompletionGroups
from ..lm_grpo import LMGRPOTrainer


class RFTTrainer(LMGRPOTrainer):
    """GRPO's trainer with stage 4 (the advantages) replaced: keep the correct completions, weight them 1.

    Needs ``beta == 0`` (no reference), ``loss_type == "dapo"`` and ``num_iterations == 1``, so
    that the loss is exactly L_RFT; the config is refused otherwise.
    """

    threshold = 1.0  # the accuracy reward is 1 for a correct answer

    def __init__(self, cfg, *args, **kwargs) -> None:
        wrong = {
            name: getattr(cfg, name)
            for name, value in (("beta", 0.0), ("loss_type", "dapo"), ("num_iterations", 1))
            if getattr(cfg, name) != value
        }
        if wrong:
            raise ValueError(
                f"RFTTrainer needs beta=0.0, loss_type='dapo' and num_iterations=1, got {wrong}"
            )
        super().__init__(cfg, *args, **kwargs)

    def advantages(
        self, rewards: torch.Tensor, rollout: CompletionGroups
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A_i = 1 for every completion; the mask keeps the tokens of the correct ones only."""
        correct = (rewards >= self.threshold).to(rollout.completion_mask.device)
        mask = rollout.completion_mask * correct[:, None].to(rollout.completion_mask.dtype)
        return torch.ones_like(rewards), mask
