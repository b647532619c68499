r"""PPO for causal language models: a learned critic, the KL in the reward, GAE over tokens.

Read it beside ``lm_grpo.py``: both trainers fill the same skeleton (``lm_trainer.LMTrainer``)
in the same six stages; stages 1, 2 and 6 and the log-prob passes of stage 3 are the
skeleton's, and the critic's pass (3), the advantages (4) and the update (5) are where PPO and
GRPO differ. Equations go on from ``ppo.py`` (10)-(14) and ``rewards.py`` (17)-(19). A
completion o of T tokens is an episode: state s_t is the prompt and o_<t, action a_t the token
o_t, and the verifiable reward R(o) (17)/(19) arrives at its last token.

    (22) per-token reward  r_t = -beta * (log pi_old(o_t) - log pi_ref(o_t)) + [t = T] * R(o)
    (23) GAE over tokens   (10)-(12) with gamma = 1; the last token ends the episode, V(s_{T+1}) = 0
    (24) whitening         A_t <- (A_t - mean(A)) / sqrt(var(A) + 1e-8), over every token in the batch
    (25) PPO loss          l = -L_clip(rho_t, A_t) (aggregated as loss_type) + c_V * L_V (13)

``LMPPOTrainer.step`` runs these stages in this order:

1. **Sample** (``completions.sample_completions``): ``num_generations`` completions of each of
   ``prompts_per_step`` prompts (PPO's classic 1 per prompt is the default), EOS-masked (15).
2. **Score** (``rewards.score_completions``): the same reward functions as GRPO.
3. **Frozen passes** (no gradient): log pi_old, log pi_ref (when beta > 0) with
   ``lm_trainer.completion_logps`` (16), and V(s_t) for every token (``completion_values``).
4. **Advantages per token**: rewards (22) (``token_rewards``), GAE (23) (``token_gae``, which is
   ``ppo.gae``), whitened over the batch (24) (``whiten``). GRPO's stage 4 instead gives every
   token of completion i the one number (r_i - mean of its group) / std: the group is its critic.
5. **Update**: ``num_iterations`` epochs over ``num_minibatches`` shuffled minibatches of whole
   prompts; each is one AdamW step on loss (25) (``ppo_lm_loss``): the clipped surrogate (6) of
   ``losses.py`` for the policy, the clipped value loss (13) of ``ppo.py`` for the critic.
6. **Reference refresh**, as GRPO's (``ref_update_every``).

``loss`` in its record is the loss each minibatch update minimised, (25) with the value term,
averaged over the step's updates; the other metrics weigh each micro-batch by its tokens, as
GRPO's record does (``LMTrainer.record``).

**The critic** (``ValueModel``) is a separate copy of the policy's transformer body with a
scalar head, as in InstructGPT (initialised from its reward model), OpenRLHF and TRL's last
``PPOTrainer``, not TRL's older shared body with a value head. A shared body is cheaper, but the
value loss then pulls on the weights that make the text, and the two losses need weighing
against each other; a separate critic keeps the comparison plain and is the memory cost the
PPO-vs-GRPO argument is about: a second trained model (weights, gradients, AdamW's two states).
With a verifiable reward there is no reward model to start it from (InstructGPT starts its
critic from its reward model), so its body starts as a copy of the policy and its head at zero,
the value-head initialisation of Huang et al.'s N details: V = 0 everywhere at the first step.

**The KL goes into the reward (22), not into the loss** as GRPO's beta * k3 does (8): the
penalty on token t then reaches every earlier token through GAE (when lambda > 0), and the
policy gradient treats it like any other reward (the surrogate is clipped, the KL is part of what the critic predicts).
It uses k1, log pi_old - log pi_ref on the sampled token (TRL's PPO default, ``kl_estimator="k1"``);
its expected value over samples is the KL. GRPO's loss-side penalty pulls each token directly.

Which of the implementation details of Huang et al., "The N Implementation Details of RLHF with
PPO" (ICLR 2024 blog track), this file keeps, changes and drops: notebook 12, section 1. The
loop, evaluation and checkpoints are ``lm_train.py``'s, shared with GRPO.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, fields
from types import SimpleNamespace

import torch
from torch import nn

from .completions import CompletionGroups
from .config import option, override
from .lm_model import enable_activation_checkpointing
from .lm_trainer import LMTrainer, adamw_groups, completion_logits, completion_logps
from .losses import (
    aggregate_loss,
    clipped_surrogate,
    clipped_tokens,
    kl_k1,
    kl_k3,
    masked_mean,
    policy_ratio,
)
from .math_config import MathConfig
from .ppo import explained_variance, gae, value_loss

# MathConfig fields that only GRPO reads: setting one for PPO is a mistake, said in one line
GRPO_ONLY = ("scale_rewards", "use_bias_correction_kl")
# why ``--algo ppo --backend trl`` is refused (the CLI's one line)
TRL_HAS_NO_PPO = (
    "--algo ppo runs on --backend grpo_minimal only: TRL removed its PPOTrainer in 2026-09 "
    "(huggingface/trl PR #7020)"
)


@dataclass
class LMPPOConfig(MathConfig):
    """PPO on a causal LM (``lm_ppo.py``): ``MathConfig``'s run settings plus the critic's.

    ``for_device`` starts from GRPO's defaults for the same model and device (learning rate,
    beta, steps, ...) and turns each group of G completions into G prompts with one completion
    each: the same completions per step (PPO's classic sampling; the tiny model: 64 prompts x 1
    against GRPO's 8 x 8). The critic's settings are those of TRL's last ``PPOConfig``
    (``num_ppo_epochs`` 4, ``num_mini_batches`` 1, ``lam`` 0.95, ``vf_coef`` 0.1,
    ``cliprange_value`` 0.2), not tuned here.
    """

    num_generations: int = option(
        1,
        "completions sampled per prompt (PPO's classic choice is 1; the critic is the baseline)",
        low=1,
    )
    beta: float = option(
        0.04,
        "weight of the per-token KL penalty (k1) in the reward, equation (22); 0: no reference",
        low=0.0,
    )
    num_iterations: int = override(MathConfig, "num_iterations", 4)
    num_minibatches: int = option(
        1,
        "minibatches of whole prompts per epoch, one AdamW step each; must divide prompts_per_step",
        low=1.0,
    )
    gae_lambda: float = option(
        0.95,
        "lambda of GAE over tokens (gamma is 1): 0 is the one-step TD error, 1 the return - V",
        low=0.0,
        high=1.0,
    )
    value_coef: float = option(
        0.1,
        "c_V, the weight of the value loss in (25) (TRL's vf_coef); the critic has its own weights "
        "and gradient clip, and AdamW hardly sees a constant scale, so it matters little here",
        low=0.0,
    )
    value_clip: float = option(
        0.2,
        "value clip (13): a value counts at most this far from its value at sampling; 0: off",
        low=0.0,
    )
    critic_learning_rate: float | None = option(
        None,
        "AdamW step size of the critic; None: the policy's learning_rate",
        low=0.0,
        low_open=True,
    )

    def validate(self) -> None:
        """``MathConfig``'s rules, then PPO's: no GRPO-only setting, no LoRA, minibatches that
        split the prompts into whole micro-batches."""
        super().validate()
        defaults = {f.name: f.default for f in fields(MathConfig)}
        for name in GRPO_ONLY:
            if getattr(self, name) != defaults[name]:
                raise ValueError(f"{name} is a GRPO setting; PPO (--algo ppo) does not use it")
        if self.lora_r:
            raise ValueError(
                "lora_r must be 0 with --algo ppo: PPO's critic is built for a full "
                "fine-tune; LoRA runs with GRPO"
            )
        per_minibatch, left = divmod(self.prompts_per_step, self.num_minibatches)
        if left:
            raise ValueError(
                f"num_minibatches must divide prompts_per_step={self.prompts_per_step}, "
                f"got {self.num_minibatches}"
            )
        if per_minibatch % self.gradient_accumulation_steps:
            raise ValueError(
                f"gradient_accumulation_steps must divide the prompts of a minibatch "
                f"({per_minibatch}), got {self.gradient_accumulation_steps}"
            )

    @classmethod
    def for_device(cls, device: str = "auto", **overrides) -> LMPPOConfig:
        """GRPO's config for this model and device (``MathConfig.for_device``) with PPO's own
        defaults (``num_generations`` 1, ``num_iterations`` 4) and as many completions a step:
        GRPO's P x G become P x G / g prompts of g completions each; then the settings given."""
        own = {f.name for f in fields(cls)} - {f.name for f in fields(MathConfig)}
        shared = {k: v for k, v in overrides.items() if k not in own and k != "num_generations"}
        base = MathConfig.for_device(device, **shared).to_dict()
        completions = base["prompts_per_step"] * base["num_generations"]
        for name in ("num_generations", "num_iterations"):
            if name not in overrides:
                base[name] = cls.__dataclass_fields__[name].default
        generations = overrides.get("num_generations", base["num_generations"])
        if "prompts_per_step" not in overrides:
            if not isinstance(generations, int) or generations < 1 or completions % generations:
                raise ValueError(
                    f"num_generations must divide GRPO's {completions} completions a step, "
                    f"got {generations!r} (or give prompts_per_step)"
                )
            base["prompts_per_step"] = completions // generations
        return cls(**(base | overrides))

    def to_dict(self) -> dict:
        """The fields, and ``algo: ppo`` so that a checkpoint says which config it was."""
        return {"algo": "ppo", **super().to_dict()}


class ValueModel(nn.Module):
    """The critic V(s_t): a transformer body (a causal LM without its head) and a scalar head.

    Its forward has a causal LM's signature and returns one "logit" per position, the value, so
    ``lm_trainer.completion_logits`` (the policy's own pass) gives V(s_t) for every completion
    token with no second copy of that code (``completion_values``). The head starts at zero:
    V = 0 everywhere at the first step. ``course.memory`` plans the same class.
    """

    def __init__(self, body: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.body = body
        weight = next(body.parameters())  # the head lives where the body does, in its dtype
        self.head = nn.Linear(hidden_size, 1).to(device=weight.device, dtype=weight.dtype)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_policy(cls, policy) -> ValueModel:
        """A critic whose body is a copy of the policy's transformer body."""
        return cls(copy.deepcopy(policy.base_model), policy.config.hidden_size)

    @classmethod
    def from_config(cls, config) -> ValueModel:
        """A freshly initialised critic for a model ``config`` (the memory planner's)."""
        from transformers import AutoModel

        return cls(AutoModel.from_config(config), config.hidden_size)

    def forward(
        self,
        input_ids,
        attention_mask=None,
        position_ids=None,
        logits_to_keep: int = 0,
        use_cache=False,
    ):
        hidden = self.body(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
        ).last_hidden_state
        return SimpleNamespace(logits=self.head(hidden[:, -logits_to_keep:]))  # 0 keeps all


def completion_values(critic: ValueModel, rollout: CompletionGroups) -> torch.Tensor:
    """V(s_t) [N, C]: the critic's value of the state before each completion token."""
    values = completion_logits(critic, rollout).squeeze(-1)
    return values.to(torch.promote_types(values.dtype, torch.float32))


def token_rewards(
    scores: torch.Tensor,
    old_logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    mask: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Equation (22): -beta * k1 on every completion token, plus the score at the last token
    the EOS mask (15) keeps. [N, C]; 0 on masked tokens. An unscored completion (NaN) gets 0."""
    rewards = torch.zeros_like(old_logps)
    if ref_logps is not None and beta > 0:
        rewards = -beta * kl_k1(old_logps, ref_logps)
    rewards = rewards * mask
    last = mask.sum(dim=1).long() - 1  # the EOS, or the last token of a truncated completion
    rows = torch.arange(len(scores), device=rewards.device)
    rewards[rows, last] += torch.nan_to_num(scores.to(rewards), nan=0.0)
    return rewards


def token_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gae_lambda: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation (23): ``ppo.gae`` over tokens with gamma = 1, each completion an episode that
    terminates at its last kept token (no bootstrap from beyond it). Inputs and outputs are
    [N, C]; returns (advantages, value targets), both 0 on masked tokens."""
    mask = mask.to(rewards.dtype)
    last = torch.zeros_like(mask)
    last[torch.arange(len(mask)), mask.sum(dim=1).long() - 1] = 1.0  # the episode's end
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    advantages, targets = gae(rewards.T, values.T, next_values.T, last.T, last.T, 1.0, gae_lambda)
    return advantages.T * mask, targets.T * mask


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Equation (24): shift to mean 0 and scale to variance 1 over the masked entries of the
    whole batch (the sample variance, as TRL's ``masked_whiten``); 0 on masked entries."""
    mask = mask.to(values.dtype)
    mean = masked_mean(values, mask)
    var = ((values - mean) ** 2 * mask).sum() / (mask.sum() - 1).clamp(min=1.0)
    return (values - mean) * torch.rsqrt(var + eps) * mask


def ppo_lm_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon: float,
    epsilon_high: float | None,
    value_clip: float,
    value_coef: float,
    loss_type: str,
    max_completion_length: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Equation (25) on one micro-batch, all [N, C]: the clipped surrogate (6) per token,
    aggregated as ``loss_type`` (9), plus ``value_coef`` times the value loss (13) over the
    kept tokens. Returns (loss, metrics)."""
    ratio = policy_ratio(logps, old_logps)  # (5)
    per_token = -clipped_surrogate(ratio, advantages, epsilon, epsilon_high)  # (6)
    policy_loss = aggregate_loss(per_token, mask, loss_type, max_completion_length)
    kept = mask.bool()
    v_loss = value_loss(
        values[kept], old_values[kept], targets[kept], value_clip if value_clip > 0 else None
    )  # (13)
    with torch.no_grad():
        low, high = clipped_tokens(ratio, advantages, epsilon, epsilon_high)
        metrics = {
            "policy_loss": policy_loss.item(),
            "value_loss": v_loss.item(),
            "clip_fraction": masked_mean((low | high).to(logps.dtype), mask).item(),
            "approx_kl": masked_mean(kl_k3(old_logps, logps), mask).item(),  # KL(pi_old || pi)
        }
    return policy_loss + value_coef * v_loss, metrics


class LMPPOTrainer(LMTrainer):
    """PPO on a causal LM: the policy, a critic (``ValueModel``) and one AdamW for both;
    ``step(rows)`` is one PPO step."""

    name = "PPO"

    def __init__(self, cfg: LMPPOConfig, model, tokenizer, reward_funcs=None, reward_weights=None):
        if not isinstance(cfg, LMPPOConfig):
            raise TypeError(f"LMPPOTrainer needs an LMPPOConfig, got {type(cfg).__name__}")
        # the critic exists before the skeleton builds the optimizer from param_groups()
        self.critic = ValueModel.from_policy(model).train()
        self.generator = torch.Generator().manual_seed(cfg.seed)  # minibatch order
        super().__init__(cfg, model, tokenizer, reward_funcs, reward_weights)
        if cfg.gradient_checkpointing:  # the critic's body, as the policy's (LMTrainer)
            enable_activation_checkpointing(self.critic.body)

    def networks(self) -> list[nn.Module]:
        return [self.model, self.critic]

    def updates_per_step(self) -> int:
        return self.cfg.num_iterations * self.cfg.num_minibatches

    def param_groups(self) -> list[dict]:
        """The policy's AdamW groups, then the critic's at ``critic_learning_rate``."""
        critic_lr = self.cfg.critic_learning_rate or self.cfg.learning_rate
        critic = [{**g, "lr": critic_lr} for g in adamw_groups(self.critic, self.cfg.weight_decay)]
        return super().param_groups() + critic

    @torch.no_grad()
    def frozen_values(self, rollout: CompletionGroups) -> torch.Tensor:
        """Stage 3: V(s_t) of the critic as it was when the completions were sampled."""
        self.critic.eval()  # backward() puts it back in train mode
        parts = []
        with self.clock("critic_s"):
            for micro in rollout.split(self.cfg.gradient_accumulation_steps):
                with self.amp():
                    parts.append(completion_values(self.critic, micro))
        return torch.cat(parts)

    def step(self, rows: Sequence[dict]) -> tuple[dict, CompletionGroups]:
        """One PPO step on ``prompts_per_step`` dataset rows. Returns (record, rollout)."""
        cfg = self.cfg
        rollout = self.sample(rows)  # 1. num_generations completions of each prompt (1: classic)
        scores, reward_means = self.score(rollout)  # 2. the same reward functions as GRPO
        # 3. fixed during the update: pi_old (PPO always clips against it), pi_ref, V(s_t)
        rollout.add(
            old_logps=self.frozen_logps(rollout),
            ref_logps=self.reference_logps(rollout),
            old_values=self.frozen_values(rollout),
        )
        # 4. per-token rewards (22), GAE over tokens (23), whitened over the whole batch (24)
        mask = rollout.completion_mask
        rewards = token_rewards(
            torch.tensor(scores), rollout.old_logps, rollout.get("ref_logps"), mask, cfg.beta
        )
        advantages, targets = token_gae(rewards, rollout.old_values, mask, cfg.gae_lambda)
        rollout.add(advantages=whiten(advantages, mask), targets=targets, loss_mask=mask)
        updates = []
        for _ in range(cfg.num_iterations):  # 5. epochs over shuffled minibatches of prompts
            for minibatch in rollout.shuffled(cfg.num_minibatches, self.generator):
                updates += self.backward(minibatch)
                grad_norm = self.optimizer_step()
        self.refresh_reference()  # 6
        record = self.record(rollout, scores, reward_means, updates, grad_norm)
        record["kl"] = self.sampled_kl(rollout)
        record["explained_variance"] = explained_variance(rollout.old_values, targets, mask)
        return record, rollout

    def loss(self, micro: CompletionGroups, batch: CompletionGroups) -> tuple[torch.Tensor, dict]:
        """Equation (25) on one micro-batch: its share of the minibatch's loss, and its metrics."""
        cfg = self.cfg
        logps, _ = completion_logps(
            self.model, micro, cfg.temperature, share_prompts=self.share_prompts
        )
        loss, metrics = ppo_lm_loss(
            logps,
            micro.old_logps,
            micro.advantages,
            completion_values(self.critic, micro),
            micro.old_values,
            micro.targets,
            micro.loss_mask,
            epsilon=cfg.epsilon,
            epsilon_high=cfg.epsilon_high,
            value_clip=cfg.value_clip,
            value_coef=cfg.value_coef,
            loss_type=cfg.loss_type,
            max_completion_length=cfg.max_completion_length,
        )
        return loss / cfg.gradient_accumulation_steps, metrics

    def sampled_kl(self, rollout: CompletionGroups) -> float:
        """k3 of the sampling policy to the reference over the kept tokens, as GRPO logs ``kl``."""
        if rollout.get("ref_logps") is None:
            return 0.0
        kl = kl_k3(rollout.old_logps, rollout.ref_logps)
        return masked_mean(kl, rollout.completion_mask).item()
