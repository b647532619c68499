r"""GRPO for causal language models: the step that teaches a model math from a reward.

``LMGRPOTrainer.step`` runs these stages in this order; each is one named function (here, or in
the shared core) whose docstring names its equation. Symbols follow the notebooks.

1. **Sample a group per prompt** (``sample_completions``): G = ``num_generations`` completions of
   each of ``prompts_per_step`` prompts, all at once (one ``generate`` call, or for a small
   model on the CPU the same draws from a loop over its KV cache), in consecutive blocks of G
   (TRL's order). Everything after a completion's first EOS is masked, equation (15).
2. **Score** (``rewards.score_completions``): the weighted sum of the reward functions, called
   as TRL calls them; NaN where every function said ``None`` (cannot score).
3. **Group advantages** (``advantages.group_advantages``): A_i = (r_i - mean) / (std + 1e-4),
   equation (2), shared by every token of completion i; an unscored completion gets 0.
4. **Per-token log-probs** (``completion_logps``), equation (16): log pi_old (only when
   ``num_iterations > 1``; otherwise pi_old is the current policy, detached) and log pi_ref
   (only when ``beta > 0``), both fixed during the update.
5. **The loss and the optimizer step**, ``num_iterations`` times: ``losses.grpo_loss``,
   equations (5)-(9), on each of ``gradient_accumulation_steps`` micro-batches of whole groups,
   backward, gradient-norm clipping, one AdamW step (weight decay spares biases and norm gains,
   as in TRL), the learning-rate schedule.
6. **Reference refresh**: with ``ref_update_every > 0`` the reference becomes a copy of the
   policy every that many steps.

Weights and AdamW state are float32; on a GPU the forward passes run in bf16 / fp16 through
autocast (``device.py``). The training loop, evaluation and checkpoints are in ``lm_train.py``.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Sequence

import torch

from .advantages import group_advantages
from .completions import (
    CompletionGroups,
    sample_completions,
    truncated_fraction,
    uses_sampling_loop,
)
from .device import autocast, grad_scaler, pick_dtype
from .lm_model import enable_activation_checkpointing, eos_token_ids, format_prompt
from .lora import AdapterOff, add_lora
from .losses import grpo_loss, masked_mean
from .math_config import MathConfig
from .prompt_cache import shared_prompt_logits
from .rewards import RewardFunc, reward_functions, reward_stats, score_completions


def completion_logits(model, rollout: CompletionGroups) -> torch.Tensor:
    """Logits [N, C, vocab] at the C positions that predict the completion tokens: one pass over
    prompt + completion for every row, keeping only the last C + 1 positions."""
    G, C = rollout.num_generations, rollout.completion_ids.shape[1]
    input_ids = torch.cat([rollout.prompt_ids.repeat_interleave(G, dim=0),
                           rollout.completion_ids], dim=1)  # fmt: skip
    attention_mask = torch.cat([rollout.prompt_mask.repeat_interleave(G, dim=0),
                                rollout.completion_mask], dim=1)  # fmt: skip
    positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # left padding changes nothing
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                   logits_to_keep=C + 1, use_cache=False).logits  # fmt: skip
    return logits[:, :-1]  # position t predicts completion token t


def completion_logps(
    model, rollout: CompletionGroups, temperature: float = 1.0, with_entropy: bool = False,
    share_prompts: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """Step 4, equation (16): log pi(o_t | q, o_<t) = z[o_t] - logsumexp(z), z = logits / T, for
    each completion token [N, C] (and its entropy, without gradient). ``share_prompts`` takes
    the logits from ``prompt_cache.shared_prompt_logits`` (same numbers, faster).

    ``gather`` minus ``logsumexp``: no second [N, C, vocab] tensor (a full log-softmax) is kept
    for the backward pass. Dividing by the sampling temperature T gives the log-probs of the
    distribution the tokens were drawn from.
    """
    logits = (shared_prompt_logits if share_prompts else completion_logits)(model, rollout)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # >= fp32
    token_logits = logits.gather(-1, rollout.completion_ids.unsqueeze(-1)).squeeze(-1)
    logps = token_logits - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            entropy = torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
    return logps, entropy


# the HF Trainer's names for the parameters it does not decay (transformers 5.24.0,
# ``Trainer.get_decay_parameter_names``): biases and normalization weights
NO_DECAY_NAMES = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")


def decay_parameter_names(model) -> set[str]:
    """The trained parameters AdamW decays: all but biases and normalization gains, by the rule
    TRL's ``GRPOTrainer`` inherits from the HF Trainer (transformers 5.24.0,
    ``Trainer.get_decay_parameter_names`` over ``trainer_pt_utils.get_parameter_names``): a
    parameter is spared when it sits in an ``nn.LayerNorm`` or its lower-cased name matches
    ``NO_DECAY_NAMES``. Decay pulls a weight towards 0; an RMSNorm gain of 0 would silence its
    layer. (``tests/test_config_wiring.py`` holds the rule to the Trainer's.)"""
    norms = [name + "." for name, module in model.named_modules()
             if name and isinstance(module, torch.nn.LayerNorm)]  # fmt: skip
    return {name for name, p in model.named_parameters()
            if p.requires_grad and not name.startswith(tuple(norms))
            and not NO_DECAY_NAMES.search(name.lower())}  # fmt: skip


def adamw_groups(model, weight_decay: float) -> list[dict]:
    """AdamW's two parameter groups, as the HF Trainer builds them: ``weight_decay`` on the
    parameters ``decay_parameter_names`` names, 0 on the other trained ones."""
    decay = decay_parameter_names(model)
    trained = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for name, p in trained if name in decay], "weight_decay": weight_decay},
            {"params": [p for name, p in trained if name not in decay], "weight_decay": 0.0}]  # fmt: skip


class LMGRPOTrainer:
    """Holds the policy, the reference, AdamW and the config; ``step(rows)`` is one GRPO step."""

    def __init__(
        self, cfg: MathConfig, model, tokenizer, reward_funcs: Sequence[RewardFunc] | None = None,
        reward_weights: Sequence[float] | None = None,
    ) -> None:  # fmt: skip
        from transformers import get_scheduler

        if cfg.lora_r:  # only the adapters train (lora.py)
            model = add_lora(model, cfg)
        self.cfg, self.model, self.tokenizer = cfg, model, tokenizer
        self.device = next(model.parameters()).device
        self.dtype = pick_dtype(self.device, cfg.dtype)
        self.reward_funcs, self.reward_weights = reward_functions(
            reward_funcs, reward_weights, cfg.format_weight
        )
        self.eos_ids = eos_token_ids(model, tokenizer)
        # step 1's sampler: a small model on the CPU draws through the loop over its KV cache
        # (the same draws as generate, less overhead per token); anything else, generate
        self.sampler = "loop" if uses_sampling_loop(model) else "generate"
        self.share_prompts = not cfg.gradient_checkpointing  # it turns the KV cache off
        if cfg.gradient_checkpointing:
            enable_activation_checkpointing(model)
        # a frozen copy in the policy's own precision, run under the same autocast: the KL is
        # exactly 0 until the policy moves (a reference cast to bf16 / fp16 would differ from
        # the fp32 policy at once, and beta would pull the policy towards rounded weights)
        # with LoRA the reference is the same network with its adapter off: no copy at all
        self.reference = None
        if cfg.beta > 0:
            self.reference = (AdapterOff(model) if cfg.lora_r
                              else copy.deepcopy(model).requires_grad_(False).eval())  # fmt: skip
        # fused: one kernel for all parameters (TRL's default, adamw_torch_fused, does the same)
        self.optimizer = torch.optim.AdamW(
            adamw_groups(model, cfg.weight_decay), lr=cfg.learning_rate, fused=True
        )
        # linear: the rate falls to 0 at the last optimizer step of max_steps (TRL's default)
        self.scheduler = get_scheduler(cfg.lr_scheduler_type, self.optimizer, num_warmup_steps=0,
                                       num_training_steps=cfg.max_steps * cfg.num_iterations)  # fmt: skip
        self.scaler = grad_scaler(self.device, self.dtype)
        self.steps_done = 0

    def amp(self):
        return autocast(self.device, self.dtype)

    def sample(self, rows: Sequence[dict]) -> CompletionGroups:
        """Step 1 on dataset rows (prompts formatted with ``cfg.prompt_template``)."""
        cfg = self.cfg
        prompts = [format_prompt(r["prompt"], self.tokenizer, cfg.prompt_template) for r in rows]
        return sample_completions(
            self.model, self.tokenizer, rows, prompts, num_generations=cfg.num_generations,
            max_new_tokens=cfg.max_completion_length, temperature=cfg.temperature,
            top_p=cfg.top_p, eos_ids=self.eos_ids, amp=self.amp(), sampler=self.sampler,
        )  # fmt: skip

    @torch.no_grad()
    def fixed_logps(self, model, rollout: CompletionGroups) -> torch.Tensor:
        """Step 4: log-probs that stay fixed during the update (old policy or reference; a LoRA
        run's reference, ``lora.AdapterOff``, is the policy with its adapter disabled)."""
        if isinstance(model, AdapterOff):
            with model.disabled():
                return self.fixed_logps(model.model, rollout)
        parts = []
        for _, micro in rollout.split(self.cfg.gradient_accumulation_steps):
            with self.amp():
                parts.append(completion_logps(model, micro, self.cfg.temperature,
                                              share_prompts=self.share_prompts)[0])  # fmt: skip
        return torch.cat(parts)

    def advantages(
        self, rewards: torch.Tensor, rollout: CompletionGroups
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Step 3: one advantage per completion (equation (1) or (2), ``scale_rewards``) and the
        mask of the tokens the loss counts. ``rft.RFTTrainer`` overrides it."""
        cfg = self.cfg
        advantages = group_advantages(rewards, cfg.num_generations, cfg.scale_rewards)
        return advantages, rollout.completion_mask

    def step(self, rows: Sequence[dict]) -> tuple[dict, CompletionGroups]:
        """One GRPO step on ``prompts_per_step`` dataset rows. Returns (metrics, rollout)."""
        cfg, G = self.cfg, self.cfg.num_generations
        start = time.perf_counter()
        rollout = self.sample(rows)  # 1
        sample_s = time.perf_counter() - start
        # 2. reward functions get the dataset's prompts, as TRL passes them, not the chat text
        rewards, reward_means = score_completions(
            self.reward_funcs, self.reward_weights, [r["prompt"] for r in rollout.rows],
            rollout.completions, rollout.rows,
        )  # fmt: skip
        advantages, mask = self.advantages(torch.tensor(rewards), rollout)  # 3
        advantages = advantages.to(self.device)
        old_logps = self.fixed_logps(self.model, rollout) if cfg.num_iterations > 1 else None  # 4
        ref_logps = self.fixed_logps(self.reference, rollout) if self.reference else None
        num_items = mask.sum()  # tokens in the whole batch: dapo's normaliser
        self.model.train()
        sums = dict.fromkeys(("loss", "kl", "clip_fraction", "entropy"), 0.0)
        for _ in range(cfg.num_iterations):  # 5
            self.optimizer.zero_grad(set_to_none=True)
            for mb, micro in rollout.split(cfg.gradient_accumulation_steps):
                with self.amp():
                    logps, entropy = completion_logps(self.model, micro, cfg.temperature,
                                                      True, self.share_prompts)  # fmt: skip
                loss, metrics = grpo_loss(
                    logps, None if old_logps is None else old_logps[mb],
                    None if ref_logps is None else ref_logps[mb], advantages[mb], mask[mb],
                    beta=cfg.beta, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high,
                    loss_type=cfg.loss_type, max_completion_length=cfg.max_completion_length,
                    num_items_in_batch=num_items, use_bias_correction_kl=cfg.use_bias_correction_kl,
                )  # fmt: skip
                if cfg.loss_type != "dapo":  # dapo already divides by the whole batch's tokens
                    loss = loss / cfg.gradient_accumulation_steps
                self.scaler.scale(loss).backward()
                # metrics: token-weighted means over micro-batches and iterations
                weight = (mask[mb].sum() / num_items.clamp(min=1)).item() / cfg.num_iterations
                sums["loss"] += loss.item() / cfg.num_iterations
                sums["kl"] += weight * metrics["kl"]
                sums["clip_fraction"] += weight * metrics["clip_fraction"]
                sums["entropy"] += weight * masked_mean(entropy, mask[mb]).item()
            self.scaler.unscale_(self.optimizer)
            max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
        self.steps_done += 1
        if self.reference is not None and cfg.ref_update_every:  # 6
            if self.steps_done % cfg.ref_update_every == 0:
                self.reference.load_state_dict(self.model.state_dict())

        step_s = time.perf_counter() - start
        record = {
            "step": self.steps_done,
            **reward_stats(rewards, G),
            **{f"reward/{name}": value for name, value in reward_means.items()},
            **sums,
            "grad_norm": float(grad_norm),
            "learning_rate": self.scheduler.get_last_lr()[0],
            "completion_length": rollout.completion_mask.sum(dim=1).float().mean().item(),
            "truncated_fraction": truncated_fraction(rollout.completion_ids, self.eos_ids),
            "sample_s": round(sample_s, 4),
            "step_s": round(step_s, 4),
            "completions_per_s": len(rollout.completions) / step_s,
        }
        return record, rollout
