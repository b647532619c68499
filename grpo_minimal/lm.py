r"""GRPO for causal language models: the step that teaches a model math from a reward.

Symbols follow the notebooks (equations (1)-(9) live in ``advantages.py`` and ``losses.py``).
A step, top to bottom (``LMGRPOTrainer.step``):

1. **Sample groups.** ``prompts_per_step`` prompts, left-padded, each encoded once and its
   key/value cache copied G = ``num_generations`` times (``prefill_prompts``: the G completions
   of a group share their prompt), then all prompts x G sampled in *one* ``generate`` call, in
   consecutive blocks of G (TRL's order). Everything after a completion's first EOS is masked::

       completion_mask[i, t] = 1  if t <= first EOS of completion i (or no EOS yet)      (15)

2. **Score.** Each reward function gets the completions and the dataset columns
   (``reward(completions=..., answer=..., prompts=...)``, TRL's calling convention); the
   weighted sum is the reward r_i. A ``None`` reward means "cannot score": that completion is
   left out of its group's mean and std and gets advantage 0 (TRL's rule).
3. **Advantages.** A_i = (r_i - mean(group)) / (std(group) + 1e-4), equation (2), shared by
   every token of completion i.
4. **Fixed log-probs.** log pi_old (only when ``num_iterations > 1``: with one update per batch
   pi_old is the current policy, detached) and log pi_ref (only when ``beta > 0``), per token::

       log pi(o_t | q, o_<t) = z[o_t] - logsumexp(z),   z = logits / temperature       (16)

   by ``gather``, from the logits of the completion positions only; the prompt is again run
   once per group and its cache shared by the G completions (same numbers and gradients as
   running every row in full, fewer operations).
5. **Update.** ``num_iterations`` times: the GRPO loss (``grpo_loss``, equations (5)-(9)) on
   each of ``gradient_accumulation_steps`` micro-batches, backward, clip the gradient norm,
   one AdamW step (learning rate decayed linearly to 0 over the run by default, as in TRL).
6. **Reference refresh.** With ``ref_update_every > 0`` the reference becomes a copy of the
   policy every that many steps.

Weights and AdamW state are float32; on a GPU the forward passes run in bf16 / fp16 through
autocast (``device.py``). ``train_math`` runs steps with a progress bar, held-out greedy accuracy
before and after, metrics per step and atomic Hugging Face checkpoints.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .advantages import group_advantages
from .config import MathConfig
from .control import seed_everything
from .device import autocast, grad_scaler, peak_memory_mb, pick_device, pick_dtype
from .losses import grpo_loss
from .rewards import R1_SYSTEM_PROMPT, accuracy_reward, format_reward

TINY_MODEL = Path(__file__).resolve().parent.parent / "data" / "tiny_math_lm"
"""The small model the course ships (built by ``data/make_tiny_model.py``)."""

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

RewardFunc = Callable[..., Sequence[float | None]]


# --- model, tokenizer and prompts ----------------------------------------------------------------


def resolve_model_name(name: str) -> str:
    """``tiny`` is the shipped model folder; anything else is a local folder or a Hub id."""
    return str(TINY_MODEL) if name == "tiny" else name


@contextlib.contextmanager
def quiet_transformers():
    """Hide transformers' loading / saving progress bars (they flood notebooks and logs)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_model(name: str, device: torch.device):
    """A causal LM (float32 weights, dropout off) and its tokenizer, ready for left padding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = resolve_model_name(name)
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32).to(device)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    disable_dropout(model)
    return model, tokenizer


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout would make log pi differ between two passes over the same tokens (ratio != 1)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every token that ends a completion: the tokenizer's EOS and the model's (chat models
    often have two, e.g. ``<|im_end|>`` and ``<|endoftext|>``)."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured is not None:
        ids.update(configured)
    ids.discard(None)
    if not ids:
        raise ValueError("the tokenizer has no eos_token: completions would never end")
    return sorted(ids)


def format_prompt(question: str, tokenizer, template: str) -> str:
    """The text the model sees: the prompt as it is, or a chat prompt asking for a format."""
    if template == "plain":
        return question
    if template == "r1":
        messages = [
            {"role": "system", "content": R1_SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ]
    elif template == "boxed":
        messages = [{"role": "user", "content": f"{question}\n{BOXED_INSTRUCTION}"}]
    else:
        raise ValueError(f"prompt_template must be 'plain', 'r1' or 'boxed', got {template!r}")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"prompt_template={template!r} needs a tokenizer with a chat template; "
            "use prompt_template='plain' for a base model such as the tiny one"
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def check_rows(rows: Sequence[dict], name: str, needs_answer: bool = False) -> None:
    """A data set must have rows, each with a string ``prompt`` (and an ``answer`` when the
    accuracy reward scores it)."""
    if len(rows) == 0:
        raise ValueError(f"the {name} dataset is empty: it needs at least one row with a prompt")
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ValueError(f"{name} row {index} needs a string 'prompt' field, got {row!r:.120}")
        if needs_answer and row.get("answer") is None:
            raise ValueError(
                f"{name} row {index} needs an 'answer' field (the gold the accuracy reward "
                f"compares with), got {row!r:.120}"
            )


def check_prompt_lengths(prompts: Sequence[str], tokenizer, model, max_new_tokens: int) -> None:
    """Refuse prompts that leave no room for the completion in the model's context."""
    context = getattr(model.config, "max_position_embeddings", None)
    if context is None:
        return
    lengths = [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
    for index, length in enumerate(lengths):
        if length + max_new_tokens > context:
            raise ValueError(
                f"prompt {index} is {length} tokens long; with max_completion_length="
                f"{max_new_tokens} that exceeds the model's context of {context} tokens "
                f"(prompt starts {prompts[index][:60]!r}). Shorten the prompt or lower "
                "max_completion_length."
            )


# --- 1. sampling ---------------------------------------------------------------------------------


@dataclass
class Rollout:
    """P distinct prompts x G completions = N rows; completion i answers prompt i // G.

    Prompts are stored once (left-padded): the G completions of a group share their prompt, and
    ``prefill_prompts`` encodes it once for all of them. Completions are right-padded.
    """

    prompt_ids: torch.Tensor  # [P, Lp], one row per distinct prompt
    prompt_mask: torch.Tensor  # [P, Lp]
    completion_ids: torch.Tensor  # [N, C]
    completion_mask: torch.Tensor  # [N, C], equation (15)
    prompts: list[str] = field(default_factory=list)  # N prompt texts (each repeated G times)
    completions: list[str] = field(default_factory=list)  # N decoded completions
    rows: list[dict] = field(default_factory=list)  # N dataset rows, for the reward functions

    @property
    def num_generations(self) -> int:
        return self.completion_ids.shape[0] // self.prompt_ids.shape[0]

    @property
    def lengths(self) -> torch.Tensor:
        """Completion lengths in tokens, EOS included."""
        return self.completion_mask.sum(dim=1)

    def groups(self, start: int, stop: int) -> Rollout:
        """The prompts ``start:stop`` and their completions (a micro-batch of whole groups)."""
        G = self.num_generations
        rows = slice(start * G, stop * G)
        return Rollout(
            self.prompt_ids[start:stop], self.prompt_mask[start:stop],
            self.completion_ids[rows], self.completion_mask[rows],
            self.prompts[rows], self.completions[rows], self.rows[rows],
        )  # fmt: skip


def mask_after_eos(completion_ids: torch.Tensor, eos_ids: Sequence[int]) -> torch.Tensor:
    """Equation (15): 1 up to and including the first EOS of each row, 0 after it."""
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids), device=completion_ids.device))
    seen_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0  # an EOS earlier in the row
    return (~seen_before).long()


def prefill_prompts(model, prompt_ids, prompt_mask, num_generations: int):
    """Encode each distinct prompt once and copy its key/value cache G times.

    The G completions of a group share their prompt, so its forward pass is done once instead
    of G times (TRL runs it for every completion). Returns the cache, ready to continue with
    the completions (differentiable: gradients flow back through the copies into the single
    prompt pass), and the logits at the last prompt position, one row per completion.
    Positions count real tokens only, as ``generate`` does, so left padding changes nothing.
    """
    positions = (prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
    out = model(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    cache = out.past_key_values
    cache.batch_repeat_interleave(num_generations)
    return cache, out.logits[:, -1:].repeat_interleave(num_generations, dim=0)


@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    rows: Sequence[dict],
    prompts: Sequence[str],
    *,
    num_generations: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    do_sample: bool = True,
    eos_ids: Sequence[int] | None = None,
    amp=None,
) -> Rollout:
    """Step 1: G completions for each prompt, all in one batched ``generate`` call.

    The prompts (all but their last token) are encoded once each and their cache copied G
    times (``prefill_prompts``); ``generate`` continues from that cache for all P x G rows.
    """
    G = num_generations
    device = next(model.parameters()).device
    eos_ids = list(eos_ids or eos_token_ids(model, tokenizer))
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    prompt_ids, prompt_mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    # explicit values: a chat model's generation_config (top_k=20, repetition_penalty=1.1, ...)
    # must not change the distribution we compute log-probs for
    sampling = {"temperature": temperature, "top_p": top_p, "top_k": 0} if do_sample else {}
    was_training = model.training
    model.eval()
    with amp if amp is not None else contextlib.nullcontext():
        cache = None
        if G > 1 and prompt_ids.shape[1] > 1:
            cache, _ = prefill_prompts(model, prompt_ids[:, :-1], prompt_mask[:, :-1], G)
        output = model.generate(
            input_ids=prompt_ids.repeat_interleave(G, dim=0),
            attention_mask=prompt_mask.repeat_interleave(G, dim=0),
            past_key_values=cache,
            do_sample=do_sample,
            repetition_penalty=1.0,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=eos_ids,
            **sampling,
        )
    model.train(was_training)
    completion_ids = output[:, prompt_ids.shape[1] :]
    completion_mask = mask_after_eos(completion_ids, eos_ids)
    completion_ids = completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id)
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        prompts=[p for p in prompts for _ in range(G)],
        completions=tokenizer.batch_decode(completion_ids, skip_special_tokens=True),
        rows=[r for r in rows for _ in range(G)],
    )


# --- 2-3. rewards and advantages -----------------------------------------------------------------


def _reward_name(func) -> str:
    return getattr(func, "__name__", type(func).__name__)


def _call_reward(func, prompts, completions, rows) -> Sequence:
    columns = {key: [row.get(key) for row in rows] for key in rows[0] if key != "prompt"}
    return func(prompts=prompts, completions=completions, **columns)


def score_completions(
    reward_funcs: Sequence[RewardFunc],
    reward_weights: Sequence[float],
    prompts: Sequence[str],
    completions: Sequence[str],
    rows: Sequence[dict],
) -> tuple[torch.Tensor, dict[str, float]]:
    """Step 2: the weighted reward of every completion, NaN where every function said ``None``.

    Each function is called as TRL calls it: ``func(prompts=..., completions=..., **columns)``,
    where ``prompts`` are the dataset's prompts (not the chat-formatted text the model saw) and
    ``columns`` every other field of the dataset rows (e.g. ``answer``).

    Each function is called once on the whole batch. A function that raises is called again on
    one completion at a time to name the completion that breaks it; returning the wrong number
    of values, NaN, infinity or a non-number is an error naming the function and the index.
    Returns the rewards [N] and the mean of each function (over the values it gave).
    """
    n = len(completions)
    per_func = torch.full((n, len(reward_funcs)), float("nan"))
    means: dict[str, float] = {}
    for j, func in enumerate(reward_funcs):
        name = _reward_name(func)
        try:
            values = _call_reward(func, prompts, completions, rows)
        except Exception as err:
            index = _first_failing_completion(func, prompts, completions, rows)
            where = "" if index is None else f"on completion {index} ({completions[index]!r:.80})"
            raise RuntimeError(f"reward function {name!r} raised {where}: {err!r}") from err
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise ValueError(
                f"reward function {name!r} returned {values!r:.80} for {n} completions; "
                "it must return a list with one reward (a number, or None) per completion"
            )
        values = list(values)
        if len(values) != n:
            raise ValueError(
                f"reward function {name!r} returned {len(values)} values for {n} completions; "
                "it must return one reward (a number, or None) per completion"
            )
        for i, value in enumerate(values):
            if value is None:
                continue  # cannot score this one: ignored, as in TRL
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                try:
                    value = float(value)  # numpy and torch scalars
                except (TypeError, ValueError):
                    raise ValueError(
                        f"reward function {name!r} returned {value!r} for completion {i}; "
                        "rewards must be numbers (or None to skip a completion)"
                    ) from None
            if not math.isfinite(value):
                raise ValueError(
                    f"reward function {name!r} returned {value} for completion {i} "
                    f"({completions[i]!r:.80}); rewards must be finite (use None to skip)"
                )
            per_func[i, j] = float(value)
        scored = per_func[:, j][~torch.isnan(per_func[:, j])]
        means[name] = scored.mean().item() if scored.numel() else float("nan")
    weights = torch.tensor(list(reward_weights), dtype=torch.float32)
    rewards = torch.nansum(per_func * weights, dim=1)
    rewards[torch.isnan(per_func).all(dim=1)] = float("nan")
    return rewards, means


def _first_failing_completion(func, prompts, completions, rows) -> int | None:
    for i in range(len(completions)):
        try:
            _call_reward(func, prompts[i : i + 1], completions[i : i + 1], rows[i : i + 1])
        except Exception:
            return i
    return None


def advantages_from_rewards(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group"
) -> torch.Tensor:
    """Step 3: equation (2) via ``group_advantages``; NaN (unscored) rewards get advantage 0 and
    are left out of their group's mean and std (TRL's nan-aware rule)."""
    missing = torch.isnan(rewards)
    if not missing.any():
        return group_advantages(rewards, num_generations, scale_rewards)
    grouped = rewards.view(-1, num_generations)
    valid = ~torch.isnan(grouped)
    count = valid.sum(dim=1, keepdim=True)
    mean = torch.nansum(grouped, dim=1, keepdim=True) / count
    advantages = grouped - mean
    if scale_rewards == "group":
        var = torch.nansum((grouped - mean) ** 2, dim=1, keepdim=True) / (count - 1)
        advantages = advantages / (var.sqrt() + 1e-4)
    elif scale_rewards == "batch":
        flat = rewards[~missing]
        advantages = advantages / (flat.std() + 1e-4)
    return torch.nan_to_num(advantages.reshape(-1), nan=0.0, posinf=0.0, neginf=0.0)


def reward_stats(rewards: torch.Tensor, num_generations: int) -> dict[str, float]:
    """Mean and std of the scored rewards, and the fraction of groups whose rewards are all
    equal (zero std: advantages 0, nothing to learn from that prompt)."""
    scored = rewards[~torch.isnan(rewards)]
    zero_std = [
        group[~torch.isnan(group)].numel() < 2 or group[~torch.isnan(group)].std().item() < 1e-6
        for group in rewards.view(-1, num_generations)
    ]
    return {
        "reward_mean": scored.mean().item() if scored.numel() else float("nan"),
        "reward_std": scored.std().item() if scored.numel() > 1 else 0.0,
        "frac_zero_std": sum(zero_std) / len(zero_std),
        "unscored": int(torch.isnan(rewards).sum()),
    }


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return ((values * mask).sum() / mask.sum().clamp(min=1)).item()


# --- 4. per-token log-probs ----------------------------------------------------------------------


def completion_logits(model, rollout: Rollout, share_prompts: bool = True) -> torch.Tensor:
    """Logits [N, C, vocab] at the C positions that predict the completion tokens.

    ``share_prompts``: encode each prompt once (``prefill_prompts``), then run the completion
    tokens of all N rows from the copied cache; the logits at the last prompt position predict
    completion token 0. Otherwise one pass over prompt + completion for every row, keeping only
    the last C + 1 positions (``logits_to_keep``): simpler, and the only way when activation
    checkpointing is on (it turns caching off). Both give the same numbers (tested).
    """
    G, C = rollout.num_generations, rollout.completion_ids.shape[1]
    prompt_mask = rollout.prompt_mask.repeat_interleave(G, dim=0)
    if not share_prompts:
        input_ids = torch.cat([rollout.prompt_ids.repeat_interleave(G, dim=0),
                               rollout.completion_ids], dim=1)  # fmt: skip
        attention_mask = torch.cat([prompt_mask, rollout.completion_mask], dim=1)
        positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                       logits_to_keep=C + 1, use_cache=False).logits  # fmt: skip
        return logits[:, :-1]  # position t predicts completion token t
    cache, first = prefill_prompts(model, rollout.prompt_ids, rollout.prompt_mask, G)
    if C == 1:
        return first
    attention_mask = torch.cat([prompt_mask, rollout.completion_mask[:, :-1]], dim=1)
    start = prompt_mask.sum(dim=1, keepdim=True)  # positions go on after the real prompt tokens
    positions = start + torch.arange(C - 1, device=start.device)
    rest = model(input_ids=rollout.completion_ids[:, :-1], attention_mask=attention_mask,
                 position_ids=positions, past_key_values=cache, use_cache=True).logits  # fmt: skip
    return torch.cat([first, rest], dim=1)


def completion_logps(
    model,
    rollout: Rollout,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Equation (16): log pi of each completion token [N, C] (and its entropy, no gradient).

    The log-prob is ``gather`` minus ``logsumexp``: no second [N, C, vocab] tensor (a full
    log-softmax) is kept for the backward pass. Logits are divided by the sampling temperature,
    so these are the log-probs of the distribution the tokens were drawn from.
    """
    logits = completion_logits(model, rollout, share_prompts)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # >= fp32
    token_logits = logits.gather(-1, rollout.completion_ids.unsqueeze(-1)).squeeze(-1)
    logps = token_logits - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            entropy = torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
    return logps, entropy


# --- the trainer ---------------------------------------------------------------------------------


class LMGRPOTrainer:
    """Holds the policy, the reference, AdamW and the config; ``step(rows)`` is one GRPO step."""

    def __init__(
        self,
        cfg: MathConfig,
        model,
        tokenizer,
        reward_funcs: Sequence[RewardFunc] | None = None,
        reward_weights: Sequence[float] | None = None,
    ) -> None:
        self.cfg = cfg
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        self.dtype = pick_dtype(self.device, cfg.dtype)
        if reward_funcs is None:
            reward_funcs = [accuracy_reward] + ([format_reward] if cfg.format_weight > 0 else [])
            reward_weights = [1.0] + ([cfg.format_weight] if cfg.format_weight > 0 else [])
        self.reward_funcs = list(reward_funcs)
        self.reward_weights = list(reward_weights or [1.0] * len(self.reward_funcs))
        if len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(
                f"{len(self.reward_funcs)} reward functions but {len(self.reward_weights)} weights"
            )
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.share_prompts = not cfg.gradient_checkpointing  # it turns the KV cache off
        if cfg.gradient_checkpointing:  # renamed activation checkpointing in transformers 5
            enable = getattr(model, "activation_checkpointing_enable", None)
            (enable or model.gradient_checkpointing_enable)()
        # a frozen copy in the policy's own precision, run under the same autocast: the KL is
        # exactly 0 until the policy moves (a reference cast to bf16 / fp16 would differ from
        # the fp32 policy at once, and beta would pull the policy towards rounded weights)
        self.reference = copy.deepcopy(model).requires_grad_(False).eval() if cfg.beta > 0 else None
        # fused: one kernel for all parameters (TRL's default, adamw_torch_fused, does the same)
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay, fused=True
        )
        # linear: the rate falls to 0 at the last optimizer step of max_steps (TRL's default)
        total = cfg.max_steps * cfg.num_iterations
        linear = cfg.lr_scheduler_type == "linear"
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda k: max(0.0, 1 - k / total) if linear else 1.0
        )
        self.scaler = grad_scaler(self.device, self.dtype)
        self.steps_done = 0

    def amp(self):
        return autocast(self.device, self.dtype)

    def sample(self, rows: Sequence[dict]) -> Rollout:
        """Step 1 on dataset rows (prompts formatted with ``cfg.prompt_template``)."""
        cfg = self.cfg
        prompts = [format_prompt(r["prompt"], self.tokenizer, cfg.prompt_template) for r in rows]
        return sample_completions(
            self.model, self.tokenizer, rows, prompts, num_generations=cfg.num_generations,
            max_new_tokens=cfg.max_completion_length, temperature=cfg.temperature,
            top_p=cfg.top_p, eos_ids=self.eos_ids, amp=self.amp(),
        )  # fmt: skip

    def micro_batches(self, rollout: Rollout) -> list[tuple[slice, Rollout]]:
        """``gradient_accumulation_steps`` micro-batches of whole groups: (rows, micro-rollout)."""
        G, prompts = rollout.num_generations, rollout.prompt_ids.shape[0]
        accumulation = self.cfg.gradient_accumulation_steps
        if prompts % accumulation:  # unequal micro-batches would weight the loss unevenly
            raise ValueError(
                f"gradient_accumulation_steps={accumulation} must divide the number of prompts "
                f"in a step, got {prompts} prompts"
            )
        size = prompts // accumulation
        return [(slice(start * G, (start + size) * G), rollout.groups(start, start + size))
                for start in range(0, prompts, size)]  # fmt: skip

    @torch.no_grad()
    def fixed_logps(self, model, rollout: Rollout) -> torch.Tensor:
        """Step 4: log-probs that stay fixed during the update (old policy or reference)."""
        parts = []
        for _, micro in self.micro_batches(rollout):
            with self.amp():
                logps, _ = completion_logps(model, micro, self.cfg.temperature,
                                            share_prompts=self.share_prompts)  # fmt: skip
            parts.append(logps)
        return torch.cat(parts)

    def step(self, rows: Sequence[dict]) -> tuple[dict, Rollout]:
        """One GRPO step on ``prompts_per_step`` dataset rows. Returns (metrics, rollout)."""
        cfg, G = self.cfg, self.cfg.num_generations
        start = time.perf_counter()
        # 1. sample G completions per prompt, one generate call
        rollout = self.sample(rows)
        sample_s = time.perf_counter() - start
        # 2. rewards (NaN = unscored), 3. group-relative advantages
        # reward functions get the dataset's prompts, as TRL passes them, not the chat text
        rewards, reward_means = score_completions(
            self.reward_funcs, self.reward_weights, [r["prompt"] for r in rollout.rows],
            rollout.completions, rollout.rows,
        )  # fmt: skip
        advantages = advantages_from_rewards(rewards, G, cfg.scale_rewards).to(self.device)
        # 4. log-probs held fixed during the update
        old_logps = self.fixed_logps(self.model, rollout) if cfg.num_iterations > 1 else None
        ref_logps = self.fixed_logps(self.reference, rollout) if self.reference else None
        # 5. num_iterations optimizer steps, each over gradient_accumulation_steps micro-batches
        mask = rollout.completion_mask
        num_items = mask.sum()  # tokens in the whole batch: dapo's normaliser
        self.model.train()
        sums = dict.fromkeys(("loss", "kl", "clip_fraction", "entropy"), 0.0)
        for _ in range(cfg.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for mb, micro in self.micro_batches(rollout):
                with self.amp():
                    logps, entropy = completion_logps(self.model, micro, cfg.temperature,
                                                      True, self.share_prompts)  # fmt: skip
                loss, metrics = grpo_loss(
                    logps,
                    None if old_logps is None else old_logps[mb],
                    None if ref_logps is None else ref_logps[mb],
                    advantages[mb],
                    mask[mb],
                    beta=cfg.beta,
                    epsilon=cfg.epsilon,
                    epsilon_high=cfg.epsilon_high,
                    loss_type=cfg.loss_type,
                    max_completion_length=cfg.max_completion_length,
                    num_items_in_batch=num_items,
                    use_bias_correction_kl=cfg.use_bias_correction_kl,
                )
                if cfg.loss_type != "dapo":  # dapo already divides by the whole batch's tokens
                    loss = loss / cfg.gradient_accumulation_steps
                self.scaler.scale(loss).backward()
                # metrics: token-weighted means over micro-batches and iterations
                weight = (mask[mb].sum() / num_items.clamp(min=1)).item() / cfg.num_iterations
                sums["loss"] += loss.item() / cfg.num_iterations
                sums["kl"] += weight * metrics["kl"]
                sums["clip_fraction"] += weight * metrics["clip_fraction"]
                sums["entropy"] += weight * masked_mean(entropy, mask[mb])
            self.scaler.unscale_(self.optimizer)
            max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
        self.steps_done += 1
        # 6. refresh the reference every ref_update_every steps
        if self.reference is not None and cfg.ref_update_every:
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
            "completion_length": rollout.lengths.float().mean().item(),
            "sample_s": round(sample_s, 4),
            "step_s": round(step_s, 4),
            "completions_per_s": len(rollout.completions) / step_s,
        }
        return record, rollout

    def evaluate(self, rows: Sequence[dict], batch_size: int = 256) -> tuple[float, list[str]]:
        """Greedy accuracy of the policy on ``rows`` (see ``evaluate_accuracy``)."""
        return evaluate_accuracy(self.model, self.tokenizer, rows, self.cfg, batch_size)


@torch.no_grad()
def evaluate_accuracy(
    model, tokenizer, rows: Sequence[dict], cfg: MathConfig, batch_size: int = 256
) -> tuple[float, list[str]]:
    """Fraction of ``rows`` whose greedy completion is correct (``accuracy_reward``), and the
    completions. Prompts are formatted and cut as in training (``cfg``)."""
    check_rows(rows, "evaluation", needs_answer=True)
    device = next(model.parameters()).device
    amp = autocast(device, pick_dtype(device, cfg.dtype))
    eos_ids = eos_token_ids(model, tokenizer)
    completions: list[str] = []
    correct = 0.0
    for start in range(0, len(rows), batch_size):
        chunk = list(rows[start : start + batch_size])
        prompts = [format_prompt(r["prompt"], tokenizer, cfg.prompt_template) for r in chunk]
        check_prompt_lengths(prompts, tokenizer, model, cfg.max_completion_length)
        rollout = sample_completions(
            model, tokenizer, chunk, prompts, num_generations=1,
            max_new_tokens=cfg.max_completion_length, do_sample=False, eos_ids=eos_ids, amp=amp,
        )  # fmt: skip
        completions += rollout.completions
        correct += sum(accuracy_reward(rollout.completions, [r["answer"] for r in chunk]))
    return correct / len(rows), completions


# --- checkpoints ---------------------------------------------------------------------------------


def save_checkpoint(model, tokenizer, out_dir: str | os.PathLike, config: dict | None = None):
    """Write a Hugging Face checkpoint (safetensors, config, tokenizer) into ``out_dir``.

    Every file is first written (and fsynced) to a temporary folder inside ``out_dir``, then
    moved into place with ``os.replace`` (atomic on one file system): a reader never sees a
    half-written file, and a save interrupted while writing leaves the previous checkpoint
    intact. The moves are atomic file by file, not as a set; the weights move last, and within
    one run they are the only file whose content changes between saves.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".saving-", dir=out))
    try:
        with quiet_transformers():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        if config is not None:
            (tmp / "grpo_config.json").write_text(json.dumps(config, indent=2) + "\n")
        for path in tmp.iterdir():  # on disk before any old file is replaced
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        # weights last: within a run only they (and nothing the loader reads first) change
        for path in sorted(tmp.iterdir(), key=lambda p: p.suffix == ".safetensors"):
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- the training loop ---------------------------------------------------------------------------


def load_math_rows(dataset: str, split: str) -> list[dict]:
    """Rows ``{"prompt", "answer"}`` of a named dataset (see ``data.load_math_dataset``)."""
    from .data import load_math_dataset

    rows = load_math_dataset(dataset, split)
    check_rows(rows, f"{dataset!r} ({split})")
    return rows


def load_train_eval_rows(cfg: MathConfig) -> tuple[list[dict], list[dict]]:
    """Training rows and the first ``eval_n`` held-out rows of ``cfg``.

    Held out means never trained on: evaluation rows whose prompt is also a training prompt are
    an error (some datasets, e.g. ``gsm8k_sample`` or a ``.jsonl`` file, have one split, so
    ``eval_split`` cannot separate them), unless ``allow_eval_overlap`` asks for it knowingly.
    """
    train_rows = load_math_rows(cfg.dataset, "train")
    held_out, eval_rows = load_eval_rows(cfg)
    check_held_out(
        train_rows, eval_rows, cfg.allow_eval_overlap,
        f" ({cfg.dataset!r}; evaluation: {held_out!r}, eval_split={cfg.eval_split!r})",
    )  # fmt: skip
    return train_rows, eval_rows


def load_eval_rows(cfg: MathConfig, n: int | None = None) -> tuple[str, list[dict]]:
    """The evaluation data set's name and its first ``n`` (default ``eval_n``) rows."""
    held_out = cfg.eval_split if cfg.eval_split.endswith(".jsonl") else cfg.dataset
    return held_out, load_math_rows(held_out, cfg.eval_split)[: cfg.eval_n if n is None else n]


def count_overlap(train_rows: Sequence[dict], eval_rows: Sequence[dict]) -> int:
    """How many evaluation rows have a prompt (ignoring surrounding spaces) seen in training."""
    seen = {row["prompt"].strip() for row in train_rows}
    return sum(row["prompt"].strip() in seen for row in eval_rows)


def check_held_out(
    train_rows: Sequence[dict], eval_rows: Sequence[dict], allow_overlap: bool, where: str = ""
) -> int:
    """The overlap count; an error when it is not 0 and ``allow_overlap`` (``allow_eval_overlap``)
    does not ask for it knowingly."""
    overlap = count_overlap(train_rows, eval_rows)
    if overlap and not allow_overlap:
        raise ValueError(
            f"{overlap} of {len(eval_rows)} evaluation prompts are also training prompts{where}, "
            "so the accuracy would not be held out; give held-out rows (eval_split=FILE.jsonl, "
            "--eval-split) or set allow_eval_overlap=True (--allow-eval-overlap true) to "
            "measure on training problems knowingly"
        )
    return overlap


def setup(cfg: MathConfig):
    """Seed, pick device and dtype, load the model and tokenizer: ``(model, tokenizer)``."""
    seed_everything(cfg.seed)
    device = pick_device(cfg.device)
    pick_dtype(device, cfg.dtype)  # validates the dtype for this device early
    return load_model(cfg.model, device)


def train_math(
    cfg: MathConfig,
    model=None,
    tokenizer=None,
    train_rows: Sequence[dict] | None = None,
    eval_rows: Sequence[dict] | None = None,
    reward_funcs: Sequence[RewardFunc] | None = None,
    reward_weights: Sequence[float] | None = None,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    on_step: Callable[[dict], None] | None = None,
) -> tuple[LMGRPOTrainer, list[dict]]:
    """Train with GRPO; returns the trainer (``.model``) and one metrics dict per step.

    Held-out greedy accuracy is measured before the first step and after the last (and every
    ``eval_every`` steps); evaluation time is not counted in ``train_s``. With ``out_dir`` the
    model is saved there (every ``save_every`` steps and at the end) with ``metrics.jsonl``.
    """
    if model is None or tokenizer is None:
        model, tokenizer = setup(cfg)
    else:
        seed_everything(cfg.seed)
    if train_rows is None:
        train_rows, default_eval = load_train_eval_rows(cfg)
        eval_rows = default_eval if eval_rows is None else eval_rows
    elif eval_rows is None:
        eval_rows = load_eval_rows(cfg)[1]
    check_rows(train_rows, "training", needs_answer=reward_funcs is None)
    check_rows(eval_rows, "evaluation", needs_answer=True)
    eval_rows = list(eval_rows)[: cfg.eval_n]
    overlap = check_held_out(train_rows, eval_rows, cfg.allow_eval_overlap)
    trainer = LMGRPOTrainer(cfg, model, tokenizer, reward_funcs, reward_weights)
    prompts = [format_prompt(r["prompt"], tokenizer, cfg.prompt_template) for r in train_rows]
    check_prompt_lengths(prompts, tokenizer, model, cfg.max_completion_length)

    metrics_file = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        metrics_file = (Path(out_dir) / "metrics.jsonl").open("w")
    history: list[dict] = []

    def log(record: dict) -> None:
        history.append(record)
        if metrics_file is not None:
            metrics_file.write(json.dumps(record) + "\n")
            metrics_file.flush()
        if on_step is not None:
            on_step(record)

    accuracy, _ = trainer.evaluate(eval_rows)
    log({"step": 0, "train_s": 0.0, "eval_accuracy": accuracy, "eval_n": len(eval_rows),
         "eval_overlap": overlap})  # fmt: skip
    generator = torch.Generator().manual_seed(cfg.seed)
    order: list[int] = []
    train_s = 0.0
    bar = tqdm(total=cfg.max_steps, desc="GRPO " + Path(cfg.model).name, disable=not progress)
    try:
        for step in range(1, cfg.max_steps + 1):
            while len(order) < cfg.prompts_per_step:  # fresh shuffled passes over the data
                order += torch.randperm(len(train_rows), generator=generator).tolist()
            batch = [train_rows[i] for i in order[: cfg.prompts_per_step]]
            del order[: cfg.prompts_per_step]
            record, _ = trainer.step(batch)
            train_s += record["step_s"]
            record["train_s"] = round(train_s, 3)
            if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.max_steps:
                record["eval_accuracy"], _ = trainer.evaluate(eval_rows)
            stop = cfg.time_budget_s > 0 and train_s >= cfg.time_budget_s
            if step == cfg.max_steps or stop:
                record["eval_accuracy"], _ = trainer.evaluate(eval_rows)
            record["peak_memory_mb"] = round(peak_memory_mb(trainer.device), 1)
            log(record)
            if out_dir is not None and cfg.save_every and step % cfg.save_every == 0:
                save_checkpoint(model, tokenizer, out_dir, cfg.to_dict())
            bar.update(1)
            bar.set_postfix(reward=f"{record['reward_mean']:.2f}", kl=f"{record['kl']:.3f}")
            if stop:
                break
    finally:
        bar.close()
        if metrics_file is not None:
            metrics_file.close()
    if out_dir is not None:
        save_checkpoint(model, tokenizer, out_dir, cfg.to_dict())
    return trainer, history


def plot_history(history: Sequence[dict], path: str | os.PathLike | None = None, title: str = ""):
    """Reward, held-out accuracy and KL against training seconds; saved to ``path`` if given."""
    from .plots import plt

    steps = [r for r in history if "reward_mean" in r]
    evals = [r for r in history if "eval_accuracy" in r]
    x = [r["train_s"] for r in steps]
    window = max(1, len(steps) // 20)

    def smooth(values: list[float]) -> list[float]:
        return [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
                for i in range(len(values))]  # fmt: skip

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, key, label in ((axes[0], "reward_mean", "mean reward (sampled)"),
                           (axes[2], "kl", "KL to the reference (k3)")):  # fmt: skip
        values = [r[key] for r in steps]
        ax.plot(x, values, alpha=0.3, label="per step")
        ax.plot(x, smooth(values), label=f"mean of {window} steps")
        ax.set_ylabel(label)
        ax.legend(loc="upper left", fontsize="small")
    axes[1].plot([r["train_s"] for r in evals], [r["eval_accuracy"] for r in evals], "o-")
    axes[1].set_ylabel("held-out greedy accuracy")
    for ax in axes:
        ax.set_xlabel("training seconds")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
