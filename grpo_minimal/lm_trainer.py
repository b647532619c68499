r"""What every policy-gradient trainer of a language model shares: the skeleton GRPO and PPO fill.

``LMTrainer`` owns the engineering, so that a subclass's ``step`` reads as its algorithm:

- set-up: the model (with LoRA adapters when ``lora_r > 0``), the frozen reference, the reward
  functions, the end tokens, the sampler, the loss scaler; one AdamW over ``param_groups()`` and
  one learning-rate schedule over ``max_steps * updates_per_step()`` optimizer steps;
- stage 1, ``sample``, and stage 2, ``score``;
- stage 3's frozen passes, ``frozen_logps`` and ``reference_logps`` (equation (16), no gradient);
- stage 5's engineering: ``backward`` (micro-batches, autocast, loss scaling) and
  ``optimizer_step`` (unscale, clip each network's gradient norm, AdamW, the schedule);
- stage 6, ``refresh_reference``, and ``record``: the keys every trainer logs.

A subclass defines ``step`` (the stages in order) and ``loss`` (one micro-batch's loss), and
overrides ``param_groups``, ``networks`` or ``updates_per_step`` where it trains more than the
policy (PPO's critic). The stage numbers are the same in every trainer: 1 sample, 2 score,
3 frozen passes, 4 advantages, 5 update, 6 reference refresh.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Sequence

import torch

from .completions import (
    CompletionGroups,
    sample_completions,
    truncated_fraction,
    uses_sampling_loop,
)
from .device import autocast, grad_scaler, pick_dtype
from .lm_model import enable_activation_checkpointing, eos_token_ids, format_prompt
from .lora import add_lora, check_lora, lora_config
from .math_config import MathConfig
from .prompt_cache import shared_prompt_logits
from .rewards import RewardFunc, reward_functions, reward_stats, score_completions


def completion_logits(model, rollout: CompletionGroups) -> torch.Tensor:
    """Logits [N, C, vocab] at the C positions that predict the completion tokens: one pass over
    prompt + completion for every row, keeping only the last C + 1 positions."""
    G, C = rollout.num_generations, rollout.completion_ids.shape[1]
    input_ids = torch.cat(
        [rollout.prompt_ids.repeat_interleave(G, dim=0), rollout.completion_ids], dim=1
    )
    attention_mask = torch.cat(
        [rollout.prompt_mask.repeat_interleave(G, dim=0), rollout.completion_mask], dim=1
    )
    positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # left padding changes nothing
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions,
        logits_to_keep=C + 1,
        use_cache=False,
        **rollout.row_inputs(),  # a VLM's image, once per row (as TRL passes it)
    ).logits
    return logits[:, :-1]  # position t predicts completion token t


def completion_logps(
    model,
    rollout: CompletionGroups,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Equation (16): log pi(o_t | q, o_<t) = z[o_t] - logsumexp(z), z = logits / T, for each
    completion token [N, C] (and its entropy, without gradient). ``share_prompts`` takes the
    logits from ``prompt_cache.shared_prompt_logits`` (same numbers, faster).

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


def adamw_groups(model, weight_decay: float) -> list[dict]:
    """AdamW's two parameter groups: ``weight_decay`` on the trained matrices and embeddings
    (``p.dim() >= 2``, nanoGPT's rule), 0 on biases and normalization gains. Decay pulls a weight
    towards 0, and an RMSNorm gain of 0 would silence its layer. On the course's models this is
    the HF Trainer's rule by names (``tests/test_config_wiring.py``)."""
    trained = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in trained if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in trained if p.dim() < 2], "weight_decay": 0.0},
    ]


Update = tuple[float, torch.Tensor, dict[str, float]]
"""One micro-batch's part of an update, as ``backward`` returns it: (its loss, the tokens it
counts, its metrics)."""


class LMTrainer:
    """The policy, the reference, AdamW, the schedule and the config; a subclass's ``step(rows)``
    is one step of its algorithm."""

    name = "LM"

    def __init__(
        self,
        cfg: MathConfig,
        model,
        tokenizer,
        reward_funcs: Sequence[RewardFunc] | None = None,
        reward_weights: Sequence[float] | None = None,
    ) -> None:
        from transformers import get_scheduler

        if cfg.lora_r:  # only the adapters train (lora.py)
            check_lora(cfg, model)
            model = add_lora(
                model,
                lora_config(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules),
            )
        self.cfg, self.model, self.tokenizer = cfg, model, tokenizer
        self.device = next(model.parameters()).device
        self.dtype = pick_dtype(self.device, cfg.dtype)
        self.reward_funcs, self.reward_weights = reward_functions(
            reward_funcs, reward_weights, cfg.format_weight
        )
        self.eos_ids = eos_token_ids(model, tokenizer)
        # a small model on the CPU samples through the loop over its KV cache (the same draws as
        # generate, less overhead per token); anything else through generate
        self.sampler = "loop" if uses_sampling_loop(model) else "generate"
        self.share_prompts = not cfg.gradient_checkpointing  # it turns the KV cache off
        if cfg.gradient_checkpointing:
            enable_activation_checkpointing(model)
        # a frozen copy in the policy's own precision, run under the same autocast: the KL is
        # exactly 0 until the policy moves. With LoRA there is no copy: the reference is the
        # policy with its adapter off (reference_logps)
        self.reference = None
        if cfg.beta > 0 and not cfg.lora_r:
            self.reference = copy.deepcopy(model).requires_grad_(False).eval()
        # fused: one kernel for all parameters (TRL's default, adamw_torch_fused, does the same)
        self.optimizer = torch.optim.AdamW(self.param_groups(), lr=cfg.learning_rate, fused=True)
        # linear: the rate falls to 0 at the last optimizer step of the run (TRL's default)
        self.scheduler = get_scheduler(
            cfg.lr_scheduler_type,
            self.optimizer,
            num_warmup_steps=0,
            num_training_steps=cfg.max_steps * self.updates_per_step(),
        )
        self.scaler = grad_scaler(self.device, self.dtype)
        self.steps_done = 0
        self.timings: dict[str, float] = {}
        self.step_started = time.perf_counter()

    # What a subclass defines: ``step``, and ``loss(micro, batch)`` for ``backward``.
    def step(self, rows: Sequence[dict]) -> tuple[dict, CompletionGroups]:
        raise NotImplementedError

    def loss(self, micro: CompletionGroups, batch: CompletionGroups) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    # What a subclass trains: the policy alone here; PPO adds its critic.
    def networks(self) -> list[torch.nn.Module]:
        return [self.model]

    def param_groups(self) -> list[dict]:
        return adamw_groups(self.model, self.cfg.weight_decay)

    def updates_per_step(self) -> int:
        return self.cfg.num_iterations

    def amp(self):
        return autocast(self.device, self.dtype)

    @contextlib.contextmanager
    def clock(self, name: str):
        """Add the seconds the block takes to this step's ``timings[name]`` (its record)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def sample(self, rows: Sequence[dict]) -> CompletionGroups:
        """Stage 1 on dataset rows (prompts formatted with ``cfg.prompt_template``). A step's
        time is counted from here."""
        self.step_started = start = time.perf_counter()
        cfg = self.cfg
        prompts = [format_prompt(r["prompt"], self.tokenizer, cfg.prompt_template) for r in rows]
        rollout = sample_completions(
            self.model,
            self.tokenizer,
            rows,
            prompts,
            num_generations=cfg.num_generations,
            max_new_tokens=cfg.max_completion_length,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            eos_ids=self.eos_ids,
            amp=self.amp(),
            sampler=self.sampler,
        )
        self.timings = {"sample_s": time.perf_counter() - start}
        return rollout

    def score(self, rollout: CompletionGroups) -> tuple[list[float], dict[str, float]]:
        """Stage 2: the weighted reward of each completion and each function's mean. The reward
        functions get the dataset's prompts, as TRL passes them, not the chat text."""
        prompts = [row["prompt"] for row in rollout.rows]
        return score_completions(
            self.reward_funcs, self.reward_weights, prompts, rollout.completions, rollout.rows
        )

    @torch.no_grad()
    def frozen_logps(self, rollout: CompletionGroups, model=None) -> torch.Tensor:
        """Stage 3: log-probs (16) that stay fixed during the update, of ``model`` (the policy
        as it sampled, pi_old, by default), one micro-batch at a time."""
        model = self.model if model is None else model
        parts = []
        for micro in rollout.split(self.cfg.gradient_accumulation_steps):
            with self.amp():
                logps, _ = completion_logps(
                    model, micro, self.cfg.temperature, share_prompts=self.share_prompts
                )
            parts.append(logps)
        return torch.cat(parts)

    def reference_logps(self, rollout: CompletionGroups) -> torch.Tensor | None:
        """Stage 3: log pi_ref, or None when ``beta`` is 0 (no reference). With LoRA the
        reference is the policy with its adapter disabled (peft's ``disable_adapter``)."""
        if not self.cfg.beta > 0:
            return None
        if self.cfg.lora_r:
            with self.model.disable_adapter():
                return self.frozen_logps(rollout, self.model)
        return self.frozen_logps(rollout, self.reference)

    def backward(self, batch: CompletionGroups) -> list[Update]:
        """Stage 5's first half: every network in train mode, gradients zeroed, then the
        gradient of the subclass's ``loss(micro, batch)`` (the micro-batch's share of the batch's
        loss, and its metrics) over ``batch``, one micro-batch of whole groups at a time
        (``gradient_accumulation_steps``), under autocast, the loss scaled for fp16. Returns each
        micro-batch's (loss, tokens, metrics) for ``record``."""
        for network in self.networks():
            network.train()
        self.optimizer.zero_grad(set_to_none=True)
        done = []
        with self.clock("update_s"):
            for micro in batch.split(self.cfg.gradient_accumulation_steps):
                with self.amp():
                    value, metrics = self.loss(micro, batch)
                self.scaler.scale(value).backward()
                done.append((value.item(), micro.loss_mask.sum(), metrics))
        return done

    def optimizer_step(self) -> float:
        """Stage 5's second half: unscale (fp16), clip each network's gradient norm apart (a
        fresh critic's large gradients must not shrink the policy's step), one AdamW step, the
        schedule. Returns the policy's gradient norm before clipping."""
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else float("inf")
        with self.clock("update_s"):
            self.scaler.unscale_(self.optimizer)
            norms = [
                torch.nn.utils.clip_grad_norm_(n.parameters(), max_norm) for n in self.networks()
            ]
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
        return float(norms[0])

    def refresh_reference(self) -> None:
        """Stage 6: count the step; every ``ref_update_every`` steps the reference becomes a copy
        of the policy (0: never)."""
        self.steps_done += 1
        every = self.cfg.ref_update_every
        if self.reference is not None and every and self.steps_done % every == 0:
            self.reference.load_state_dict(self.model.state_dict())

    def record(
        self,
        rollout: CompletionGroups,
        rewards: list[float],
        reward_means: dict[str, float],
        updates: list[Update],
        grad_norm: float,
    ) -> dict:
        """The keys every trainer logs. ``loss`` is the loss each update minimised, averaged
        over the step's updates; every other metric is a mean over the step's updates in which
        each micro-batch counts by its tokens (``loss_mask``)."""
        tokens = rollout.loss_mask.sum().clamp(min=1)
        means = {"loss": 0.0}
        for loss, micro_tokens, metrics in updates:
            means["loss"] += loss / self.updates_per_step()
            weight = (micro_tokens / tokens).item() / self.cfg.num_iterations
            for key, value in metrics.items():
                means[key] = means.get(key, 0.0) + weight * value
        step_s = time.perf_counter() - self.step_started
        timings, self.timings = self.timings, {}  # the next step's clock starts empty
        return {
            "step": self.steps_done,
            **reward_stats(rewards, rollout.num_generations),
            **{f"reward/{name}": value for name, value in reward_means.items()},
            **means,
            "grad_norm": grad_norm,
            "learning_rate": self.scheduler.get_last_lr()[0],
            "completion_length": rollout.completion_mask.sum(dim=1).float().mean().item(),
            "truncated_fraction": truncated_fraction(rollout.completion_ids, self.eos_ids),
            **{name: round(seconds, 4) for name, seconds in timings.items()},
            "step_s": round(step_s, 4),
            "completions_per_s": len(rollout.completions) / step_s,
        }
